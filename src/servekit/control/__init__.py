"""The hosting control plane: SageMaker-compatible models, endpoint configs and endpoints; instances; routing."""
