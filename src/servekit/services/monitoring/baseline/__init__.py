"""Baselines: built from training data, written in SageMaker's shapes, kept as versioned folders."""
