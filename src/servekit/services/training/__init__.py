"""SageMaker training jobs on ``servekit up``, run as local processes in a sandbox that shows them ``/opt/ml`` as
SageMaker's containers do (no Docker)."""
