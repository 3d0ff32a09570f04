"""The example pipeline end to end against a real ``servekit up``: ``servekit pipeline run`` trains, evaluates and
registers; boto3 approves the package and deploys it; InvokeEndpoint answers with the trained model's predictions;
``servekit lineage`` traces the package to its run, data and code hash and finds the endpoint; a re-run reuses the
cached training step, and a failing condition stops the run before register. Then the group gets a
deploy-on-approval rule (its tags): a second run registers a differently trained version, approving it with boto3
updates the live endpoint, and InvokeEndpoint answers with that version's predictions."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.services.registry.deploy import rule_tags
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
EXAMPLE = "servekit.services.pipelines.examples.iris:pipeline"
FAST = {"Delay": 1, "MaxAttempts": 180}


def servekit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servekit.cli.main", *args], capture_output=True, text=True, timeout=600
    )


def run_pipeline(up: UpProcess, root: Path, *params: str) -> tuple[int, dict[str, Any]]:
    flags = [f"--param={p}" for p in params]
    done = servekit(
        "pipeline",
        "run",
        EXAMPLE,
        "--home",
        str(up.home),
        "--url",
        up.url,
        "--artifact-root",
        str(root),
        "--json",
        *flags,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def poll(what: Callable[[], Any], until: Callable[[Any], bool], timeout_s: float = 180) -> Any:
    """Call ``what`` every 0.2 s until ``until`` holds (another process's progress)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = what()
        if until(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"still {last!r} after {timeout_s}s")


def steps(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["StepName"]: s for s in doc["Steps"]}


@pytest.mark.slow  # make test-slow
def test_example_pipeline_registers_deploys_and_traces(up: UpProcess, tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    code, doc = run_pipeline(up, root, "ModelPackageGroup=iris-e2e")
    assert code == 0, doc
    assert doc["PipelineExecutionStatus"] == "Succeeded"
    ran = steps(doc)
    package_arn = ran["register"]["Metadata"]["RegisterModel"]["Arn"]
    assert ran["accuracy-too-low"]["StepStatus"] is None  # the else branch never ran

    sm, rt = up.sm(), up.rt()
    package = sm.describe_model_package(ModelPackageName=package_arn)
    assert package["MetadataProperties"]["GeneratedBy"] == doc["PipelineExecutionArn"]
    assert package["ModelApprovalStatus"] == "PendingManualApproval"
    model_dir = ran["train"]["Outputs"]["model"]["uri"]
    assert package["InferenceSpecification"]["Containers"][0]["ModelDataUrl"] == model_dir
    stats = package["ModelMetrics"]["ModelQuality"]["Statistics"]["S3Uri"]
    accuracy = json.loads(Path(stats).read_text())["accuracy"]
    assert accuracy >= 0.8

    sm.update_model_package(ModelPackageArn=package_arn, ModelApprovalStatus="Approved", ApprovalDescription="ok")
    sm.create_model(ModelName="iris-e2e", PrimaryContainer={"ModelPackageName": package_arn})
    sm.create_endpoint_config(
        EndpointConfigName="iris-e2e",
        ProductionVariants=[{"VariantName": "AllTraffic", "ModelName": "iris-e2e", "InstanceType": "ml.t2.medium"}],
    )
    sm.create_endpoint(EndpointName="iris-e2e", EndpointConfigName="iris-e2e")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="iris-e2e", WaiterConfig=FAST)
    rows = [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5]]
    answer = rt.invoke_endpoint(
        EndpointName="iris-e2e", Body=json.dumps({"instances": rows}), ContentType="application/json"
    )
    served = json.loads(answer["Body"].read())["predictions"]
    import joblib

    local = joblib.load(Path(model_dir) / "model.joblib").predict(rows).tolist()
    assert [int(p) for p in served] == local == [0, 2, 1]

    traced = servekit("lineage", package_arn, "--home", str(up.home), "--url", up.url, "--json")
    assert traced.returncode == 0, traced.stderr
    lineage = json.loads(traced.stdout)
    assert lineage["run"]["run_id"] == doc["PipelineExecutionId"]
    artifact = lineage["artifact"]
    assert artifact["step"] == "train" and artifact["code_hash"] == ran["train"]["CodeHash"]
    [data] = artifact["inputs"]
    assert data["uri"] == ran["make-data"]["Outputs"]["train"]["uri"]
    assert data["sha256"] == ran["make-data"]["Outputs"]["train"]["sha256"]
    assert data["lineage"]["step"] == "make-data" and data["lineage"]["parameters"] == {"seed": 7, "test_share": 0.3}
    assert [(e["EndpointName"], e["VariantName"]) for e in lineage["endpoints"]] == [("iris-e2e", "AllTraffic")]
    text = servekit("lineage", str(Path(model_dir) / "model.joblib"), "--home", str(up.home))
    assert text.returncode == 0, text.stderr
    assert f"run {doc['PipelineExecutionId']} of iris, step train" in text.stdout
    assert f"code hash  {ran['train']['CodeHash']}" in text.stdout

    # Deploy on approval: the group's rule updates iris-e2e when a version is approved. A second run trains a
    # one-iteration model (it answers 2 everywhere, unlike the first), registered as version 2 and approved with boto3.
    group_arn = sm.describe_model_package_group(ModelPackageGroupName="iris-e2e")["ModelPackageGroupArn"]
    sm.add_tags(ResourceArn=group_arn, Tags=rule_tags("iris-e2e", deployment="all wait=0"))
    code, second = run_pipeline(up, root, "ModelPackageGroup=iris-e2e", "MaxIter=1", "MinAccuracy=0.3")
    assert code == 0, second
    v2 = steps(second)["register"]["Metadata"]["RegisterModel"]["Arn"]
    assert sm.describe_model_package(ModelPackageName=v2)["ModelPackageVersion"] == 2
    v2_dir = steps(second)["train"]["Outputs"]["model"]["uri"]
    assert v2_dir != model_dir
    sm.update_model_package(ModelPackageArn=v2, ModelApprovalStatus="Approved", ApprovalDescription="v2")
    live = poll(
        lambda: sm.describe_endpoint(EndpointName="iris-e2e"),
        lambda d: d["EndpointStatus"] == "InService" and d["EndpointConfigName"] != "iris-e2e",
    )
    variant = sm.describe_endpoint_config(EndpointConfigName=live["EndpointConfigName"])["ProductionVariants"][0]
    assert sm.describe_model(ModelName=variant["ModelName"])["PrimaryContainer"]["ModelPackageName"] == v2
    answer = rt.invoke_endpoint(
        EndpointName="iris-e2e", Body=json.dumps({"instances": rows}), ContentType="application/json"
    )
    served_v2 = [int(p) for p in json.loads(answer["Body"].read())["predictions"]]
    local_v2 = joblib.load(Path(v2_dir) / "model.joblib").predict(rows).tolist()
    assert served_v2 == local_v2 == [2, 2, 2]
    assert sm.describe_model_package(ModelPackageName=package_arn)["ModelApprovalStatus"] == "Approved"  # kept

    # Again with a bar the model cannot reach: training is reused from the cache, and nothing is registered.
    code, strict = run_pipeline(up, root, "ModelPackageGroup=iris-strict", "MinAccuracy=1.01")
    assert code == 1
    again = steps(strict)
    assert again["train"]["CacheHitResult"]["SourcePipelineExecutionArn"] == doc["PipelineExecutionArn"]
    assert again["train"]["Outputs"] == ran["train"]["Outputs"]
    assert again["register"]["StepStatus"] is None
    assert strict["FailureReason"].startswith("accuracy ") and "is below MinAccuracy 1.01" in strict["FailureReason"]
    with pytest.raises(botocore.exceptions.ClientError, match="does not exist"):
        sm.describe_model_package_group(ModelPackageGroupName="iris-strict")
