from starlette.testclient import TestClient


def test_predict_row_format(client: TestClient) -> None:
    r = client.post("/v1/models/iris:predict", json={"instances": [[5.1, 3.5, 1.4, 0.2]]})
    assert r.status_code == 200, r.text
    assert r.json()["predictions"][0]["label"] == 0
