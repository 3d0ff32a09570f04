"""SageMaker's built-in algorithms servekit runs in a training job's sandbox (``python -m`` this package's modules)."""
