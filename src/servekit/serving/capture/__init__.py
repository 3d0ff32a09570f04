"""Data capture: sampled request/response records in SageMaker's format, written off the hot path."""
