"""Copy-paste requests for every protocol against the demo models."""

from __future__ import annotations


def tour(port: int = 8501, sagemaker_port: int = 8080) -> str:
    h = f"http://localhost:{port}"
    s = f"http://localhost:{sagemaker_port}"
    return f"""\
# TF Serving REST
curl {h}/v1/models/iris
curl {h}/v1/models/iris/metadata
curl -d '{{"instances": [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]]}}' {h}/v1/models/iris:predict
curl -d '{{"inputs": {{"X": [[5.1, 3.5, 1.4, 0.2]]}}}}' {h}/v1/models/iris/versions/1:predict
curl -d '{{"instances": [[5.1, 3.5, 1.4, 0.2]]}}' {h}/v1/models/iris/labels/stable:predict
curl -d '{{"examples": [{{"sepal_length": 5.1, "sepal_width": 3.5, "petal_length": 1.4, "petal_width": 0.2}}]}}' \\
     {h}/v1/models/iris_sklearn:classify
curl -d '{{"examples": [{{"x": [0.03, 0.05, 0.06, 0.02, -0.04, -0.03, -0.04, -0.002, 0.02, -0.02]}}]}}' \\
     {h}/v1/models/diabetes:regress

# KServe V2 (tritonclient.http works too)
curl {h}/v2/health/ready -o /dev/null -w '%{{http_code}}\\n'
curl {h}/v2/models/iris
curl -d '{{"inputs": [{{"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}}]}}' \\
     {h}/v2/models/iris/infer

# SageMaker container contract
curl {s}/ping -o /dev/null -w '%{{http_code}}\\n'
curl -H 'Content-Type: text/csv' -H 'X-Amzn-SageMaker-Custom-Attributes: tfs-model-name=iris' \\
     --data-binary $'5.1,3.5,1.4,0.2\\n6.7,3.0,5.2,2.3' {s}/invocations
curl -H 'Content-Type: application/json' -H 'X-Amzn-SageMaker-Custom-Attributes: tfs-model-name=iris_handler' \\
     -d '{{"features": [[5.1, 3.5, 1.4, 0.2]]}}' {s}/invocations

# Metrics
curl {h}/monitoring/prometheus/metrics
"""
