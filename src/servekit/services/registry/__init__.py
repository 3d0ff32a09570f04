"""SageMaker's model registry: model package groups, versions, approval and deploy on approval."""
