"""Pipelines through the control plane's API with boto3 against a real ``servekit up``: CreatePipeline with
servekit's definition format (checked by loading it; SageMaker's own is checked as SageMaker's), StartPipelineExecution
running ``servekit pipeline run`` as a subprocess whose register step calls back into the plane, Describe/List of
executions and steps from the shared state, StopPipelineExecution of a running step, DeletePipeline keeping runs."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.services.database import StateDB
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
ROLE = "arn:aws:iam::000000000000:role/pipelines"
WRITER = "import os, sys; open(os.path.join(os.environ['SERVEKIT_OUTPUT_OUT'], 'words.txt'), 'w').write(sys.argv[1])"
SLEEPER = "import time; time.sleep(120)"  # the workload a stop interrupts


def tok(text: str) -> str:
    """A ClientRequestToken (32 characters at least)."""
    return text.ljust(32, "0")


def poll(what: Callable[[], Any], until: Callable[[Any], bool], timeout_s: float = 120) -> Any:
    """Call ``what`` every 0.2 s until ``until`` holds (another process's progress)."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = what()
        if until(last):
            return last
        time.sleep(0.2)
    raise AssertionError(f"still {last!r} after {timeout_s}s")


def error(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> tuple[str, str]:
    err = exc.value.response["Error"]
    return str(err["Code"]), str(err["Message"])


def words_definition(tmp_path: Path) -> dict[str, Any]:
    (tmp_path / "steps.py").write_text(
        "def count(ctx, data):\n"
        "    text = ctx.read(ctx.storage.join(data, 'words.txt')).decode()\n"
        "    ctx.write('counts', 'n.txt', str(len(text.split())).encode())\n"
        "    return {'words': len(text.split())}\n"
    )
    return {
        "Name": "words",
        "Parameters": [{"Name": "Text", "Type": "String", "DefaultValue": "a b c"}],
        "Steps": [
            {
                "Name": "write",
                "Type": "Processing",
                "Command": [sys.executable, "-c", WRITER, {"Get": "Parameters.Text"}],
                "Outputs": ["out"],
            },
            {
                "Name": "count",
                "Type": "Processing",
                "Function": f"{tmp_path / 'steps.py'}:count",
                "Arguments": {"data": {"Get": "Steps.write.Outputs.out"}},
                "Outputs": ["counts"],
            },
            {
                "Name": "register",
                "Type": "RegisterModel",
                "Arguments": {
                    "ModelPackageGroupName": "words",
                    "ModelDataUrl": {"Get": "Steps.write.Outputs.out"},
                },
                "DependsOn": ["count"],
            },
        ],
    }


def test_pipelines_and_executions_through_boto3(up: UpProcess, tmp_path: Path) -> None:
    sm = up.sm()
    doc = words_definition(tmp_path)
    arn = sm.create_pipeline(
        PipelineName="words", PipelineDefinition=json.dumps(doc), RoleArn=ROLE, ClientRequestToken=tok("create-words-1")
    )["PipelineArn"]
    assert arn == "arn:aws:sagemaker:us-east-1:000000000000:pipeline/words"
    described = sm.describe_pipeline(PipelineName="words")
    assert described["PipelineStatus"] == "Active" and described["RoleArn"] == ROLE
    assert json.loads(described["PipelineDefinition"])["Steps"][0]["Name"] == "write"
    assert [s["PipelineName"] for s in sm.list_pipelines(PipelineNamePrefix="wor")["PipelineSummaries"]] == ["words"]
    assert sm.list_pipelines(PipelineNamePrefix="nope")["PipelineSummaries"] == []

    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.create_pipeline(
            PipelineName="words", PipelineDefinition=json.dumps(doc), RoleArn=ROLE, ClientRequestToken=tok("c2")
        )
    assert error(exc) == ("ValidationException", f"Pipeline {arn} already exists.")
    bad = {**doc, "Name": "bad", "Steps": [{"Name": "x", "Type": "Lambda"}]}
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.create_pipeline(
            PipelineName="bad", PipelineDefinition=json.dumps(bad), RoleArn=ROLE, ClientRequestToken=tok("c3")
        )
    code, message = error(exc)
    assert code == "ValidationException" and "'Lambda' is not a step type" in message
    sagemakers = {"Version": "2020-12-01", "Steps": [], "PipelineExperimentConfig": {}}
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.create_pipeline(
            PipelineName="theirs", PipelineDefinition=json.dumps(sagemakers), RoleArn=ROLE, ClientRequestToken=tok("c4")
        )
    # SageMaker's format is read as SageMaker's (tests/e2e/test_sagemaker_pipelines.py runs it), checked as such
    assert error(exc) == ("ValidationException", "Unable to parse pipeline definition. Steps must be a non-empty list.")

    start = {"PipelineName": "words", "PipelineParameters": [{"Name": "Text", "Value": "x y z w"}]}
    execution = sm.start_pipeline_execution(**start, ClientRequestToken=tok("start-1"))["PipelineExecutionArn"]
    assert execution.startswith(f"{arn}/execution/")
    # a retry with the same token is the same execution
    assert sm.start_pipeline_execution(**start, ClientRequestToken=tok("start-1"))["PipelineExecutionArn"] == execution
    done = poll(
        lambda: sm.describe_pipeline_execution(PipelineExecutionArn=execution),
        lambda d: d["PipelineExecutionStatus"] not in ("Executing",),
    )
    assert done["PipelineExecutionStatus"] == "Succeeded", done
    steps = sm.list_pipeline_execution_steps(PipelineExecutionArn=execution, SortOrder="Ascending")
    ran = {s["StepName"]: s for s in steps["PipelineExecutionSteps"]}
    assert [s["StepName"] for s in steps["PipelineExecutionSteps"]] == ["write", "count", "register"]
    assert {s["StepStatus"] for s in ran.values()} == {"Succeeded"}
    package = ran["register"]["Metadata"]["RegisterModel"]["Arn"]
    # the register step called this plane back: the package names the execution that made it
    assert sm.describe_model_package(ModelPackageName=package)["MetadataProperties"]["GeneratedBy"] == execution
    run_id = execution.rsplit("/", 1)[-1]
    with StateDB.open(up.home) as db:
        props = {s.step: s.properties for s in db.pipelines.steps(run_id)}
    assert (props["count"] or {})["Properties"] == {"words": 4}
    listed = sm.list_pipeline_executions(PipelineName="words")["PipelineExecutionSummaries"]
    assert [(e["PipelineExecutionArn"], e["PipelineExecutionStatus"]) for e in listed] == [(execution, "Succeeded")]
    assert sm.describe_pipeline(PipelineName="words")["LastRunTime"] is not None

    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.describe_pipeline_execution(PipelineExecutionArn=f"{arn}/execution/nosuchrun000")
    assert error(exc)[0] == "ResourceNotFound"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.start_pipeline_execution(PipelineName="nope", ClientRequestToken=tok("s9"))
    assert error(exc)[0] == "ResourceNotFound"

    # a parameter the pipeline lacks: the run never starts, and the execution says why
    wrong = sm.start_pipeline_execution(
        PipelineName="words", PipelineParameters=[{"Name": "Nope", "Value": "1"}], ClientRequestToken=tok("start-2")
    )["PipelineExecutionArn"]
    failed = poll(
        lambda: sm.describe_pipeline_execution(PipelineExecutionArn=wrong),
        lambda d: d["PipelineExecutionStatus"] != "Executing",
    )
    assert failed["PipelineExecutionStatus"] == "Failed"
    assert "exit status 2" in failed["FailureReason"] and "has no parameter(s) ['Nope']" in failed["FailureReason"]

    sm.delete_pipeline(PipelineName="words", ClientRequestToken=tok("delete-1"))
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.describe_pipeline(PipelineName="words")
    assert error(exc)[0] == "ResourceNotFound"
    kept = sm.list_pipeline_executions(PipelineName="words")["PipelineExecutionSummaries"]
    assert [e["PipelineExecutionArn"] for e in kept] == [wrong, execution]  # runs outlive their pipeline


def test_stop_pipeline_execution_stops_a_running_step(up: UpProcess) -> None:
    sm = up.sm()
    doc = {
        "Name": "sleepy",
        "Steps": [{"Name": "nap", "Type": "Processing", "Command": [sys.executable, "-c", SLEEPER]}],
    }
    sm.create_pipeline(
        PipelineName="sleepy", PipelineDefinition=json.dumps(doc), RoleArn=ROLE, ClientRequestToken=tok("c")
    )
    execution = sm.start_pipeline_execution(PipelineName="sleepy", ClientRequestToken=tok("s"))["PipelineExecutionArn"]
    poll(
        lambda: sm.list_pipeline_execution_steps(PipelineExecutionArn=execution)["PipelineExecutionSteps"],
        lambda steps: [s["StepStatus"] for s in steps] == ["Executing"],
    )
    assert sm.stop_pipeline_execution(PipelineExecutionArn=execution, ClientRequestToken=tok("x"))[
        "PipelineExecutionArn"
    ] == (execution)
    stopped = poll(
        lambda: sm.describe_pipeline_execution(PipelineExecutionArn=execution),
        lambda d: d["PipelineExecutionStatus"] not in ("Executing", "Stopping"),
    )
    assert stopped["PipelineExecutionStatus"] == "Stopped", stopped
    [nap] = sm.list_pipeline_execution_steps(PipelineExecutionArn=execution)["PipelineExecutionSteps"]
    assert nap["StepStatus"] == "Stopped"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        sm.stop_pipeline_execution(PipelineExecutionArn=execution, ClientRequestToken=tok("y"))
    assert error(exc)[0] == "ConflictException" and "is Stopped" in error(exc)[1]
