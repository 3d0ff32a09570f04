"""Model quality end to end: a real ``servekit serve`` (and a ``servekit up`` endpoint, through boto3) capture the
caller's inference id with each prediction; labels joined by that id give per-window metrics equal to
scikit-learn's on the answers the clients received."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests
from sklearn import metrics as sk
from sklearn.datasets import load_iris
from tests.e2e.conftest import ServerProcess

from servekit.testing.hosting import UpProcess
from servekit.tools.demo.build import iris_onnx

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}


def monitor(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", "monitor", *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def judge(tmp: Path, capture: Path, labels: dict[str, int]) -> dict[str, Any]:
    """Ingest the labels, run model quality over one day, return the single window."""
    (tmp / "labels").mkdir()
    (tmp / "labels" / "y.csv").write_text("inference_id,label\n" + "".join(f"{k},{v}\n" for k, v in labels.items()))
    monitor("labels", "--data", str(tmp / "labels"), "--id-column", "inference_id", "--store", str(tmp / "store"))
    constraints = {"multiclass_classification_constraints": {"accuracy": {"threshold": 0.99}}}
    (tmp / "c.json").write_text(json.dumps(constraints))
    monitor(
        "quality", "run", "--capture", str(capture), "--labels", str(tmp / "store"), "--baseline", str(tmp / "c.json"),
        "--output", str(tmp / "q"), "--window", "1d", "--min-window-rows", "10",
    )  # fmt: skip
    doc = json.loads((tmp / "q" / "quality_metrics.json").read_text())
    (window,) = [w for w in doc["windows"] if w["predictions"]]
    return dict(window)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_serve_records_the_inference_id_and_quality_matches_sklearn(
    server_factory: Any, tmp_path: Path, fmt: str
) -> None:
    iris_onnx(tmp_path / "iris" / "1")
    dest = tmp_path / "capture"
    srv: ServerProcess = server_factory(
        "--model_base_path", str(tmp_path / "iris"), "--model_name", "iris",
        "--capture_destination", str(dest), "--capture_format", fmt,
    )  # fmt: skip
    srv.wait_ready()
    x, y = load_iris(return_X_y=True)
    rng = np.random.default_rng(0)
    rows = rng.choice(len(x), 120, replace=False)
    truth = y[rows].copy()
    truth[:12] = (truth[:12] + 1) % 3  # some labels the model gets wrong
    labels, preds, probs = {}, [], []
    with requests.Session() as s:
        for i, r in enumerate(rows):
            rid = f"iris-{i}"
            resp = s.post(
                f"{srv.url}/invocations",
                json=[x[r].tolist()],
                headers={"X-Amzn-SageMaker-Inference-Id": rid},
                timeout=10,
            )
            assert resp.status_code == 200, resp.text
            (answer,) = resp.json()["predictions"]
            preds.append(answer["label"])
            probs.append(answer["probabilities"])
            labels[rid] = int(truth[i])
    srv.stop()
    window = judge(tmp_path, dest, labels)
    assert window["labelled"] == window["predictions"] == 120
    proba = np.array(probs, dtype=np.float32).astype(np.float64)  # the model's float32, as captured
    m = window["metrics"]
    assert abs(m["accuracy"] - sk.accuracy_score(truth, preds)) < 1e-9
    assert abs(m["f1_macro"] - sk.f1_score(truth, preds, average="macro")) < 1e-9
    assert abs(m["auc"] - sk.roc_auc_score(truth, proba, multi_class="ovr")) < 1e-9
    with warnings.catch_warnings():  # float32 probabilities sum to 1 within 1e-7, not within sklearn's 1.5e-8
        warnings.simplefilter("ignore", UserWarning)
        expected_loss = sk.log_loss(truth, proba)
    assert abs(m["log_loss"] - expected_loss) < 1e-6
    assert window["confusion_matrix"]["matrix"] == sk.confusion_matrix(truth, preds).tolist()
    assert [v["metric_name"] for v in window["violations"]] == ["accuracy"]


def test_an_endpoint_records_boto3s_inference_id(up: UpProcess, tmp_path: Path) -> None:
    iris_onnx(tmp_path / "iris" / "1")
    sm, rt = up.sm(), up.rt()
    dest = tmp_path / "capture"
    sm.create_model(ModelName="q-m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(tmp_path / "iris")})
    sm.create_endpoint_config(
        EndpointConfigName="q-cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "q-m", "InitialInstanceCount": 1, "InstanceType": "ml.t2.medium"}
        ],
        DataCaptureConfig={
            "EnableCapture": True,
            "InitialSamplingPercentage": 100,
            "DestinationS3Uri": f"file://{dest}",
            "CaptureOptions": [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}],
        },
    )
    sm.create_endpoint(EndpointName="q", EndpointConfigName="q-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="q", WaiterConfig=FAST)
    x, y = load_iris(return_X_y=True)
    labels, preds = {}, []
    for i in range(0, 150, 5):
        out = rt.invoke_endpoint(
            EndpointName="q", Body=json.dumps([x[i].tolist()]), ContentType="application/json", InferenceId=f"e-{i}"
        )
        preds.append(json.loads(out["Body"].read())["predictions"][0]["label"])
        labels[f"e-{i}"] = int(y[i])
    sm.delete_endpoint(EndpointName="q")  # instances stop gracefully: capture files are published
    sm.get_waiter("endpoint_deleted").wait(EndpointName="q", WaiterConfig=FAST)
    records = [json.loads(line) for f in dest.rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert sorted(r["eventMetadata"]["inferenceId"] for r in records) == sorted(labels)
    window = judge(tmp_path, dest, labels)
    assert window["labelled"] == 30
    assert abs(window["metrics"]["accuracy"] - sk.accuracy_score(list(labels.values()), preds)) < 1e-9
