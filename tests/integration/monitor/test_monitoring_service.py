"""Model Monitor's scheduling API through a real botocore client, in process, over real SQLite, with the clock
injected: job definitions, schedules, their executions and the metrics they record.

The monitor itself is the one thing replaced: a runner that writes ``servekit monitor run``'s documented output
files (docs/monitoring.md §6) for the command it is given, so each status can be chosen. The real subprocess runner
is tested at the end; the real monitor on real capture in tests/e2e/test_monitoring_schedules.py.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.integration.monitor.conftest import (
    ROLE,
    T0,
    World,
    at,
    data_quality,
    error_of,
    schedule,
    until,
)

from servekit.aws.errors import ApiError
from servekit.aws.names import Account
from servekit.services.database import StateDB
from servekit.services.hosting.store import Hosting
from servekit.services.hosting.store_rows import VariantState
from servekit.services.monitoring.schedules.plans import Planner
from servekit.services.monitoring.schedules.scheduler import Scheduler, run_subprocess


def test_definitions_are_answered_with_sagemakers_defaults(world: World) -> None:
    """The SDK's attach() and its tests read StoppingCondition and both NetworkConfig flags; SageMaker answers its
    defaults where the request gave none (also in a schedule's inline MonitoringJobDefinition)."""
    sm = world.sm
    sm.create_data_quality_job_definition(**data_quality(world, NetworkConfig={"EnableNetworkIsolation": True}))
    d = sm.describe_data_quality_job_definition(JobDefinitionName="dq")
    assert d["StoppingCondition"] == {"MaxRuntimeInSeconds": 3600}
    assert d["NetworkConfig"] == {"EnableNetworkIsolation": True, "EnableInterContainerTrafficEncryption": False}
    sm.create_data_quality_job_definition(**data_quality(world, "dq2", StoppingCondition={"MaxRuntimeInSeconds": 92}))
    assert sm.describe_data_quality_job_definition(JobDefinitionName="dq2")["StoppingCondition"] == {
        "MaxRuntimeInSeconds": 92
    }


def test_job_definitions_create_describe_list_delete(world: World) -> None:
    sm = world.sm
    arn = sm.create_data_quality_job_definition(**data_quality(world))["JobDefinitionArn"]
    assert arn == "arn:aws:sagemaker:us-east-1:000000000000:data-quality-job-definition/dq"
    d = sm.describe_data_quality_job_definition(JobDefinitionName="dq")
    assert (d["JobDefinitionName"], d["JobDefinitionArn"]) == ("dq", arn)
    assert d["DataQualityJobInput"]["EndpointInput"]["EndpointName"] == "ep"
    assert d["CreationTime"] == datetime.fromtimestamp(T0, UTC)
    world.clock.now += 1
    sm.create_data_quality_job_definition(**data_quality(world, "dq2", "bare"))
    listed = sm.list_data_quality_job_definitions()["JobDefinitionSummaries"]
    assert [s["MonitoringJobDefinitionName"] for s in listed] == ["dq2", "dq"]  # newest first
    only = sm.list_data_quality_job_definitions(EndpointName="ep", SortBy="Name", SortOrder="Ascending")
    assert [(s["MonitoringJobDefinitionName"], s["EndpointName"]) for s in only["JobDefinitionSummaries"]] == [
        ("dq", "ep")
    ]
    page = sm.list_data_quality_job_definitions(MaxResults=1)
    assert len(page["JobDefinitionSummaries"]) == 1 and page["NextToken"]
    rest = sm.list_data_quality_job_definitions(MaxResults=1, NextToken=page["NextToken"])
    assert [s["MonitoringJobDefinitionName"] for s in rest["JobDefinitionSummaries"]] == ["dq"]
    assert sm.list_model_quality_job_definitions()["JobDefinitionSummaries"] == []

    assert error_of(sm.create_data_quality_job_definition, **data_quality(world, "DQ"))["Code"] == "ResourceInUse"
    sm.create_monitoring_schedule(**schedule("hourly"))
    in_use = error_of(sm.delete_data_quality_job_definition, JobDefinitionName="dq")
    assert in_use["Code"] == "ResourceInUse" and "hourly" in in_use["Message"]
    sm.delete_monitoring_schedule(MonitoringScheduleName="hourly")
    sm.delete_data_quality_job_definition(JobDefinitionName="dq")
    gone = error_of(sm.describe_data_quality_job_definition, JobDefinitionName="dq")
    assert gone["Code"] == "ResourceNotFound"
    assert error_of(sm.describe_model_quality_job_definition, JobDefinitionName="dq2")["Code"] == "ResourceNotFound"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            {
                "DataQualityJobOutputConfig": {
                    "MonitoringOutputs": [{"S3Output": {"S3Uri": "s3://b/out", "LocalPath": "/o"}}]
                }
            },
            "MonitoringOutputs[0].S3Output.S3Uri 's3://b/out' is not in servekit up's own S3 store",
        ),
        # (no baseline at all is accepted since issue 45: executions compute statistics only, as SageMaker's do)
        (
            {"DataQualityBaselineConfig": {"ConstraintsResource": {"S3Uri": "file:///nowhere/constraints.json"}}},
            "'file:///nowhere/constraints.json': no constraints.json there",
        ),
        (
            {"DataQualityAppSpecification": {"ImageUri": "x", "ContainerArguments": ["--data", "/elsewhere"]}},
            "ContainerArguments may not set --data",
        ),
        (
            {"DataQualityAppSpecification": {"ImageUri": "x", "RecordPreprocessorSourceUri": "s3://b/pre.py"}},
            "RecordPreprocessorSourceUri is not supported",
        ),
        (
            {
                "DataQualityJobInput": {
                    "BatchTransformInput": {
                        "DataCapturedDestinationS3Uri": "s3://b/c",
                        "DatasetFormat": {"Csv": {"Header": True}},
                        "LocalPath": "/i",
                    }
                }
            },
            "BatchTransformInput.DataCapturedDestinationS3Uri 's3://b/c' is not in servekit up's own S3 store",
        ),
        (
            {"DataQualityAppSpecification": {"ImageUri": "x", "Environment": {"publish_cloudwatch_metrics": "Yes"}}},
            "publish_cloudwatch_metrics must be Enabled or Disabled",
        ),
    ],
)
def test_definitions_servekit_cannot_run_are_refused_with_the_reason(
    world: World, change: dict[str, Any], words: str
) -> None:
    error = error_of(world.sm.create_data_quality_job_definition, **data_quality(world, **change))
    assert error["Code"] == "ValidationException" and words in error["Message"], error


# ---------------------------------------------------------------------------------------------- schedules
def test_an_hourly_schedule_runs_the_monitor_on_the_last_hour_and_records_its_metrics(world: World) -> None:
    sm = world.sm
    sm.create_data_quality_job_definition(**data_quality(world))
    arn = sm.create_monitoring_schedule(**schedule("hourly"))["MonitoringScheduleArn"]
    assert arn.endswith(":monitoring-schedule/hourly")
    assert sm.describe_monitoring_schedule(MonitoringScheduleName="hourly")["MonitoringScheduleStatus"] == "Pending"
    assert world.tick(T0 + 60) == []  # taken up; the first fire is 11:00, after creation
    d = sm.describe_monitoring_schedule(MonitoringScheduleName="hourly")
    assert d["MonitoringScheduleStatus"] == "Scheduled" and "LastMonitoringExecutionSummary" not in d
    assert (d["EndpointName"], d["MonitoringType"]) == ("ep", "DataQuality")
    assert d["MonitoringScheduleConfig"]["ScheduleConfig"]["ScheduleExpression"] == "cron(0 * ? * * *)"

    [job] = world.tick(at("2026-11-30T11:00:05"))
    assert world.tick(at("2026-11-30T11:30:00")) == []  # once per fire
    cmd = world.monitor.commands[-1]
    assert cmd[:5] == ["python3", "-m", "servekit.cli.main", "monitor", "run"]
    option = {cmd[i]: cmd[i + 1] for i in range(5, len(cmd) - 1, 2)}
    assert option["--baseline"] == str(world.baseline / "v0001")
    assert option["--data"] == str(world.tmp / "capture" / "ep")
    assert (option["--since"], option["--until"]) == ("2026-11-30T10:00:00Z", "2026-11-30T11:00:00Z")
    assert (option["--window"], option["--step"], option["--min-window-rows"]) == ("3600s", "3600s", "50")
    out = Path(option["--out"])
    assert out == world.tmp / "reports" / "ep" / "hourly" / "2026" / "11" / "30" / "11"

    [e] = world.executions(MonitoringScheduleName="hourly")
    assert e["MonitoringExecutionStatus"] == "CompletedWithViolations"
    # its log, named for the processing job first as SageMaker's analyzer names it, went to the job's stream
    log_file = out / "servekit-monitor.log"
    assert log_file.read_text().startswith(
        f"Processing job arn:aws:sagemaker:us-east-1:000000000000:processing-job/{job}: monitoring schedule hourly, "
        "DataQuality of ep from 2026-11-30T10:00:00Z to 2026-11-30T11:00:00Z\n"
    )
    stream = f"{job}/algo-1-{int(at('2026-11-30T11:00:05'))}"
    group = "/aws/sagemaker/ProcessingJobs"
    assert world.logs.calls == [
        ("register", group, stream, log_file), ("flush", group, stream, log_file), ("unregister", "", "", log_file)
    ]  # fmt: skip
    assert e["ScheduledTime"] == datetime(2026, 11, 30, 11, tzinfo=UTC)
    assert e["ProcessingJobArn"] == f"arn:aws:sagemaker:us-east-1:000000000000:processing-job/{job}"
    assert (e["EndpointName"], e["MonitoringJobDefinitionName"], e["MonitoringType"]) == ("ep", "dq", "DataQuality")
    last = sm.describe_monitoring_schedule(MonitoringScheduleName="hourly")["LastMonitoringExecutionSummary"]
    assert last["ProcessingJobArn"] == e["ProcessingJobArn"]

    p = sm.describe_processing_job(ProcessingJobName=job)
    assert p["ProcessingJobStatus"] == "Completed" and p["MonitoringScheduleArn"] == arn
    assert p["ExitMessage"] == "CompletedWithViolations: Job completed successfully with 2 violations."
    uri = p["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"]
    assert uri == f"file://{out}"
    report = json.loads((out / "constraint_violations.json").read_text())  # where SageMaker puts it
    assert [v["feature_name"] for v in report["violations"]] == ["x", "y"]
    assert p["Environment"]["start_time"] == "2026-11-30T10:00:00Z" and p["Environment"]["end_time"].endswith(
        "11:00:00Z"
    )
    assert p["AppSpecification"]["ContainerArguments"][:1] == ["run"]

    # the metrics alarms and rollouts read, stamped when the execution finished
    ep = (("EndpointName", "ep"),)
    assert world.latest("DriftedFeatures", ep) == 2.0
    assert world.metrics.unit("DriftedFeatures", "servekit") == "Count"  # as monitor run --publish-url sends it
    assert world.latest("DataQualityViolations", (*ep, ("MonitoringSchedule", "hourly"))) == 2.0
    sagemaker_dims = (("Endpoint", "ep"), ("MonitoringSchedule", "hourly"))
    namespace = "aws/sagemaker/Endpoints/data-metrics"
    assert world.latest("feature_baseline_drift_x", sagemaker_dims, namespace) == pytest.approx(0.62)
    assert world.latest("feature_baseline_drift_c", sagemaker_dims, namespace) == pytest.approx(0.01)

    world.monitor.behaviour = "clean"
    world.tick(at("2026-11-30T12:00:00"))
    newest = world.executions(MonitoringScheduleName="hourly", SortBy="ScheduledTime")[0]
    assert newest["MonitoringExecutionStatus"] == "Completed"
    assert world.latest("DriftedFeatures", ep) == 0.0
    assert len(world.executions(StatusEquals="Completed")) == 1
    assert len(world.executions(ScheduledTimeAfter=datetime(2026, 11, 30, 11, 30, tzinfo=UTC))) == 1


def test_stop_start_delete(world: World) -> None:
    sm = world.sm
    sm.create_data_quality_job_definition(**data_quality(world))
    sm.create_monitoring_schedule(**schedule("s"))
    world.tick(T0)
    sm.stop_monitoring_schedule(MonitoringScheduleName="s")
    sm.stop_monitoring_schedule(MonitoringScheduleName="s")  # again: no change
    assert sm.describe_monitoring_schedule(MonitoringScheduleName="s")["MonitoringScheduleStatus"] == "Stopped"
    assert world.tick(at("2026-11-30T11:00:00")) == []
    assert (
        sm.list_monitoring_schedules(StatusEquals="Stopped")["MonitoringScheduleSummaries"][0]["MonitoringScheduleName"]
        == "s"
    )
    world.clock.now = at("2026-11-30T12:30:00")
    sm.start_monitoring_schedule(MonitoringScheduleName="s")
    assert world.tick(at("2026-11-30T12:30:01")) == []  # 11:00 and 12:00 were missed while stopped: not made up
    [job] = world.tick(at("2026-11-30T13:00:00"))
    assert world.executions()[0]["ScheduledTime"] == datetime(2026, 11, 30, 13, tzinfo=UTC)
    sm.delete_monitoring_schedule(MonitoringScheduleName="s")
    assert error_of(sm.describe_monitoring_schedule, MonitoringScheduleName="s")["Code"] == "ResourceNotFound"
    assert error_of(sm.stop_monitoring_schedule, MonitoringScheduleName="s")["Code"] == "ResourceNotFound"
    assert [e["MonitoringScheduleName"] for e in world.executions()] == ["s"]  # the history stays
    assert sm.describe_processing_job(ProcessingJobName=job)["ProcessingJobStatus"] == "Completed"
    assert world.tick(at("2026-11-30T14:00:00")) == []


def test_failed_executions_say_why(world: World) -> None:
    sm = world.sm
    sm.create_data_quality_job_definition(**data_quality(world, StoppingCondition={"MaxRuntimeInSeconds": 120}))
    sm.create_monitoring_schedule(**schedule("s"))
    world.tick(T0)

    def run(behaviour: str, hour: int) -> dict[str, Any]:
        world.monitor.behaviour = behaviour
        world.tick(at(f"2026-11-30T{hour:02d}:00:00"))
        return world.executions(SortBy="ScheduledTime")[0]

    assert run("empty", 11)["FailureReason"].startswith("Job inputs had no data")
    failed = run("fail", 12)
    assert failed["MonitoringExecutionStatus"] == "Failed"
    assert failed["FailureReason"] == "error: baseline /x: no CURRENT version"
    timed_out = run("timeout", 13)
    assert timed_out["FailureReason"] == "The execution ran longer than MaxRuntimeInSeconds (120)."
    few = run("insufficient", 14)
    assert few["MonitoringExecutionStatus"] == "Completed"
    job = few["ProcessingJobArn"].rsplit("/", 1)[1]
    assert "too few to judge" in world.sm.describe_processing_job(ProcessingJobName=job)["ExitMessage"]
    assert world.metrics.series("servekit") == []  # nothing judged, nothing recorded

    # only a file still being written (hidden), then no capture folder at all (nobody invoked the endpoint yet)
    shutil.rmtree(world.tmp / "capture" / "ep")
    (world.tmp / "capture" / "ep" / "AllTraffic").mkdir(parents=True)
    (world.tmp / "capture" / "ep" / "AllTraffic" / ".00-x.jsonl.tmp").write_text("{")
    assert run("drift", 15)["FailureReason"].startswith("Job inputs had no data: nothing captured under")
    shutil.rmtree(world.tmp / "capture" / "ep")
    assert run("drift", 16)["FailureReason"].startswith("Job inputs had no data: nothing captured under")
    # the endpoint is gone
    world.hosting.delete_endpoint("ep")
    gone = run("drift", 17)
    assert gone["MonitoringExecutionStatus"] == "Failed" and "Could not find endpoint" in gone["FailureReason"]
    assert len(world.executions(StatusEquals="Failed")) == 6
    # a monitor that fails saying nothing: its log holds only the scheduler's first line, which is not the reason
    world.hosting.create_endpoint("ep", "arn:aws:sagemaker:us-east-1:000000000000:endpoint/ep", "cfg", "InService",
                                  (VariantState("AllTraffic", 1.0, 1.0, 1, 1),))  # fmt: skip
    partition = world.tmp / "capture" / "ep" / "AllTraffic" / "2026" / "11" / "30" / "17"
    partition.mkdir(parents=True)
    (partition / "00-x.jsonl").write_text("{}\n")
    assert run("mute", 18)["FailureReason"] == "servekit monitor exited with 1."


def test_bad_schedules_are_refused_with_a_clear_message(world: World) -> None:
    sm = world.sm
    sm.create_data_quality_job_definition(**data_quality(world))
    sm.create_data_quality_job_definition(**data_quality(world, "on-bare", "bare"))
    cases: list[tuple[dict[str, Any], str]] = [
        (schedule("a", expression="cron(0 9 * * ? *)"), "Invalid ScheduleExpression 'cron(0 9 * * ? *)': use cron(0 *"),
        (schedule("a", expression="rate(1 hour)"), "Invalid ScheduleExpression"),
        (schedule("a", expression="NOW"), "needs ScheduleConfig.DataAnalysisStartTime"),
        (schedule("a", "missing"), "Job definition missing does not exist"),
        (schedule("a", "on-bare"), "Endpoint bare does not capture data"),
        (
            schedule("a", config={"MonitoringType": "ModelQuality"}),
            "Job definition dq is a DataQuality job definition, not ModelQuality",
        ),
        (schedule("a", config={"MonitoringType": "ModelBias"}), "servekit runs DataQuality and ModelQuality"),
        (
            schedule("a", config={"ScheduleConfig": {"ScheduleExpression": "cron(0 * ? * * *)",
                                                     "DataAnalysisStartTime": "PT1H"}}),
            "lies after the scheduled time",
        ),
        (schedule("a", Tags=[{"Key": "servekit:hour-seconds", "Value": "0"}]), "an integer number of seconds"),
    ]  # fmt: skip
    for params, words in cases:
        error = error_of(sm.create_monitoring_schedule, **params)
        assert error["Code"] == "ValidationException" and words in error["Message"], (params, error)
    assert sm.list_monitoring_schedules()["MonitoringScheduleSummaries"] == []
    sm.create_monitoring_schedule(**schedule("a"))
    assert error_of(sm.create_monitoring_schedule, **schedule("A"))["Code"] == "ResourceInUse"


def test_update_an_inline_definition_and_now(world: World) -> None:
    """An inline MonitoringJobDefinition; UpdateMonitoringSchedule to NOW with an explicit window runs once."""
    sm = world.sm
    inline = {
        "BaselineConfig": {"ConstraintsResource": {"S3Uri": str(world.baseline)}},
        "MonitoringInputs": [{"EndpointInput": {"EndpointName": "ep", "LocalPath": "/opt/ml/processing/input"}}],
        "MonitoringOutputConfig": {
            "MonitoringOutputs": [{"S3Output": {"S3Uri": str(world.tmp / "r"), "LocalPath": "/o"}}]
        },
        "MonitoringResources": {
            "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 1}
        },
        "MonitoringAppSpecification": {"ImageUri": "servekit"},
        "RoleArn": ROLE,
    }  # fmt: skip
    config = {"ScheduleConfig": {"ScheduleExpression": "cron(0 12 ? * * *)"}, "MonitoringJobDefinition": inline}
    sm.create_monitoring_schedule(MonitoringScheduleName="inline", MonitoringScheduleConfig=config)
    world.tick(T0)
    d = sm.describe_monitoring_schedule(MonitoringScheduleName="inline")
    assert d["MonitoringType"] == "DataQuality" and d["MonitoringScheduleStatus"] == "Scheduled"
    world.clock.now = at("2026-11-30T10:45:00")
    now = {"ScheduleExpression": "NOW", "DataAnalysisStartTime": "-PT2H", "DataAnalysisEndTime": "-PT0H"}
    sm.update_monitoring_schedule(
        MonitoringScheduleName="inline", MonitoringScheduleConfig={**config, "ScheduleConfig": now}
    )
    assert sm.describe_monitoring_schedule(MonitoringScheduleName="inline")["MonitoringScheduleStatus"] == "Pending"
    # NOW takes effect at the update: one execution over the two hours before it, then none
    assert len(world.tick(at("2026-11-30T10:45:01"))) == 1
    cmd = world.monitor.commands[-1]
    assert (cmd[cmd.index("--since") + 1], cmd[cmd.index("--until") + 1]) == (
        "2026-11-30T08:45:00Z",
        "2026-11-30T10:45:00Z",
    )
    assert cmd[cmd.index("--baseline") + 1] == str(world.baseline)
    assert world.tick(at("2026-11-30T12:00:00")) == []


def test_now_runs_once_over_its_window(world: World) -> None:
    sm = world.sm
    sm.create_data_quality_job_definition(**data_quality(world))
    now = {"ScheduleExpression": "NOW", "DataAnalysisStartTime": "-PT2H", "DataAnalysisEndTime": "-PT1H"}
    sm.create_monitoring_schedule(**schedule("once", config={"ScheduleConfig": now}))
    assert len(world.tick(T0 + 1)) == 1
    assert world.tick(T0 + 7200) == []
    cmd = world.monitor.commands[-1]
    assert cmd[cmd.index("--since") + 1] == "2026-11-30T08:30:00Z"
    assert cmd[cmd.index("--until") + 1] == "2026-11-30T09:30:00Z"


def test_time_compressed_schedule(world: World) -> None:
    sm = world.sm
    sm.create_data_quality_job_definition(**data_quality(world))
    tags = [{"Key": "servekit:hour-seconds", "Value": "2"}]
    window = {
        "ScheduleExpression": "cron(0 * ? * * *)",
        "DataAnalysisStartTime": "-PT24H",
        "DataAnalysisEndTime": "-PT0H",
    }
    sm.create_monitoring_schedule(**schedule("fast", config={"ScheduleConfig": window}, Tags=tags))
    start = 2_000_000_001.0
    world.tick(start)
    assert len(world.tick(start + 1)) == 1  # 2_000_000_002 is a multiple of 2
    assert world.tick(start + 2) == []
    assert len(world.tick(start + 3)) == 1
    cmd = world.monitor.commands[-1]
    assert cmd[cmd.index("--window") + 1] == "48s"  # 24 compressed hours
    assert cmd[cmd.index("--until") + 1] == "2033-05-18T03:33:24Z"
    assert Path(cmd[cmd.index("--out") + 1]).name == "3324"  # MMSS under the hour folder


def test_a_restart_marks_unfinished_executions_failed(world: World, tmp_path: Path) -> None:
    sm = world.sm
    sm.create_data_quality_job_definition(**data_quality(world))
    sm.create_monitoring_schedule(**schedule("s"))
    world.tick(T0)

    async def stuck(command: Any, log_path: Path, timeout_s: float) -> int:
        await asyncio.Event().wait()
        return 0

    world.scheduler._runner = stuck
    world.clock.now = at("2026-11-30T11:00:00")
    assert len(world.loop.call(world.scheduler.tick())) == 1
    until(lambda: world.executions()[0]["MonitoringExecutionStatus"] == "InProgress", "the execution to run")
    # a second servekit up on the same database (the first one "crashed")
    again = StateDB.open(tmp_path / "state")
    Scheduler(again.monitoring, Planner(again.monitoring, Hosting(again.conn)), None, Account(), clock=world.clock)
    again.close()
    [e] = world.executions()
    assert e["MonitoringExecutionStatus"] == "Failed" and "stopped while the execution ran" in e["FailureReason"]


def test_deleting_a_schedule_stops_its_running_execution(world: World) -> None:
    sm = world.sm
    sm.create_data_quality_job_definition(**data_quality(world))
    sm.create_monitoring_schedule(**schedule("s"))
    world.tick(T0)

    async def stuck(command: Any, log_path: Path, timeout_s: float) -> int:
        await asyncio.Event().wait()
        return 0

    world.scheduler._runner = stuck
    world.clock.now = at("2026-11-30T11:00:00")
    world.loop.call(world.scheduler.tick())
    sm.delete_monitoring_schedule(MonitoringScheduleName="s")
    [e] = world.executions()
    assert e["MonitoringExecutionStatus"] == "Stopped"
    assert e["FailureReason"] == "The monitoring schedule was deleted while the execution ran."


def test_a_model_quality_schedule_joins_labels_and_records_quality_metrics(world: World) -> None:
    sm = world.sm
    constraints = world.tmp / "quality" / "constraints.json"
    constraints.parent.mkdir()
    constraints.write_text("{}")
    endpoint_input = {
        "EndpointName": "ep",
        "LocalPath": "/opt/ml/processing/input",
        "InferenceAttribute": "label",
        "ProbabilityAttribute": "probability",
        "ProbabilityThresholdAttribute": 0.7,
        "StartTimeOffset": "-P1D",
        "EndTimeOffset": "-PT1H",
    }
    definition: dict[str, Any] = {
        "JobDefinitionName": "mq",
        "ModelQualityBaselineConfig": {"ConstraintsResource": {"S3Uri": str(constraints)}},
        "ModelQualityAppSpecification": {"ImageUri": "servekit", "ProblemType": "BinaryClassification"},
        "ModelQualityJobInput": {
            "EndpointInput": endpoint_input,
            "GroundTruthS3Input": {"S3Uri": f"file://{world.tmp}/labels"},
        },
        "ModelQualityJobOutputConfig": {
            "MonitoringOutputs": [{"S3Output": {"S3Uri": str(world.tmp / "mq"), "LocalPath": "/opt/ml/processing/o"}}]
        },
        "JobResources": {"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 1}},
        "RoleArn": ROLE,
    }
    no_truth = {
        **definition,
        "ModelQualityJobInput": {
            "EndpointInput": endpoint_input,
            "GroundTruthS3Input": {},
        },
    }
    assert "GroundTruthS3Input.S3Uri" in error_of(sm.create_model_quality_job_definition, **no_truth)["Message"]
    no_baseline = {**definition, "ModelQualityBaselineConfig": {}}
    assert "ConstraintsResource.S3Uri" in error_of(sm.create_model_quality_job_definition, **no_baseline)["Message"]
    sm.create_model_quality_job_definition(**definition)
    assert (
        sm.describe_model_quality_job_definition(JobDefinitionName="mq")["ModelQualityAppSpecification"]["ProblemType"]
        == "BinaryClassification"
    )
    sm.create_monitoring_schedule(**schedule("quality", "mq", config={"MonitoringType": "ModelQuality"}))
    world.tick(T0)
    world.tick(at("2026-11-30T11:00:00"))
    cmd = world.monitor.commands[-1]
    assert cmd[4:6] == ["quality", "run"]
    option = {cmd[i]: cmd[i + 1] for i in range(6, len(cmd) - 1, 2)}
    assert option["--capture"] == str(world.tmp / "capture" / "ep")
    assert (option["--labels"], option["--baseline"]) == (str(world.tmp / "labels"), str(constraints))
    # EndpointInput's offsets (labels arrive late): the day before, up to an hour ago
    assert (option["--since"], option["--until"]) == ("2026-11-29T11:00:00Z", "2026-11-30T10:00:00Z")
    assert (option["--window"], option["--step"]) == ("82800s", "3600s")
    assert option["--problem-type"] == "BinaryClassification"
    assert (option["--inference-attribute"], option["--probability-attribute"]) == ("label", "probability")
    assert option["--probability-threshold"] == "0.7"
    [e] = world.executions(MonitoringTypeEquals="ModelQuality")
    assert e["MonitoringExecutionStatus"] == "CompletedWithViolations" and e["MonitoringType"] == "ModelQuality"
    dims = (("Endpoint", "ep"), ("MonitoringSchedule", "quality"))
    namespace = "aws/sagemaker/Endpoints/model-metrics"
    assert world.latest("accuracy", dims, namespace) == pytest.approx(0.81)
    assert world.latest("f1", dims, namespace) == pytest.approx(0.78)
    assert world.latest("ModelQualityViolations", (("EndpointName", "ep"),)) == 1.0
    assert "log_loss" not in {m for _, m, _ in world.metrics.series(namespace)}  # null: not recorded

    world.monitor.behaviour = "unlabelled"
    world.tick(at("2026-11-30T12:00:00"))
    newest = world.executions(SortBy="ScheduledTime")[0]
    assert newest["MonitoringExecutionStatus"] == "Failed"
    assert "no ground truth label joined the window's 150 captured predictions" in newest["FailureReason"]


# ---------------------------------------------------------------------------------------------- the runner
def test_the_subprocess_runner_returns_the_exit_status_and_keeps_the_output(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    code = asyncio.run(run_subprocess([sys.executable, "-c", "print('judged'); raise SystemExit(3)"], log, 60))
    assert code == 3 and log.read_text().strip() == "judged"


def test_the_subprocess_runner_stops_a_command_past_its_time(tmp_path: Path) -> None:
    marker = tmp_path / "still-running"
    script = f"import time, pathlib\ntime.sleep(30)\npathlib.Path({str(marker)!r}).write_text('x')"
    with pytest.raises(TimeoutError):
        asyncio.run(run_subprocess([sys.executable, "-c", script], tmp_path / "log", 0.5))
    assert not marker.exists()


def test_an_endpoint_capturing_into_servekits_s3_is_read_from_the_stores_folder(world: World) -> None:
    """The SDK's DataCaptureConfig(True) captures to the default bucket: a schedule reads the folder the store keeps
    the endpoint's prefix in (before the first capture too); another bucket is refused with the reason."""
    store = world.tmp / "s3"
    (store / "bucket").mkdir(parents=True)

    def objects(uri: str) -> Path | None:
        return store / "bucket" if uri == "s3://bucket/" else None

    arn = "arn:aws:sagemaker:us-east-1:000000000000:"
    variant = {"VariantName": "AllTraffic", "ModelName": "m", "InstanceType": "ml.m5.large"}
    states = (VariantState("AllTraffic", 1.0, 1.0, 1, 1),)
    for name, destination in (("s3cap", "s3://bucket/model-monitor/data-capture"), ("far", "s3://other/c")):
        capture = {"EnableCapture": True, "DestinationS3Uri": destination}
        world.hosting.create_endpoint_config(name, f"{arn}endpoint-config/{name}", [variant], capture)
        world.hosting.create_endpoint(name, f"{arn}endpoint/{name}", name, "InService", states)
    planner = Planner(world.service.repo, world.hosting, Account(), objects)
    assert planner.capture_dir("s3cap") == str(store / "bucket" / "model-monitor" / "data-capture" / "s3cap")
    assert planner.capture_uri("s3cap") == "s3://bucket/model-monitor/data-capture/s3cap"
    with pytest.raises(ApiError, match="not in servekit up's own S3 store"):
        planner.capture_dir("far")
