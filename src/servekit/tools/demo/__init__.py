"""Deterministic example models for the demo, the tests and the docs."""
