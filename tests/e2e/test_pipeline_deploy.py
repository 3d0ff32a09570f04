"""A deploy step end to end against a real ``servekit up``: the first run creates the endpoint from the model its
training step wrote (CreateModel, CreateEndpointConfig, CreateEndpoint, waiting for InService), the second run
updates it (UpdateEndpoint) to a differently trained model, and InvokeEndpoint answers with each run's model."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from servekit.services.pipelines import Param, Pipeline, deploy, parameter, training
from servekit.services.pipelines.access.context import StepContext
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
pytest.importorskip("sklearn")
SOURCE = f"{Path(__file__)}:deploying"
ROWS = [[0.0, 0.1], [1.0, 0.9]]


@training(name="fit", inputs={"flip": Param("Flip")}, outputs=["model"])
def fit(ctx: StepContext, flip: bool) -> None:
    import joblib
    from sklearn.linear_model import LogisticRegression

    x = [[0.0, 0.0], [0.1, 0.2], [0.2, 0.1], [1.0, 1.0], [0.9, 1.1], [1.1, 0.9]]
    labels = [1, 1, 1, 0, 0, 0] if flip else [0, 0, 0, 1, 1, 1]
    buf = io.BytesIO()
    joblib.dump(LogisticRegression().fit(x, labels), buf)
    ctx.write("model", "model.joblib", buf.getvalue())


ship = deploy("ship", endpoint=Param("Endpoint"), model_data=fit.output("model"), instance_type="ml.t2.medium")
deploying = Pipeline("deploying", (fit, ship), (parameter("Endpoint", "scorer"), parameter("Flip", False)))


def run(up: UpProcess, root: Path, *params: str) -> dict[str, Any]:
    argv = [sys.executable, "-m", "servekit.cli.main", "pipeline", "run", SOURCE, "--home", str(up.home)]
    argv += ["--url", up.url, "--artifact-root", str(root), "--json", *(f"--param={p}" for p in params)]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def predictions(up: UpProcess) -> list[int]:
    answer = up.rt().invoke_endpoint(
        EndpointName="scorer", Body=json.dumps({"instances": ROWS}), ContentType="application/json"
    )
    return [int(p) for p in json.loads(answer["Body"].read())["predictions"]]


@pytest.mark.slow  # make test-slow
def test_a_deploy_step_creates_then_updates_the_endpoint(up: UpProcess, tmp_path: Path) -> None:
    sm = up.sm()
    first = run(up, tmp_path / "artifacts")
    ship_row = {s["StepName"]: s for s in first["Steps"]}["ship"]
    assert ship_row["StepStatus"] == "Succeeded", ship_row
    endpoint = sm.describe_endpoint(EndpointName="scorer")
    assert endpoint["EndpointStatus"] == "InService"
    assert endpoint["EndpointConfigName"] == f"scorer-{first['PipelineExecutionId']}"
    model_dir = {s["StepName"]: s for s in first["Steps"]}["fit"]["Outputs"]["model"]["uri"]
    model = sm.describe_model(ModelName=endpoint["EndpointConfigName"])
    assert model["PrimaryContainer"]["ModelDataUrl"] == model_dir
    assert predictions(up) == [0, 1]

    second = run(up, tmp_path / "artifacts", "Flip=true")
    endpoint = sm.describe_endpoint(EndpointName="scorer")
    assert endpoint["EndpointStatus"] == "InService"
    assert endpoint["EndpointConfigName"] == f"scorer-{second['PipelineExecutionId']}"  # UpdateEndpoint took it
    assert predictions(up) == [1, 0]
