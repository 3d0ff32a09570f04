"""SageMaker hosting: models, endpoint configs and endpoints; their fleets, rollouts, instance types and model
artifacts."""
