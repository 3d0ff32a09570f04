"""CloudWatch Logs' operations through real botocore clients (in process, signed, validated against botocore's
``logs`` model), on a real SQLite state database with an injected clock: groups, streams, paging and its tokens,
reading forward and backward, filtering, retention, AWS's error codes, and the SageMaker SDK's reading loop."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.aws import Api, Call, Credentials
from servekit.services.database import StateDB
from servekit.services.logs.api import LogsService
from servekit.services.logs.store import Logs, StreamBatch
from servekit.testing.aws import in_process_client

T0 = 1_700_000_000.0  # the injected wall clock's start (seconds)
T0_MS = int(T0 * 1000)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


class Plane:
    def __init__(self, home: Path) -> None:
        self.db = StateDB.open(home)
        self.clock = Clock()
        self.repo = Logs(self.db.conn, self.clock)
        self.keys = Credentials.load_or_create(home)
        self.handlers = LogsService(self.repo).handlers()
        self.client = in_process_client(
            Api(self.keys, services=("logs",), strict_output=True), "logs", self.keys.admin, self.dispatch
        )

    def dispatch(self, call: Call) -> Mapping[str, Any] | None:
        async def run() -> Mapping[str, Any]:
            return await self.handlers[call.operation](call.params)

        return asyncio.run(run())

    def lines(self, group: str, stream: str, messages: list[str], step_ms: int = 1) -> None:
        """Ship ``messages`` into ``stream`` as the shipper would (creating both), from now, ``step_ms`` apart."""
        events = [(int(self.clock.now * 1000) + i * step_ms, m) for i, m in enumerate(messages)]
        self.repo.put([StreamBatch(group, stream, events)])


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[Plane]:
    p = Plane(tmp_path / "home")
    yield p
    p.db.close()


def code(exc: pytest.ExceptionInfo[botocore.exceptions.ClientError]) -> str:
    return str(exc.value.response["Error"]["Code"])


# ---- groups and streams --------------------------------------------------------------------------------------------
def test_groups_are_created_listed_by_prefix_paged_and_deleted(plane: Plane) -> None:
    logs = plane.client
    for name in ("/aws/sagemaker/Endpoints/a", "/aws/sagemaker/Endpoints/b", "/aws/sagemaker/TransformJobs", "mine"):
        logs.create_log_group(logGroupName=name)
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.create_log_group(logGroupName="mine")
    assert code(exc) == "ResourceAlreadyExistsException"

    first = logs.describe_log_groups(logGroupNamePrefix="/aws/sagemaker/", limit=2)
    names = [g["logGroupName"] for g in first["logGroups"]]
    assert names == ["/aws/sagemaker/Endpoints/a", "/aws/sagemaker/Endpoints/b"]
    second = logs.describe_log_groups(logGroupNamePrefix="/aws/sagemaker/", limit=2, nextToken=first["nextToken"])
    assert [g["logGroupName"] for g in second["logGroups"]] == ["/aws/sagemaker/TransformJobs"]
    assert "nextToken" not in second
    group = second["logGroups"][0]
    assert group["creationTime"] == T0_MS and group["storedBytes"] == 0
    assert group["arn"] == "arn:aws:logs:us-east-1:000000000000:log-group:/aws/sagemaker/TransformJobs:*"

    pages = logs.get_paginator("describe_log_groups").paginate(PaginationConfig={"PageSize": 1})
    assert [g["logGroupName"] for page in pages for g in page["logGroups"]][-1] == "mine"

    logs.delete_log_group(logGroupName="mine")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.delete_log_group(logGroupName="mine")
    assert code(exc) == "ResourceNotFoundException"


def test_streams_are_created_and_errors_name_what_is_missing(plane: Plane) -> None:
    logs = plane.client
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.create_log_stream(logGroupName="g", logStreamName="s")
    assert code(exc) == "ResourceNotFoundException"
    logs.create_log_group(logGroupName="g")
    logs.create_log_stream(logGroupName="g", logStreamName="s")
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.create_log_stream(logGroupName="g", logStreamName="s")
    assert code(exc) == "ResourceAlreadyExistsException"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.get_log_events(logGroupName="g", logStreamName="nope")
    assert code(exc) == "ResourceNotFoundException"
    assert "log stream" in exc.value.response["Error"]["Message"]
    logs.delete_log_stream(logGroupName="g", logStreamName="s")
    assert logs.describe_log_streams(logGroupName="g")["logStreams"] == []


def test_describe_log_streams_answers_a_token_only_when_more_streams_follow(plane: Plane) -> None:
    for i in range(3):
        plane.lines("/aws/sagemaker/TransformJobs", f"job/i-{i}", ["x"])
    logs = plane.client
    exact = logs.describe_log_streams(
        logGroupName="/aws/sagemaker/TransformJobs", logStreamNamePrefix="job/", orderBy="LogStreamName", limit=3
    )
    assert [s["logStreamName"] for s in exact["logStreams"]] == ["job/i-0", "job/i-1", "job/i-2"]
    assert "nextToken" not in exact  # the SDK would otherwise ask again, forever
    short = logs.describe_log_streams(logGroupName="/aws/sagemaker/TransformJobs", limit=2)
    rest = logs.describe_log_streams(logGroupName="/aws/sagemaker/TransformJobs", limit=2, nextToken=short["nextToken"])
    assert [s["logStreamName"] for s in rest["logStreams"]] == ["job/i-2"] and "nextToken" not in rest
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.describe_log_streams(logGroupName="/aws/sagemaker/TransformJobs", nextToken="garbage")
    assert code(exc) == "InvalidParameterException"


def test_describe_log_streams_orders_by_last_event_time_either_way(plane: Plane) -> None:
    plane.repo.put([StreamBatch("g", "b", [(T0_MS + 30, "late")])])
    plane.repo.put([StreamBatch("g", "a", [(T0_MS + 10, "early")])])
    plane.repo.put([StreamBatch("g", "c", [(T0_MS + 20, "middle")])])
    logs = plane.client
    newest = logs.describe_log_streams(logGroupName="g", orderBy="LastEventTime", descending=True)["logStreams"]
    assert [s["logStreamName"] for s in newest] == ["b", "c", "a"]
    assert newest[0]["lastEventTimestamp"] == T0_MS + 30 and newest[0]["firstEventTimestamp"] == T0_MS + 30
    assert newest[0]["storedBytes"] == len("late") + 26
    oldest = logs.describe_log_streams(logGroupName="g", orderBy="LastEventTime", limit=1)
    assert [s["logStreamName"] for s in oldest["logStreams"]] == ["a"] and "nextToken" in oldest
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.describe_log_streams(logGroupName="g", orderBy="LastEventTime", logStreamNamePrefix="a")
    assert code(exc) == "InvalidParameterException"


# ---- writing and reading -------------------------------------------------------------------------------------------
def test_put_log_events_stores_users_events_and_rejects_what_aws_rejects(plane: Plane) -> None:
    logs = plane.client
    logs.create_log_group(logGroupName="app")
    logs.create_log_stream(logGroupName="app", logStreamName="web")
    out = logs.put_log_events(
        logGroupName="app",
        logStreamName="web",
        logEvents=[{"timestamp": T0_MS, "message": "hello"}, {"timestamp": T0_MS + 3 * 3_600_000, "message": "new"}],
    )
    assert out["rejectedLogEventsInfo"] == {"tooNewLogEventStartIndex": 1}
    old = [{"timestamp": T0_MS - 15 * 86_400_000 + i, "message": "too old"} for i in range(2)]
    out = logs.put_log_events(logGroupName="app", logStreamName="web", logEvents=old)
    assert out["rejectedLogEventsInfo"] == {"tooOldLogEventEndIndex": 1}
    events = logs.get_log_events(logGroupName="app", logStreamName="web", startFromHead=True)["events"]
    assert [(e["timestamp"], e["message"], e["ingestionTime"]) for e in events] == [(T0_MS, "hello", T0_MS)]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.put_log_events(
            logGroupName="app",
            logStreamName="web",
            logEvents=[{"timestamp": T0_MS + 5, "message": "b"}, {"timestamp": T0_MS, "message": "a"}],
        )
    assert code(exc) == "InvalidParameterException"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.put_log_events(logGroupName="app", logStreamName="nope", logEvents=[{"timestamp": T0_MS, "message": "x"}])
    assert code(exc) == "ResourceNotFoundException"


def test_get_log_events_pages_forward_and_answers_the_same_token_once_caught_up(plane: Plane) -> None:
    plane.lines("g", "s", [f"line {i}" for i in range(5)])
    logs = plane.client
    first = logs.get_log_events(logGroupName="g", logStreamName="s", startFromHead=True, limit=2)
    assert [e["message"] for e in first["events"]] == ["line 0", "line 1"]
    assert first["nextForwardToken"].startswith("f/") and first["nextBackwardToken"].startswith("b/")
    second = logs.get_log_events(logGroupName="g", logStreamName="s", nextToken=first["nextForwardToken"], limit=2)
    third = logs.get_log_events(logGroupName="g", logStreamName="s", nextToken=second["nextForwardToken"], limit=2)
    assert [e["message"] for e in second["events"] + third["events"]] == ["line 2", "line 3", "line 4"]
    end = logs.get_log_events(logGroupName="g", logStreamName="s", nextToken=third["nextForwardToken"])
    assert end["events"] == [] and end["nextForwardToken"] == third["nextForwardToken"]
    plane.clock.now += 1  # what arrives later (stamped later: a stream reads in time order) comes with the same token
    plane.lines("g", "s", ["line 5"])
    later = logs.get_log_events(logGroupName="g", logStreamName="s", nextToken=end["nextForwardToken"])
    assert [e["message"] for e in later["events"]] == ["line 5"]
    back = logs.get_log_events(logGroupName="g", logStreamName="s", nextToken=third["nextBackwardToken"], limit=2)
    assert [e["message"] for e in back["events"]] == ["line 2", "line 3"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.get_log_events(logGroupName="g", logStreamName="s", nextToken="x/1")
    assert code(exc) == "InvalidParameterException"


def test_get_log_events_from_the_tail_and_by_time(plane: Plane) -> None:
    plane.lines("g", "s", [f"line {i}" for i in range(5)], step_ms=1000)
    logs = plane.client
    tail = logs.get_log_events(logGroupName="g", logStreamName="s", limit=2)  # startFromHead defaults to False
    assert [e["message"] for e in tail["events"]] == ["line 3", "line 4"]
    older = logs.get_log_events(logGroupName="g", logStreamName="s", nextToken=tail["nextBackwardToken"])
    assert [e["message"] for e in older["events"]] == ["line 0", "line 1", "line 2"]
    window = logs.get_log_events(
        logGroupName="g", logStreamName="s", startTime=T0_MS + 1000, endTime=T0_MS + 3000, startFromHead=True
    )
    assert [e["message"] for e in window["events"]] == ["line 1", "line 2"]
    empty = logs.get_log_events(logGroupName="g", logStreamName="s", startTime=T0_MS + 60_000, startFromHead=True)
    again = logs.get_log_events(logGroupName="g", logStreamName="s", startTime=T0_MS + 60_000,
                                nextToken=empty["nextForwardToken"])  # fmt: skip
    assert empty["events"] == again["events"] == [] and again["nextForwardToken"] == empty["nextForwardToken"]


def test_the_sagemaker_sdk_reading_loop_prints_a_jobs_log_and_stops(plane: Plane) -> None:
    """sagemaker.logs: describe_log_streams(prefix job/, orderBy LogStreamName, limit=min(instances, 50)) while the
    answer carries a token, then get_log_events(startFromHead=True) per stream until the token repeats."""
    plane.lines("/aws/sagemaker/TransformJobs", "job/i-a", [f"a{i}" for i in range(25)])
    plane.lines("/aws/sagemaker/TransformJobs", "job/i-b", ["b0", "b1"])
    plane.lines("/aws/sagemaker/TransformJobs", "other-job/i-c", ["not this job"])
    logs = plane.client
    streams = logs.describe_log_streams(
        logGroupName="/aws/sagemaker/TransformJobs", logStreamNamePrefix="job/", orderBy="LogStreamName", limit=2
    )
    names = [s["logStreamName"] for s in streams["logStreams"]]
    asked = 1
    while "nextToken" in streams:  # the SDK's loop: it asks again *without* the token
        asked += 1
        assert asked < 5, "DescribeLogStreams keeps answering a nextToken"
        streams = logs.describe_log_streams(
            logGroupName="/aws/sagemaker/TransformJobs", logStreamNamePrefix="job/", orderBy="LogStreamName", limit=2
        )
    assert names == ["job/i-a", "job/i-b"]
    printed: dict[str, list[str]] = {}
    for name in names:
        token: str | None = None
        calls = 0
        while True:
            calls += 1
            assert calls < 10
            kwargs: dict[str, Any] = {"nextToken": token} if token else {"startFromHead": True}
            got = logs.get_log_events(logGroupName="/aws/sagemaker/TransformJobs", logStreamName=name, limit=10,
                                      **kwargs)  # fmt: skip
            printed.setdefault(name, []).extend(e["message"] for e in got["events"])
            if got["nextForwardToken"] == token:
                break
            token = got["nextForwardToken"]
    assert printed == {"job/i-a": [f"a{i}" for i in range(25)], "job/i-b": ["b0", "b1"]}


# ---- filtering -----------------------------------------------------------------------------------------------------
def test_filter_log_events_matches_terms_phrases_alternatives_and_exclusions(plane: Plane) -> None:
    plane.lines("g", "a", ["ERROR disk full", "INFO started", "ERROR Failed to load model", "WARN slow"])
    plane.lines("g", "b", ["ERROR Failed to bind", "DEBUG noise"])
    logs = plane.client

    def messages(**kw: Any) -> list[str]:
        return [e["message"] for e in logs.filter_log_events(logGroupName="g", **kw)["events"]]

    assert messages(filterPattern="ERROR") == ["ERROR disk full", "ERROR Failed to bind", "ERROR Failed to load model"]
    assert messages(filterPattern='"Failed to load"') == ["ERROR Failed to load model"]
    assert messages(filterPattern="ERROR Failed") == ["ERROR Failed to bind", "ERROR Failed to load model"]
    assert messages(filterPattern="?WARN ?DEBUG") == ["DEBUG noise", "WARN slow"]
    assert messages(filterPattern="ERROR -bind") == ["ERROR disk full", "ERROR Failed to load model"]
    assert messages(filterPattern="error") == []  # terms are case-sensitive, as on AWS
    assert messages(logStreamNames=["b"]) == ["ERROR Failed to bind", "DEBUG noise"]
    in_window = messages(logStreamNamePrefix="a", startTime=T0_MS + 1, endTime=T0_MS + 3)
    assert in_window == ["INFO started", "ERROR Failed to load model"]
    found = logs.filter_log_events(logGroupName="g", filterPattern="noise")["events"][0]
    assert found["logStreamName"] == "b" and found["eventId"]
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.filter_log_events(logGroupName="g", filterPattern="{ $.level = 1 }")
    assert code(exc) == "InvalidParameterException"


def test_filter_log_events_pages_with_a_token_bound_to_its_search(plane: Plane) -> None:
    plane.lines("g", "s", [f"hit {i}" for i in range(7)])
    logs = plane.client
    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        kwargs: dict[str, Any] = {"nextToken": token} if token else {}
        page = logs.filter_log_events(logGroupName="g", filterPattern="hit", limit=3, **kwargs)
        pages += 1
        seen += [e["message"] for e in page["events"]]
        token = page.get("nextToken")
        if token is None:
            break
    assert seen == [f"hit {i}" for i in range(7)] and pages == 3
    first = logs.filter_log_events(logGroupName="g", filterPattern="hit", limit=3)
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.filter_log_events(logGroupName="g", filterPattern="other", nextToken=first["nextToken"])
    assert code(exc) == "InvalidParameterException"


# ---- retention -----------------------------------------------------------------------------------------------------
def test_retention_policy_is_shown_validated_and_honoured(plane: Plane) -> None:
    logs = plane.client
    logs.create_log_group(logGroupName="g")
    logs.put_retention_policy(logGroupName="g", retentionInDays=1)
    assert logs.describe_log_groups(logGroupNamePrefix="g")["logGroups"][0]["retentionInDays"] == 1
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.put_retention_policy(logGroupName="g", retentionInDays=2)
    assert code(exc) == "InvalidParameterException"
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.put_retention_policy(logGroupName="missing", retentionInDays=1)
    assert code(exc) == "ResourceNotFoundException"
    plane.lines("g", "s", ["old"])
    plane.clock.now += 86_400 + 1  # a day later the event is past the group's retention
    plane.lines("g", "s", ["new"])
    out = logs.put_log_events(logGroupName="g", logStreamName="s", logEvents=[{"timestamp": T0_MS, "message": "x"}])
    assert out["rejectedLogEventsInfo"] == {"expiredLogEventEndIndex": 0}
    assert plane.repo.prune(max_age_days=None, max_bytes=None) == 1
    events = logs.get_log_events(logGroupName="g", logStreamName="s", startFromHead=True)["events"]
    assert [e["message"] for e in events] == ["new"]
    logs.delete_retention_policy(logGroupName="g")
    assert "retentionInDays" not in logs.describe_log_groups(logGroupNamePrefix="g")["logGroups"][0]


def test_put_log_events_keeps_cloudwatchs_size_limits_and_never_echoes_the_batch(plane: Plane) -> None:
    logs = plane.client
    logs.create_log_group(logGroupName="app")
    logs.create_log_stream(logGroupName="app", logStreamName="web")
    big = {"timestamp": T0_MS, "message": "x" * (1_048_576 + 1)}
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.put_log_events(logGroupName="app", logStreamName="web", logEvents=[big])
    assert code(exc) == "InvalidParameterException" and "1048577 bytes exceeds limit of 1048576" in str(exc.value)
    batch = [{"timestamp": T0_MS + i, "message": "y" * 300_000} for i in range(4)]  # 1.2 MB in all
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.put_log_events(logGroupName="app", logStreamName="web", logEvents=batch)
    assert code(exc) == "InvalidParameterException" and "Upload too large" in str(exc.value)
    many = [{"timestamp": T0_MS, "message": "z" * 40} for _ in range(10_001)]  # over the model's 10,000 events
    with pytest.raises(botocore.exceptions.ClientError) as exc:
        logs.put_log_events(logGroupName="app", logStreamName="web", logEvents=many)
    assert len(str(exc.value)) < 1_000  # the message names the limit, not the 450 KB it was sent
    assert logs.get_log_events(logGroupName="app", logStreamName="web")["events"] == []


def test_get_log_events_reads_in_time_order_not_arrival_order(plane: Plane) -> None:
    """Events put out of time order (two writers, a late batch) read sorted by timestamp, as AWS answers them; a
    token from before (an event id alone) still reads on from that event."""
    logs = plane.client
    logs.create_log_group(logGroupName="app")
    logs.create_log_stream(logGroupName="app", logStreamName="web")
    for batch in ([(T0_MS + 20, "c"), (T0_MS + 30, "d")], [(T0_MS, "a"), (T0_MS + 10, "b")], [(T0_MS + 20, "c2")]):
        events = [{"timestamp": ts, "message": m} for ts, m in batch]
        logs.put_log_events(logGroupName="app", logStreamName="web", logEvents=events)
    head = logs.get_log_events(logGroupName="app", logStreamName="web", startFromHead=True)
    assert [e["message"] for e in head["events"]] == ["a", "b", "c", "c2", "d"]
    page = logs.get_log_events(logGroupName="app", logStreamName="web", startFromHead=True, limit=2)
    rest = logs.get_log_events(logGroupName="app", logStreamName="web", nextToken=page["nextForwardToken"])
    assert [e["message"] for e in page["events"] + rest["events"]] == ["a", "b", "c", "c2", "d"]
    tail = logs.get_log_events(logGroupName="app", logStreamName="web", limit=2)
    before = logs.get_log_events(logGroupName="app", logStreamName="web", nextToken=tail["nextBackwardToken"])
    assert [e["message"] for e in before["events"] + tail["events"]] == ["a", "b", "c", "c2", "d"]
    stream = plane.repo.stream("app", "web")
    assert stream is not None
    first_id = next(e.id for e in plane.repo.read(stream.seq) if e.message == "c")  # the first event put
    old = logs.get_log_events(logGroupName="app", logStreamName="web", nextToken=f"f/{first_id:020d}")
    assert [e["message"] for e in old["events"]] == ["c2", "d"]  # after "c" (the first put), where it sorts now
