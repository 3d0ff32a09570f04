"""Executions of SageMaker pipeline definitions on ``servekit up``: each step calls the plane's own operation (see
:mod:`servekit.services.pipelines.execution.executor`)."""
