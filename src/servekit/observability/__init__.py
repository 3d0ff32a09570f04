"""Prometheus metrics and logging set-up; reached from the core only through ports."""
