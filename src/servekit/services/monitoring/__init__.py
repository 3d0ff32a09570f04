"""Drift and model-quality monitoring of captured traffic: baselines, windows, verdicts, alerts, schedules."""
