"""KServe V2 request and output parameters must be objects: anything else is a 400 before the model runs."""

import pytest
from starlette.testclient import TestClient

INPUT = {"name": "X", "shape": [1, 4], "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"inputs": [INPUT], "parameters": ["x"]}, '"parameters" must be an object'),
        ({"inputs": [INPUT], "outputs": [{"name": "label", "parameters": "binary_data"}]}, "output 'label'"),
    ],
)
def test_parameters_must_be_objects(client: TestClient, body: dict[str, object], fragment: str) -> None:
    r = client.post("/v2/models/iris/infer", json=body)
    assert r.status_code == 400, r.text
    assert fragment in r.json()["error"]
