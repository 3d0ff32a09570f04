"""The Model Monitor service in process for the tests of this folder: a real botocore client over the service's
handlers, real SQLite, the clock injected, and a fake monitor (:class:`FakeMonitor`) whose outcome each test picks."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest
from botocore.exceptions import ClientError

from servekit.aws import Credentials
from servekit.aws.front import Call
from servekit.aws.names import Account
from servekit.services.cloudwatch.source import MetricQuery
from servekit.services.cloudwatch.store import MetricsStore
from servekit.services.database import StateDB
from servekit.services.hosting.store import Hosting
from servekit.services.hosting.store_rows import VariantState
from servekit.services.monitoring.schedules.api import MonitoringService
from servekit.services.monitoring.schedules.plans import Planner
from servekit.services.monitoring.schedules.scheduler import Scheduler
from servekit.services.monitoring.schedules.store import Monitoring

T = TypeVar("T")
T0 = datetime(2026, 11, 30, 10, 30, tzinfo=UTC).timestamp()
HOUR = 3600.0
ROLE = "arn:aws:iam::000000000000:role/monitor"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class LoopThread:
    """One event loop on a thread of its own: the service's tasks live there between API calls."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def call(self, aw: Awaitable[T]) -> T:
        async def run() -> T:
            return await aw

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout=30)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@dataclass
class FakeMonitor:
    """Writes what ``servekit monitor run`` writes for the window it is asked about; ``behaviour`` picks the
    outcome of the next runs (drift, clean, insufficient, empty, fail, timeout)."""

    behaviour: str = "drift"
    commands: list[list[str]] = field(default_factory=list)

    async def __call__(self, command: Any, log_path: Path, timeout_s: float) -> int:
        cmd = [str(c) for c in command]
        self.commands.append(cmd)
        if self.behaviour == "timeout":
            raise TimeoutError
        if self.behaviour == "fail":
            with log_path.open("a") as log:  # after the scheduler's first line, as the real runner appends
                log.write("reading the baseline\nerror: baseline /x: no CURRENT version\n")
            return 1
        if self.behaviour == "mute":  # fails saying nothing
            return 1
        if cmd[4] == "quality":
            return self.quality(cmd)
        out = Path(cmd[cmd.index("--out") + 1])
        end = cmd[cmd.index("--until") + 1]
        rows = {"drift": 500, "clean": 500, "insufficient": 7, "empty": 0}[self.behaviour]
        drift = self.behaviour == "drift"
        features = {
            "x": {"type": "numerical", "metrics": {"ks_statistic": 0.62 if drift else 0.02}, "drifted": drift},
            "y": {"type": "numerical", "metrics": {"ks_statistic": 0.41 if drift else 0.03}, "drifted": drift},
            "c": {"type": "categorical", "metrics": {"js_distance": 0.01}, "drifted": False},
        }
        status = "ok" if rows >= 100 else "insufficient"
        window = {"index": 0, "start": "-", "end": end, "rows": rows, "status": status, "features": features}
        (out / "metrics.json").write_text(json.dumps({"windows": [window], "alarms": [], "warnings": []}))
        violations = [
            {"feature_name": f, "constraint_check_type": "baseline_drift_check", "description": "drifted"}
            for f in ("x", "y")
            if drift
        ]
        folder = out / "windows" / end.replace(":", "-")
        folder.mkdir(parents=True)
        (folder / "constraint_violations.json").write_text(json.dumps({"violations": violations}))
        return 0

    def quality(self, cmd: list[str]) -> int:
        """``servekit monitor quality run``'s files: one binary-classification window (labelled or not)."""
        out = Path(cmd[cmd.index("--output") + 1])
        out.mkdir(parents=True, exist_ok=True)
        labelled = 0 if self.behaviour == "unlabelled" else 120
        metrics = {"accuracy": 0.81, "f1": 0.78, "auc": 0.9, "log_loss": None, "precision_macro": 0.8}
        window: dict[str, Any] = {"predictions": 150, "labelled": labelled}
        window.update(status="ok" if labelled else "insufficient", metrics=metrics, violations=[])
        (out / "quality_metrics.json").write_text(
            json.dumps({"problem_type": "BinaryClassification", "windows": [window]})
        )
        violation = {"metric_name": "accuracy", "constraint_check_type": "LessThanThreshold", "description": "0.81"}
        (out / "constraint_violations.json").write_text(json.dumps({"violations": [violation] if labelled else []}))
        return 0


@dataclass
class ShippedLogs:
    """The scheduler's CloudWatch Logs port, recorded: (what, group, stream, path) per call."""

    calls: list[tuple[str, str, str, Path]] = field(default_factory=list)

    def register(self, group: str, stream: str, path: Path) -> None:
        self.calls.append(("register", group, stream, path))

    def unregister(self, path: Path) -> None:
        self.calls.append(("unregister", "", "", path))

    def flush(self, group: str, stream: str, path: Path) -> None:
        self.calls.append(("flush", group, stream, path))


@dataclass
class World:
    sm: Any
    service: MonitoringService
    scheduler: Scheduler
    clock: Clock
    monitor: FakeMonitor
    loop: LoopThread
    metrics: MetricsStore
    hosting: Hosting
    tmp: Path
    baseline: Path
    logs: ShippedLogs

    def tick(self, at: float) -> list[str]:
        self.clock.now = at
        started = self.loop.call(self.scheduler.tick())
        self.loop.call(self.scheduler.wait_idle())
        return started

    def executions(self, **kw: Any) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = self.sm.list_monitoring_executions(**kw)["MonitoringExecutionSummaries"]
        return out

    def latest(self, metric: str, dims: tuple[tuple[str, str], ...], namespace: str = "servekit") -> float:
        query = MetricQuery(namespace, metric, dims, 1, "Maximum")
        points = self.metrics.datapoints(query, self.clock.now - 2 * HOUR, self.clock.now + 10)
        assert points, f"no datapoint of {namespace}/{metric} {dims}"
        return points[-1][1]


@pytest.fixture
def world(tmp_path: Path, boto_client: Callable[..., Any], api_keys: Credentials) -> Iterator[World]:
    db = StateDB.open(tmp_path / "state")
    clock = Clock(T0)
    hosting = Hosting(db.conn, clock=clock)
    capture = tmp_path / "capture"
    partition = capture / "ep" / "AllTraffic" / "2026" / "11" / "30" / "10"
    partition.mkdir(parents=True)
    (partition / "00-x.jsonl").write_text("{}\n")  # what the fake monitor "reads"
    variant = {"VariantName": "AllTraffic", "ModelName": "m", "InstanceType": "ml.m5.large"}
    arn = "arn:aws:sagemaker:us-east-1:000000000000:"
    hosting.create_endpoint_config(
        "cfg", arn + "endpoint-config/cfg", [variant], {"EnableCapture": True, "DestinationS3Uri": f"file://{capture}"}
    )
    hosting.create_endpoint_config("nocap", arn + "endpoint-config/nocap", [variant], None)
    states = (VariantState("AllTraffic", 1.0, 1.0, 1, 1),)
    hosting.create_endpoint("ep", arn + "endpoint/ep", "cfg", "InService", states)
    hosting.create_endpoint("bare", arn + "endpoint/bare", "nocap", "InService", states)
    baseline = tmp_path / "baseline"
    (baseline / "v0001").mkdir(parents=True)
    (baseline / "CURRENT").write_text("v0001")
    (baseline / "v0001" / "baseline.json").write_text("{}")
    (baseline / "v0001" / "constraints.json").write_text("{}")
    metrics = MetricsStore(db.metrics, clock=clock, resolution_s=1)
    monitor = FakeMonitor()
    repo = Monitoring(db.conn, clock=clock)
    planner = Planner(repo, hosting, Account())
    logs = ShippedLogs()
    scheduler = Scheduler(repo, planner, metrics, Account(), clock=clock, runner=monitor, python="python3", logs=logs)
    service = MonitoringService(repo, planner, scheduler, Account(), clock=clock)
    loop = LoopThread()
    handlers = service.handlers()

    def dispatch(call: Call) -> Mapping[str, Any]:
        assert call.service == "sagemaker"
        return loop.call(handlers[call.operation](call.params))

    sm = boto_client("sagemaker", api_keys.admin, dispatch=dispatch)
    try:
        yield World(sm, service, scheduler, clock, monitor, loop, metrics, hosting, tmp_path, baseline, logs)
    finally:
        loop.call(scheduler.close())
        loop.stop()
        db.close()


def data_quality(w: World, name: str = "dq", endpoint: str = "ep", **overrides: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "JobDefinitionName": name,
        "DataQualityBaselineConfig": {"ConstraintsResource": {"S3Uri": f"file://{w.baseline}/v0001/constraints.json"}},
        "DataQualityAppSpecification": {"ImageUri": "servekit", "ContainerArguments": ["--min-window-rows", "50"]},
        "DataQualityJobInput": {"EndpointInput": {"EndpointName": endpoint, "LocalPath": "/opt/ml/processing/input"}},
        "DataQualityJobOutputConfig": {
            "MonitoringOutputs": [
                {"S3Output": {"S3Uri": f"file://{w.tmp}/reports", "LocalPath": "/opt/ml/processing/output"}}
            ]
        },
        "JobResources": {"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 1}},
        "RoleArn": ROLE,
    }
    params.update(overrides)
    return params


def schedule(name: str, definition: str = "dq", expression: str = "cron(0 * ? * * *)", **kw: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "ScheduleConfig": {"ScheduleExpression": expression},
        "MonitoringJobDefinitionName": definition,
        "MonitoringType": "DataQuality",
    }
    config.update(kw.pop("config", {}))
    return {"MonitoringScheduleName": name, "MonitoringScheduleConfig": config, **kw}


def error_of(call: Callable[..., Any], **params: Any) -> dict[str, Any]:
    with pytest.raises(ClientError) as err:
        call(**params)
    return dict(err.value.response["Error"])


def until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll a condition the service's loop thread makes true."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def at(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


# ---------------------------------------------------------------------------------------------- definitions
