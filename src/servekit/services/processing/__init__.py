"""SageMaker processing jobs on ``servekit up``: the container's command in the training jobs' sandbox, inputs and
outputs at their ``LocalPath`` under ``/opt/ml/processing``."""
