"""SageMaker pipeline definitions (``"Version": "2020-12-01"``, as the SDK writes them) on a real ``servekit up``
through boto3: the seeds' credit-scoring shape — processing with two outputs, training on one of them through a
``Get``, an evaluation step writing a ``PropertyFile``, a condition on ``Std:JsonGet`` against a parameter, then a
registered model or a ``Fail`` step — each step running as the plane's own job; caching, stopping, validation at
CreatePipeline and StartPipelineExecution, and an execution adopted by a restarted plane."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from typing import Any

import boto3
import botocore.exceptions
import pytest

from servekit.aws import Credentials
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
BUCKET = "sagemaker-us-east-1-000000000000"
ROLE = "arn:aws:iam::000000000000:role/pipelines"
PREP = """
import os
rows = [r for r in open("/opt/ml/processing/input/raw.csv").read().split() if "?" not in r]
os.makedirs("/opt/ml/processing/train", exist_ok=True)
os.makedirs("/opt/ml/processing/test", exist_ok=True)
open("/opt/ml/processing/train/train.csv", "w").write("\\n".join(rows[:3]) + "\\n")
open("/opt/ml/processing/test/test.csv", "w").write("\\n".join(rows[3:]) + "\\n")
"""
TRAIN = """
import json, os
rows = open(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "train.csv")).read().split()
json.dump({"rows": len(rows)}, open("/opt/ml/model/model.json", "w"))
"""
EVALUATE = """
import json, os, tarfile
tarfile.open("/opt/ml/processing/model/model.tar.gz").extractall("/tmp/model")
model = json.load(open("/tmp/model/model.json"))
test = open("/opt/ml/processing/test/test.csv").read().split()
auc = 0.5 + 0.1 * model["rows"]  # 0.8 for three training rows
os.makedirs("/opt/ml/processing/evaluation", exist_ok=True)
json.dump({"metrics": {"auc": {"value": auc}, "test_rows": len(test)}},
          open("/opt/ml/processing/evaluation/evaluation.json", "w"))
"""
SLOW = "import time; time.sleep(600)"


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("sm-pipelines") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def clients(up: UpProcess) -> tuple[Any, Any]:
    key = Credentials.load_or_create(up.home).admin
    kw = {
        "endpoint_url": up.url,
        "region_name": "us-east-1",
        "aws_access_key_id": key.access_key_id,
        "aws_secret_access_key": key.secret_access_key,
    }
    session = boto3.session.Session()
    return session.client("sagemaker", **kw), session.client("s3", **kw)


def poll(what: Callable[[], Any], until: Callable[[Any], bool], timeout_s: float = 180) -> Any:
    """``what`` every 0.2 s until ``until`` holds (the plane's progress, in another process)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = what()
        if until(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"still {last!r} after {timeout_s}s")


def tar_gz(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def s3_input(name: str, uri: Any, local: str) -> dict[str, Any]:
    return {
        "InputName": name,
        "AppManaged": False,
        "S3Input": {
            "S3Uri": uri,
            "LocalPath": local,
            "S3DataType": "S3Prefix",
            "S3InputMode": "File",
            "S3DataDistributionType": "FullyReplicated",
            "S3CompressionType": "None",
        },
    }


def s3_output(name: str, prefix: str, local: str) -> dict[str, Any]:
    uri = {
        "Std:Join": {"On": "/", "Values": [f"s3://{BUCKET}", prefix, {"Get": "Execution.PipelineExecutionId"}, name]}
    }
    return {
        "OutputName": name,
        "AppManaged": False,
        "S3Output": {"S3Uri": uri, "LocalPath": local, "S3UploadMode": "EndOfJob"},
    }


def processing(code_key: str, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "ProcessingResources": {
            "ClusterConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10}
        },
        "AppSpecification": {
            "ImageUri": IMAGE,
            "ContainerEntrypoint": ["python3", f"/opt/ml/processing/input/code/{code_key.rsplit('/', 1)[-1]}"],
        },
        "RoleArn": ROLE,
        "ProcessingInputs": [*inputs, s3_input("code", f"s3://{BUCKET}/{code_key}", "/opt/ml/processing/input/code")],
        "ProcessingOutputConfig": {"Outputs": outputs},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }


def upload(s3: Any) -> None:
    s3.put_object(Bucket=BUCKET, Key="credit/code/prep.py", Body=PREP.encode())
    s3.put_object(Bucket=BUCKET, Key="credit/code/evaluate.py", Body=EVALUATE.encode())
    s3.put_object(Bucket=BUCKET, Key="credit/code/slow.py", Body=SLOW.encode())
    s3.put_object(Bucket=BUCKET, Key="credit/source/sourcedir.tar.gz", Body=tar_gz({"train.py": TRAIN}))
    s3.put_object(Bucket=BUCKET, Key="credit/raw/raw.csv", Body=b"1,2\n?,3\n4,5\n6,7\n8,9\n")


def credit_definition() -> dict[str, Any]:
    """The seeds' credit-scoring pipeline as the SDK compiles it (ProcessingStep, TrainingStep, evaluation
    ProcessingStep with a PropertyFile, ConditionStep on JsonGet, RegisterModel or Fail)."""
    prep = processing(
        "credit/code/prep.py",
        [s3_input("input-1", {"Get": "Parameters.InputData"}, "/opt/ml/processing/input")],
        [
            s3_output("train", "credit/prep", "/opt/ml/processing/train"),
            s3_output("test", "credit/prep", "/opt/ml/processing/test"),
        ],
    )
    train = {
        "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        "OutputDataConfig": {
            "S3OutputPath": {
                "Std:Join": {
                    "On": "/",
                    "Values": [f"s3://{BUCKET}", "credit", {"Get": "Execution.PipelineExecutionId"}],
                }
            }
        },
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "ResourceConfig": {"VolumeSizeInGB": 10, "InstanceCount": 1, "InstanceType": "ml.m5.large"},
        "RoleArn": ROLE,
        "InputDataConfig": [
            {
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": {"Get": "Steps.Prep.ProcessingOutputConfig.Outputs['train'].S3Output.S3Uri"},
                        "S3DataDistributionType": "FullyReplicated",
                    }
                },
                "ContentType": "text/csv",
                "ChannelName": "train",
            }
        ],
        "HyperParameters": {
            "sagemaker_program": json.dumps("train.py"),
            "sagemaker_submit_directory": json.dumps(f"s3://{BUCKET}/credit/source/sourcedir.tar.gz"),
        },
    }
    evaluate = processing(
        "credit/code/evaluate.py",
        [
            s3_input("input-1", {"Get": "Steps.Train.ModelArtifacts.S3ModelArtifacts"}, "/opt/ml/processing/model"),
            s3_input(
                "input-2",
                {"Get": "Steps.Prep.ProcessingOutputConfig.Outputs['test'].S3Output.S3Uri"},
                "/opt/ml/processing/test",
            ),
        ],
        [s3_output("evaluation", "credit/eval", "/opt/ml/processing/evaluation")],
    )
    evaluation_uri = {
        "Std:Join": {
            "On": "/",
            "Values": [
                {"Get": "Steps.Evaluate.ProcessingOutputConfig.Outputs['evaluation'].S3Output.S3Uri"},
                "evaluation.json",
            ],
        }
    }
    register = {
        "ModelPackageGroupName": "credit-models",
        "InferenceSpecification": {
            "Containers": [{"Image": IMAGE, "ModelDataUrl": {"Get": "Steps.Train.ModelArtifacts.S3ModelArtifacts"}}],
            "SupportedContentTypes": ["text/csv"],
            "SupportedResponseMIMETypes": ["text/csv"],
        },
        "ModelApprovalStatus": {"Get": "Parameters.ModelApprovalStatus"},
        "ModelMetrics": {"ModelQuality": {"Statistics": {"ContentType": "application/json", "S3Uri": evaluation_uri}}},
    }
    auc = {
        "Std:JsonGet": {
            "PropertyFile": {"Get": "Steps.Evaluate.PropertyFiles.EvaluationReport"},
            "Path": "metrics.auc.value",
        }
    }
    return {
        "Version": "2020-12-01",
        "Metadata": {},
        "Parameters": [
            {"Name": "InputData", "Type": "String", "DefaultValue": f"s3://{BUCKET}/credit/raw"},
            {"Name": "MinAuc", "Type": "Float", "DefaultValue": 0.7},
            {"Name": "ModelApprovalStatus", "Type": "String", "DefaultValue": "PendingManualApproval"},
        ],
        "PipelineExperimentConfig": {
            "ExperimentName": {"Get": "Execution.PipelineName"},
            "TrialName": {"Get": "Execution.PipelineExecutionId"},
        },
        "Steps": [
            {
                "Name": "Prep",
                "Type": "Processing",
                "Arguments": prep,
                "CacheConfig": {"Enabled": True, "ExpireAfter": "P30D"},
            },
            {"Name": "Train", "Type": "Training", "Arguments": train},
            {
                "Name": "Evaluate",
                "Type": "Processing",
                "Arguments": evaluate,
                "PropertyFiles": [
                    {"PropertyFileName": "EvaluationReport", "OutputName": "evaluation", "FilePath": "evaluation.json"}
                ],
            },
            {
                "Name": "CheckAuc",
                "Type": "Condition",
                "Arguments": {
                    "Conditions": [
                        {"Type": "GreaterThanOrEqualTo", "LeftValue": auc, "RightValue": {"Get": "Parameters.MinAuc"}}
                    ],
                    "IfSteps": [{"Name": "Register-RegisterModel", "Type": "RegisterModel", "Arguments": register}],
                    "ElseSteps": [
                        {
                            "Name": "TooWeak",
                            "Type": "Fail",
                            "Arguments": {
                                "ErrorMessage": {
                                    "Std:Join": {"On": " ", "Values": ["AUC below", {"Get": "Parameters.MinAuc"}]}
                                }
                            },
                        }
                    ],
                },
            },
        ],
    }


def start(sm: Any, pipeline: str, token: str, **params: str) -> str:
    given = [{"Name": k, "Value": v} for k, v in params.items()]
    out = sm.start_pipeline_execution(
        PipelineName=pipeline, PipelineParameters=given, ClientRequestToken=token.ljust(32, "0")
    )
    return str(out["PipelineExecutionArn"])


def finished(sm: Any, arn: str) -> dict[str, Any]:
    return poll(
        lambda: sm.describe_pipeline_execution(PipelineExecutionArn=arn),
        lambda d: d["PipelineExecutionStatus"] not in ("Executing", "Stopping"),
    )


def steps(sm: Any, arn: str) -> dict[str, dict[str, Any]]:
    return {
        s["StepName"]: s for s in sm.list_pipeline_execution_steps(PipelineExecutionArn=arn)["PipelineExecutionSteps"]
    }


def test_the_credit_pipeline_registers_a_model_fails_below_the_bar_and_reuses_its_cached_step(up: UpProcess) -> None:
    sm, s3 = clients(up)
    upload(s3)
    definition = json.dumps(credit_definition())
    arn = sm.create_pipeline(PipelineName="credit", PipelineDefinition=definition, RoleArn=ROLE)["PipelineArn"]
    assert sm.describe_pipeline(PipelineName="credit")["PipelineDefinition"] == definition

    first = start(sm, "credit", "first")
    done = finished(sm, first)
    assert done["PipelineExecutionStatus"] == "Succeeded", done.get("FailureReason")
    assert done["PipelineArn"] == arn
    ran = steps(sm, first)
    assert set(ran) == {"Prep", "Train", "Evaluate", "CheckAuc", "Register-RegisterModel"}  # TooWeak did not run
    assert all(s["StepStatus"] == "Succeeded" for s in ran.values())
    assert ran["Prep"]["Metadata"]["ProcessingJob"]["Arn"].startswith("arn:aws:sagemaker:")
    train_arn = ran["Train"]["Metadata"]["TrainingJob"]["Arn"]
    assert ran["CheckAuc"]["Metadata"] == {"Condition": {"Outcome": "True"}}
    package_arn = ran["Register-RegisterModel"]["Metadata"]["RegisterModel"]["Arn"]
    package = sm.describe_model_package(ModelPackageName=package_arn)
    assert package["ModelApprovalStatus"] == "PendingManualApproval"
    execution_id = first.rsplit("/", 1)[-1]
    stats = package["ModelMetrics"]["ModelQuality"]["Statistics"]["S3Uri"]
    assert stats == f"s3://{BUCKET}/credit/eval/{execution_id}/evaluation/evaluation.json"
    assert (
        json.loads(s3.get_object(Bucket=BUCKET, Key=stats.split("/", 3)[3])["Body"].read())["metrics"]["auc"]["value"]
        == 0.8
    )
    job = sm.describe_training_job(TrainingJobName=train_arn.rsplit("/", 1)[-1])
    channel = job["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"]
    assert channel == f"s3://{BUCKET}/credit/prep/{execution_id}/train"  # the Get, resolved
    assert (
        package["InferenceSpecification"]["Containers"][0]["ModelDataUrl"] == job["ModelArtifacts"]["S3ModelArtifacts"]
    )
    # lineage: the package names the execution that registered it; servekit lineage follows it to the steps' jobs
    assert package["MetadataProperties"]["GeneratedBy"] == first
    cli = [sys.executable, "-m", "servekit.cli.main", "lineage", package_arn, "--home", str(up.home), "--url", up.url]
    lineage = json.loads(subprocess.run([*cli, "--json"], capture_output=True, text=True, check=True).stdout)
    assert lineage["run"]["run_id"] == execution_id and lineage["run"]["status"] == "Succeeded"
    made = {s["step"]: s["made"] for s in lineage["steps"]}
    assert made["Train"] == {"TrainingJob": train_arn}
    assert made["Register-RegisterModel"] == {"RegisterModel": package_arn}
    assert [s["step"] for s in lineage["steps"]][:2] == ["Prep", "Train"]
    params = sm.list_pipeline_parameters_for_execution(PipelineExecutionArn=first)["PipelineParameters"]
    assert {p["Name"]: p["Value"] for p in params}["MinAuc"] == "0.7"

    second = start(sm, "credit", "second", MinAuc="0.99")
    failed = finished(sm, second)
    assert failed["PipelineExecutionStatus"] == "Failed"
    assert failed["FailureReason"] == "AUC below 0.99"
    again = steps(sm, second)
    assert again["TooWeak"]["StepStatus"] == "Failed"
    assert again["TooWeak"]["Metadata"] == {"Fail": {"ErrorMessage": "AUC below 0.99"}}
    assert "Register-RegisterModel" not in again
    assert again["Prep"]["CacheHitResult"]["SourcePipelineExecutionArn"] == first  # same arguments: reused
    assert again["Prep"]["Metadata"]["ProcessingJob"] == ran["Prep"]["Metadata"]["ProcessingJob"]
    assert again["Train"]["Metadata"]["TrainingJob"]["Arn"] != train_arn  # not cached: a job of its own
    versions = sm.list_model_packages(ModelPackageGroupName="credit-models")["ModelPackageSummaryList"]
    assert [v["ModelPackageArn"] for v in versions] == [package_arn]  # the failed execution registered nothing

    listed = sm.list_pipeline_executions(PipelineName="credit")["PipelineExecutionSummaries"]
    assert {x["PipelineExecutionArn"]: x["PipelineExecutionStatus"] for x in listed} == {
        first: "Succeeded",
        second: "Failed",
    }
    assert start(sm, "credit", "second", MinAuc="0.99") == second  # the same token: the same execution
    shown = json.loads(sm.describe_pipeline_definition_for_execution(PipelineExecutionArn=first)["PipelineDefinition"])
    assert shown["Steps"][0]["Name"] == "Prep"

    # a selective execution: only Evaluate and the condition run, on the first execution's Prep and Train
    selective = {
        "SourcePipelineExecutionArn": first,
        "SelectedSteps": [{"StepName": "Evaluate"}, {"StepName": "CheckAuc"}],
    }
    third = sm.start_pipeline_execution(
        PipelineName="credit", SelectiveExecutionConfig=selective, ClientRequestToken="third".ljust(32, "0")
    )["PipelineExecutionArn"]
    described = finished(sm, third)
    assert described["PipelineExecutionStatus"] == "Succeeded", described.get("FailureReason")
    assert described["SelectiveExecutionConfig"]["SourcePipelineExecutionArn"] == first
    picked = steps(sm, third)
    assert set(picked) == {"Prep", "Train", "Evaluate", "CheckAuc"}  # the registration was not selected
    assert picked["Train"]["SelectiveExecutionResult"] == {"SourcePipelineExecutionArn": first}
    assert picked["Train"]["Metadata"]["TrainingJob"]["Arn"] == train_arn  # the source's job, not a new one
    assert picked["Evaluate"]["Metadata"]["ProcessingJob"] != ran["Evaluate"]["Metadata"]["ProcessingJob"]
    with pytest.raises(botocore.exceptions.ClientError) as refused:  # TooWeak never succeeded anywhere
        sm.start_pipeline_execution(
            PipelineName="credit",
            SelectiveExecutionConfig={"SourcePipelineExecutionArn": second, "SelectedSteps": [{"StepName": "Nope"}]},
            ClientRequestToken="fourth".ljust(32, "0"),
        )
    assert "'Nope'" in refused.value.response["Error"]["Message"]


def test_bad_definitions_and_parameters_are_refused_naming_what_is_wrong(up: UpProcess) -> None:
    sm, _ = clients(up)

    def refused(doc: dict[str, Any]) -> str:
        with pytest.raises(botocore.exceptions.ClientError) as exc:
            sm.create_pipeline(PipelineName="bad", PipelineDefinition=json.dumps(doc), RoleArn=ROLE)
        assert exc.value.response["Error"]["Code"] == "ValidationException"
        return str(exc.value.response["Error"]["Message"])

    good = credit_definition()
    cycle = json.loads(json.dumps(good))
    cycle["Steps"][0]["DependsOn"] = ["Evaluate"]
    assert "cycle" in refused(cycle).lower()
    unknown = json.loads(json.dumps(good))
    unknown["Steps"][1]["Type"] = "Teleport"
    assert "Teleport" in refused(unknown)
    missing = json.loads(json.dumps(good))
    missing["Steps"][1]["Arguments"]["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] = {
        "Get": "Steps.Nowhere.ProcessingOutputConfig.Outputs['train'].S3Output.S3Uri"
    }
    assert "Nowhere" in refused(missing)
    typed = json.loads(json.dumps(good))
    typed["Parameters"][1]["DefaultValue"] = "high"
    assert "MinAuc" in refused(typed)
    lambda_step = json.loads(json.dumps(good))
    lambda_step["Steps"].append({"Name": "Notify", "Type": "Lambda", "Arguments": {}})
    assert "Notify" in refused(lambda_step)

    sm.create_pipeline(PipelineName="typed", PipelineDefinition=json.dumps(good), RoleArn=ROLE)
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        start(sm, "typed", "typed", MinAuc="high")
    assert exc.value.response["Error"]["Code"] == "ValidationException"
    assert "MinAuc" in exc.value.response["Error"]["Message"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        start(sm, "typed", "undeclared", Nope="1")
    assert "Nope" in exc.value.response["Error"]["Message"]
    assert sm.list_pipeline_executions(PipelineName="typed")["PipelineExecutionSummaries"] == []


def slow_definition() -> dict[str, Any]:
    slow = processing("credit/code/slow.py", [], [])
    del slow["ProcessingOutputConfig"]
    return {
        "Version": "2020-12-01",
        "Parameters": [],
        "Steps": [
            {"Name": "Slow", "Type": "Processing", "Arguments": slow},
            {"Name": "After", "Type": "Fail", "Arguments": {"ErrorMessage": "never"}, "DependsOn": ["Slow"]},
        ],
    }


def test_stop_pipeline_execution_stops_the_running_job(up: UpProcess) -> None:
    sm, s3 = clients(up)
    upload(s3)
    sm.create_pipeline(PipelineName="slow", PipelineDefinition=json.dumps(slow_definition()), RoleArn=ROLE)
    arn = start(sm, "slow", "slow")
    poll(lambda: steps(sm, arn).get("Slow", {}), lambda s: "ProcessingJob" in s.get("Metadata", {}))
    sm.stop_pipeline_execution(PipelineExecutionArn=arn, ClientRequestToken="stop".ljust(32, "0"))
    assert finished(sm, arn)["PipelineExecutionStatus"] == "Stopped"
    slow = steps(sm, arn)["Slow"]
    assert slow["StepStatus"] == "Stopped"
    job = sm.describe_processing_job(ProcessingJobName=slow["Metadata"]["ProcessingJob"]["Arn"].rsplit("/", 1)[-1])
    assert job["ProcessingJobStatus"] == "Stopped"
    assert "After" not in steps(sm, arn)


NAP = "import time; time.sleep(3)"


def test_an_execution_survives_a_kill_of_its_plane_and_ends_on_the_restarted_one(tmp_path: Any) -> None:
    first = UpProcess(tmp_path / "home")
    first.start()
    try:
        sm, s3 = clients(first)
        s3.put_object(Bucket=BUCKET, Key="nap/nap.py", Body=NAP.encode())
        nap = processing("nap/nap.py", [], [])
        del nap["ProcessingOutputConfig"]
        internal = {"ExceptionType": ["SageMaker.JOB_INTERNAL_ERROR"], "IntervalSeconds": 1, "MaxAttempts": 2}
        doc = {
            "Version": "2020-12-01",
            "Parameters": [],
            "Steps": [
                {"Name": "Nap", "Type": "Processing", "Arguments": nap, "RetryPolicies": [internal]},
                {"Name": "Check", "Type": "Condition", "Arguments": {"Conditions": [], "IfSteps": [], "ElseSteps": []}},
            ],
        }
        doc["Steps"][1]["DependsOn"] = ["Nap"]
        doc["Steps"][1]["Arguments"]["Conditions"] = [{"Type": "Equals", "LeftValue": 1, "RightValue": 1}]
        sm.create_pipeline(PipelineName="nap", PipelineDefinition=json.dumps(doc), RoleArn=ROLE)
        arn = start(sm, "nap", "nap")
        poll(lambda: steps(sm, arn).get("Nap", {}), lambda s: "ProcessingJob" in s.get("Metadata", {}))
    finally:
        first.kill()  # SIGKILL: nothing of the plane gets to clean up
    second = UpProcess(tmp_path / "home")
    second.start()
    try:
        sm, _ = clients(second)
        done = finished(sm, arn)
        assert done["PipelineExecutionStatus"] == "Succeeded", done.get("FailureReason")
        nap_step = steps(sm, arn)["Nap"]
        # its job ended with the plane that ran it (a platform failure), so the retry policy ran it again
        assert nap_step["AttemptCount"] == 2
        assert steps(sm, arn)["Check"]["Metadata"] == {"Condition": {"Outcome": "True"}}
    finally:
        second.stop()


@pytest.mark.slow  # make test-slow
def test_parallelism_configuration_of_the_pipeline_bounds_its_steps(up: UpProcess) -> None:
    sm, s3 = clients(up)
    upload(s3)
    s3.put_object(Bucket=BUCKET, Key="nap/nap.py", Body=NAP.encode())

    def nap_steps() -> dict[str, Any]:
        nap = processing("nap/nap.py", [], [])
        del nap["ProcessingOutputConfig"]
        steps = [{"Name": n, "Type": "Processing", "Arguments": nap} for n in ("One", "Two")]
        return {"Version": "2020-12-01", "Parameters": [], "Steps": steps}

    serial = {"MaxParallelExecutionSteps": 1}
    sm.create_pipeline(
        PipelineName="serial", PipelineDefinition=json.dumps(nap_steps()), RoleArn=ROLE, ParallelismConfiguration=serial
    )
    assert sm.describe_pipeline(PipelineName="serial")["ParallelismConfiguration"] == serial
    sm.create_pipeline(PipelineName="wide", PipelineDefinition=json.dumps(nap_steps()), RoleArn=ROLE)

    def spans(name: str) -> list[tuple[Any, Any]]:
        arn = start(sm, name, name)
        assert finished(sm, arn)["PipelineExecutionStatus"] == "Succeeded"
        return sorted((s["StartTime"], s["EndTime"]) for s in steps(sm, arn).values())

    (_, first_end), (second_start, _) = spans("serial")
    assert second_start >= first_end  # one at a time
    (_, first_end), (second_start, _) = spans("wide")
    assert second_start < first_end  # without it, both ran at once
