"""Object storage end to end, on a real S3-compatible server (moto's server mode, tests/e2e/s3_fixtures.py) reached
through AWS_ENDPOINT_URL: an endpoint deployed from ``s3://…/model.tar.gz`` captures to ``s3://``; a batch transform
reads its model, input and writes its output on ``s3://``; ``servekit monitor`` builds a baseline from ``s3://`` and
reads the capture back from ``s3://``. The secret key never shows in a log or an error message."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.exceptions
import numpy as np
import pytest
import yaml
from tests.e2e.s3_fixtures import S3Server, s3_server
from tests.unit.tools.export.k8s_schemas import validate

from servekit.testing.hosting import UpProcess

__all__ = ["s3_server"]  # the fixture, used by name below

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}
FACTOR = 2.0
INFERENCE_PY = textwrap.dedent(
    f"""
    import json

    def model_fn(model_dir):
        return {FACTOR}

    def transform_fn(model, data, content_type, accept):
        return json.dumps({{"out": [[x * model for x in row] for row in json.loads(data)]}}), "application/json"
    """
)


def tar_gz(files: dict[str, bytes]) -> bytes:
    """SageMaker's model.tar.gz: the model's files at the root."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def servekit(*args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, with the AWS variables of the test's environment."""
    return subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "160"},
        timeout=300,
    )


def keys(s3: Any, bucket: str, prefix: str = "") -> list[str]:
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


@pytest.fixture
def up(s3_server: S3Server, tmp_path: Path) -> Iterator[UpProcess]:
    """servekit up started after the AWS variables are set: it and its instances reach S3 through them."""
    u = UpProcess(tmp_path / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


@pytest.mark.slow  # make test-slow
def test_model_capture_transform_and_monitor_on_s3(s3_server: S3Server, up: UpProcess, tmp_path: Path) -> None:
    s3 = s3_server.client()
    for bucket in ("models", "capture", "batch"):
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket="models", Key="churn/model.tar.gz", Body=tar_gz({"code/inference.py": INFERENCE_PY.encode()}))
    s3.put_object(Bucket="models", Key="churn-dir/1/code/inference.py", Body=INFERENCE_PY.encode())

    # ---- an endpoint from s3://…/model.tar.gz, capturing to s3:// --------------------------------------------
    sm, rt = up.sm(), up.rt()
    sm.create_model(
        ModelName="churn", PrimaryContainer={"Image": "servekit", "ModelDataUrl": "s3://models/churn/model.tar.gz"}
    )
    sm.create_endpoint_config(
        EndpointConfigName="churn-cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "churn", "InitialInstanceCount": 1, "InstanceType": "ml.t2.medium"}
        ],
        DataCaptureConfig={
            "EnableCapture": True,
            "InitialSamplingPercentage": 100,
            "DestinationS3Uri": "s3://capture/endpoints",
            "CaptureOptions": [{"CaptureMode": "Input"}, {"CaptureMode": "Output"}],
        },
    )
    sm.create_endpoint(EndpointName="churn", EndpointConfigName="churn-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="churn", WaiterConfig=FAST)
    rng = np.random.default_rng(7)
    rows = np.round(rng.normal(5.0, 1.0, size=(150, 2)), 4).tolist()
    for row in rows:
        r = rt.invoke_endpoint(EndpointName="churn", Body=json.dumps([row]), ContentType="application/json")
        assert json.loads(r["Body"].read()) == {"out": [[x * FACTOR for x in row]]}
    # the same endpoint exported for Kubernetes: its pods fetch the archive from s3:// and capture to s3://, and
    # the init container's command, run here against the same server, makes the model base servekit serves
    exported = servekit("export", "k8s", "--endpoint", "churn", "--url", up.url, "--home", str(up.home))
    assert exported.returncode == 0 and not exported.stderr, exported.stderr
    docs = [d for d in yaml.safe_load_all(exported.stdout) if d]
    for doc in docs:
        validate(doc)
    (pod,) = [d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Deployment"]
    (fetch,) = pod["initContainers"]
    assert fetch["command"] == ["servekit", "export", "fetch-model", "s3://models/churn/model.tar.gz", "/opt/ml/model"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--capture_destination") + 1] == "s3://capture/endpoints"
    fetched = servekit(*fetch["command"][1:-1], str(tmp_path / "pod" / "opt-ml-model"))
    assert fetched.returncode == 0, fetched.stderr
    assert (tmp_path / "pod" / "opt-ml-model" / "1" / "code" / "inference.py").read_text() == INFERENCE_PY

    sm.delete_endpoint(EndpointName="churn")  # instances stop gracefully: open capture files are published
    sm.get_waiter("endpoint_deleted").wait(EndpointName="churn", WaiterConfig=FAST)
    captured = keys(s3, "capture", "endpoints/churn/A/")
    assert captured and all(k.endswith(".jsonl") for k in captured), keys(s3, "capture")
    records = [
        json.loads(line)
        for k in captured
        for line in s3.get_object(Bucket="capture", Key=k)["Body"].read().splitlines()
        if line.strip()
    ]
    assert len(records) == len(rows)
    assert all({"endpointInput", "endpointOutput"} <= set(r["captureData"]) for r in records)

    # ---- a transform job: model, input and output on s3:// ---------------------------------------------------
    lines = [json.dumps([row]) for row in rows[:20]]
    s3.put_object(Bucket="batch", Key="in/rows.jsonl", Body=("\n".join(lines) + "\n").encode())
    job = servekit(
        "transform", "run", "--job-name", "s3-job", "--model", "s3://models/churn-dir/1",
        "--input", "s3://batch/in/", "--output-path", "s3://batch/out/", "--content-type", "application/json",
        "--split-type", "Line", "--batch-strategy", "SingleRecord", "--assemble-with", "Line",
        "--home", str(tmp_path / "transform-home"), "--quiet",
    )  # fmt: skip
    assert job.returncode == 0, job.stdout + job.stderr
    assert keys(s3, "batch", "out/") == ["out/rows.jsonl.out"]
    out = s3.get_object(Bucket="batch", Key="out/rows.jsonl.out")["Body"].read().decode().splitlines()
    assert [json.loads(line) for line in out] == [{"out": [[x * FACTOR for x in row]]} for row in rows[:20]]

    # ---- the monitor: a baseline from s3://, the capture read back from s3:// -------------------------------
    train = np.round(rng.normal(5.0, 1.0, size=(2000, 2)), 4)
    csv = "f1,f2\n" + "\n".join(f"{a},{b}" for a, b in train) + "\n"
    s3.put_object(Bucket="batch", Key="train/train.csv", Body=csv.encode())
    base = servekit("monitor", "baseline", "--data", "s3://batch/train/train.csv", "--out", str(tmp_path / "baseline"))
    assert base.returncode == 0, base.stdout + base.stderr
    run = servekit(
        "monitor", "run", "--baseline", str(tmp_path / "baseline"), "--data", "s3://capture/endpoints/churn/A",
        "--out", str(tmp_path / "monitor"), "--window", "24h", "--min-window-rows", "100", "--no-report",
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    doc = json.loads((tmp_path / "monitor" / "metrics.json").read_text())
    judged = [w for w in doc["windows"] if w["status"] == "ok"]
    assert sum(w["rows"] for w in judged) == len(rows)  # every captured request came back from s3://
    assert set(judged[0]["features"]) == {"f1", "f2"}

    # ---- what goes wrong says so, without the credentials ----------------------------------------------------
    sm.create_model(
        ModelName="gone", PrimaryContainer={"Image": "servekit", "ModelDataUrl": "s3://models/missing/model.tar.gz"}
    )
    sm.create_endpoint_config(
        EndpointConfigName="gone-cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "gone", "InitialInstanceCount": 1, "InstanceType": "ml.t2.medium"}
        ],
    )
    sm.create_endpoint(EndpointName="gone", EndpointConfigName="gone-cfg")
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("endpoint_in_service").wait(EndpointName="gone", WaiterConfig=FAST)
    reason = sm.describe_endpoint(EndpointName="gone")["FailureReason"]
    assert "s3://models/missing/model.tar.gz" in reason and "no such object" in reason, reason
    bad_job = servekit(
        "transform", "run", "--job-name", "nowhere", "--model", "s3://models/churn-dir/1",
        "--input", "s3://no-such-bucket/in/", "--output-path", "s3://batch/out2/",
        "--home", str(tmp_path / "transform-home"), "--quiet",
    )  # fmt: skip
    assert bad_job.returncode == 1, bad_job.stdout + bad_job.stderr
    assert "the input s3://no-such-bucket/in/ does not exist" in bad_job.stdout, bad_job.stdout
    bad_monitor = servekit(
        "monitor", "run", "--baseline", str(tmp_path / "baseline"), "--data", "s3://capture/nothing-here",
        "--out", str(tmp_path / "monitor2"), "--window", "24h",
    )  # fmt: skip
    assert bad_monitor.returncode == 1 and "Traceback" not in bad_monitor.stderr
    assert "'s3://capture/nothing-here' does not exist" in bad_monitor.stderr, bad_monitor.stderr

    up.stop()
    secret, key_id = s3_server.secret_access_key, s3_server.access_key_id
    texts = {
        "moto server log": s3_server.log(),
        "servekit up log": up.log.read_text(errors="replace"),
        "FailureReason": reason,
        **{f"{p.name}": p.read_text(errors="replace") for p in (up.home / "instances").glob("*.log")},
        **{
            name: r.stdout + r.stderr
            for name, r in {
                "transform": job,
                "transform error": bad_job,
                "baseline": base,
                "monitor": run,
                "monitor error": bad_monitor,
                "export": exported,
                "fetch-model": fetched,
            }.items()
        },
    }
    assert any(name.endswith(".log") for name in texts), "no instance log was read"
    assert "GET /capture" in texts["moto server log"]  # the server did see servekit's requests
    for name, text in texts.items():
        assert secret not in text, f"the secret key is in the {name}"
        if name != "moto server log":
            assert key_id not in text, f"the access key id is in the {name}"
