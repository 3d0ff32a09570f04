"""An endpoint's and a transform job's logs in the console: the newest lines of the group through the ``logs``
service (DescribeLogStreams, GetLogEvents from each stream's tail), merged by time and escaped; the endpoint page's
and the job page's log sections built from fake API answers; and the launch layer's call reaching CloudWatch Logs
of a real plane in process."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from servekit.aws import Call, Credentials
from servekit.console import ApiFailure, ConsoleConfig, create_app, logview
from servekit.console.pages import jobs
from servekit.launch.console import api_call
from servekit.launch.up import build

EVIL = '<script>alert("x")</script>'
NOW = 1_700_000_000.0


class FakeApi:
    """The public API as the console sees it: log groups of streams of ``(timestamp ms, message)`` answered as
    CloudWatch Logs does, and fixed answers for everything else; every call recorded."""

    def __init__(self, groups: dict[str, dict[str, list[tuple[int, str]]]], answers: dict[str, Any]) -> None:
        self.groups = groups
        self.answers = answers
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    async def __call__(self, service: str, operation: str, params: dict[str, Any], acting: str | None) -> Any:
        self.calls.append((service, operation, params))
        if service == "logs":
            return self.logs(operation, params)
        answer = self.answers.get(operation, {})
        if isinstance(answer, ApiFailure):
            raise answer
        return answer

    def logs(self, operation: str, p: dict[str, Any]) -> dict[str, Any]:
        group = self.groups.get(p["logGroupName"])
        if group is None:
            raise ApiFailure("ResourceNotFoundException", "The specified log group does not exist.", 400)
        if operation == "DescribeLogStreams":
            names = sorted(n for n in group if n.startswith(p.get("logStreamNamePrefix", "")))
            if p.get("orderBy") == "LastEventTime":
                names.sort(key=lambda n: max((t for t, _ in group[n]), default=0), reverse=bool(p.get("descending")))
            start = int(p.get("nextToken") or 0)
            limit = int(p.get("limit", 2))  # small pages: the reader must follow nextToken
            page = names[start : start + limit]
            out: dict[str, Any] = {
                "logStreams": [
                    {"logStreamName": n, **({"lastEventTimestamp": group[n][-1][0]} if group[n] else {})} for n in page
                ]
            }
            if start + limit < len(names):
                out["nextToken"] = str(start + limit)
            return out
        assert operation == "GetLogEvents" and p["startFromHead"] is False
        events = group[p["logStreamName"]][-int(p["limit"]) :]  # the stream's tail, in the stream's order
        return {"events": [{"timestamp": t, "message": m, "ingestionTime": t} for t, m in events]}


def read(api: FakeApi, group: str, prefix: str = "", lines: int = logview.LINES) -> logview.RecentLogs:
    return asyncio.run(logview.recent_logs(api, group, prefix, lines))


def test_the_newest_lines_of_every_stream_merged_by_time_newest_last() -> None:
    t0 = 1_700_000_000_000
    a = [(t0 + 2 * i, f"a{i}") for i in range(150)]
    b = [(t0 + 2 * i + 1, f"b{i}") for i in range(150)]
    api = FakeApi({"/g": {"A/i-1": a, "B/i-2": b, "B/idle": []}}, {})
    got = read(api, "/g")
    assert len(got.events) == 200
    assert [e.timestamp for e in got.events] == sorted(e.timestamp for e in got.events)
    assert got.events[-1] == logview.LogEvent("B/i-2", t0 + 299, "b149")  # the newest at the bottom
    assert got.events[0] == logview.LogEvent("A/i-1", t0 + 100, "a50")
    assert got.streams == ["B/i-2", "A/i-1"] and got.error == ""  # a stream with no event is not read
    gets = [p for _, op, p in api.calls if op == "GetLogEvents"]
    assert {p["limit"] for p in gets} == {200} and len(gets) == 2
    listing = [p for _, op, p in api.calls if op == "DescribeLogStreams"]
    assert listing == [{"logGroupName": "/g", "orderBy": "LastEventTime", "descending": True, "limit": logview.STREAMS}]


def test_a_jobs_lines_come_from_its_own_streams_only_across_pages() -> None:
    group = {
        "scores/i-1": [(10, "one")],
        "scores/i-1/data-log": [(12, "data")],
        "scores/i-2": [(11, "two")],
        "scores-2/i-1": [(13, "another job")],
        "other/i-1": [(14, "other")],
    }
    api = FakeApi({logview.TRANSFORM_GROUP: group}, {})
    got = read(api, logview.TRANSFORM_GROUP, "scores/")
    assert [e.message for e in got.events] == ["one", "two", "data"]
    pages = [p for _, op, p in api.calls if op == "DescribeLogStreams"]
    assert len(pages) == 2 and pages[1]["nextToken"] == "2"  # followed the token; a prefix orders by name
    assert all(p["logStreamNamePrefix"] == "scores/" and "orderBy" not in p for p in pages)


def test_no_group_yet_is_no_logs_and_another_error_is_told_not_raised() -> None:
    missing = read(FakeApi({}, {}), "/aws/sagemaker/Endpoints/ep")
    assert missing.events == [] and missing.error == ""

    async def broken(service: str, operation: str, params: dict[str, Any], acting: str | None) -> dict[str, Any]:
        raise ApiFailure("ThrottlingException", "slow down", 400)

    told = asyncio.run(logview.recent_logs(broken, "/g"))
    assert told.error == "ThrottlingException: slow down"
    section = logview.logs_section(told, "/console/x", "")
    assert 'role="alert"' in section and "slow down" in section and "Refresh logs" in section


def test_a_hostile_line_and_stream_name_are_escaped() -> None:
    logs = logview.RecentLogs("/g", [logview.LogEvent(f"A/{EVIL}", 1_700_000_000_123, EVIL + "\n")], [f"A/{EVIL}"])
    out = logview.logs_section(logs, '/console/endpoints/ep?refresh=1#h-logs"><script>', "")
    assert "<script" not in out
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;</code>" in out  # the trailing newline dropped
    assert "2023-11-14 22:13:20.123" in out and 'datetime="2023-11-14T22:13:20.123Z"' in out
    assert "The newest 1 lines of <code>/g</code>" in out
    assert "(streams with older lines are not shown)" not in out


def test_no_logs_yet_says_where_they_will_appear_with_a_refresh_link() -> None:
    out = logview.logs_section(logview.RecentLogs("/aws/sagemaker/TransformJobs"), "/console/jobs/j?refresh=5", "Soon.")
    assert "No logs yet in <code>/aws/sagemaker/TransformJobs</code>. Soon." in out
    assert '<a href="/console/jobs/j?refresh=5" data-field="refresh-logs">Refresh logs</a>' in out
    assert "<table" not in out


def test_a_timestamp_no_calendar_holds_is_shown_as_its_number() -> None:
    assert logview.log_time(10**20) == str(10**20)
    assert logview.log_time(0) == "1970-01-01 00:00:00.000"


def no_keys(access_key_id: str) -> tuple[str, str] | None:
    return None


ENDPOINT = {
    "EndpointName": "ep",
    "EndpointConfigName": "ep-cfg",
    "EndpointStatus": "InService",
    "ProductionVariants": [{"VariantName": "A", "CurrentWeight": 1.0, "CurrentInstanceCount": 1}],
}


def console(api: FakeApi) -> TestClient:
    return TestClient(create_app(api, no_keys, ConsoleConfig(clock=lambda: NOW)), follow_redirects=False)


def test_the_endpoint_page_shows_its_instances_newest_lines_escaped() -> None:
    group = {"A/i-1": [(1_700_000_000_000, "loading model"), (1_700_000_001_000, EVIL)]}
    api = FakeApi({"/aws/sagemaker/Endpoints/ep": group}, {"DescribeEndpoint": ENDPOINT})
    with console(api) as client:
        r = client.get("/console/endpoints/ep", params={"range": "3600"})
        assert r.status_code == 200
        logs = r.text.split('<h2 id="h-logs">Logs</h2>', 1)[1]
        assert "loading model" in logs and "<code>A/i-1</code>" in logs
        assert logs.index("loading model") < logs.index("&lt;script&gt;alert")  # newest at the bottom
        assert "<script>alert" not in r.text
        assert f'href="/console/endpoints/ep?range=3600&amp;refresh={int(NOW * 1000)}#h-logs"' in logs
        assert "logs" not in client.get("/console/endpoints/ep/data").json()["html"]  # refreshed by its link only
    empty = FakeApi({}, {"DescribeEndpoint": ENDPOINT})
    with console(empty) as client:
        page = client.get("/console/endpoints/ep").text
        assert "No logs yet in <code>/aws/sagemaker/Endpoints/ep</code>" in page


JOB = {
    "TransformJobName": "scores",
    "TransformJobStatus": "InProgress",
    "ModelName": "m1",
    "TransformInput": {"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/in"}}},
    "TransformOutput": {"S3OutputPath": "s3://b/out"},
    "TransformResources": {"InstanceType": "ml.m5.large", "InstanceCount": 1},
    "CreationTime": 0,
    "ServekitProgress": {"ObjectsTotal": 2, "ObjectsDone": 1, "Records": 3, "RecordErrors": 0},
}


def test_the_job_page_shows_the_job_and_its_streams_lines() -> None:
    group = {"scores/i-1": [(1_700_000_000_000, "record 1"), (1_700_000_000_500, EVIL)], "other/i-1": [(5, "no")]}
    api = FakeApi({logview.TRANSFORM_GROUP: group}, {"DescribeTransformJob": JOB})
    with console(api) as client:
        r = client.get("/console/jobs/scores")
        assert r.status_code == 200
        assert "s3://b/in" in r.text and "s3://b/out" in r.text and "1 / 2" in r.text
        assert 'data-src="/console/api/jobs/scores"' in r.text  # the job's facts refresh live
        logs = r.text.split('<h2 id="h-logs">Logs</h2>', 1)[1]
        assert "record 1" in logs and "&lt;script&gt;" in logs and ">no<" not in logs
        assert "<script>alert" not in r.text
        assert f'href="/console/jobs/scores?refresh={int(NOW * 1000)}#h-logs"' in logs
        live = client.get("/console/api/jobs/scores").json()
        assert live["job"]["TransformJobName"] == "scores" and "1 / 2" in live["html"]["job"]
    gone = ApiFailure("ValidationException", "Could not find requested job with name nope", 400)
    with console(FakeApi({}, {"DescribeTransformJob": gone})) as client:
        assert client.get("/console/jobs/nope").status_code == 404
        assert client.get("/console/api/jobs/nope").status_code == 404
    with console(FakeApi({}, {"DescribeTransformJob": JOB})) as client:
        page = client.get("/console/jobs/scores").text
        assert "No logs yet in <code>/aws/sagemaker/TransformJobs</code>" in page and "servekit transform run" in page


def test_the_jobs_list_links_each_job_to_its_page() -> None:
    out = jobs.transform_table([{**JOB, "TransformJobName": "a b"}])
    assert '<a href="/console/jobs/a%20b" data-job="a b">a b</a>' in out


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


def test_the_launch_layers_call_reaches_cloudwatch_logs_of_the_plane(home: Path) -> None:
    plane = build(home, metrics_resolution_s=1)
    call = api_call(plane, Credentials.load(home))
    group = "/aws/sagemaker/Endpoints/ep"

    async def run() -> logview.RecentLogs:
        with pytest.raises(ApiFailure) as missing:
            await call("logs", "DescribeLogStreams", {"logGroupName": group}, None)
        assert missing.value.code == "ResourceNotFoundException" and missing.value.status == 400
        with pytest.raises(ApiFailure, match="does not call s3"):
            await call("s3", "ListBuckets", {}, None)
        await plane.dispatch(Call("logs", "CreateLogGroup", {"logGroupName": group}, None))
        await plane.dispatch(Call("logs", "CreateLogStream", {"logGroupName": group, "logStreamName": "A/i-1"}, None))
        now_ms = int(time.time() * 1000)  # PutLogEvents takes events of the last 14 days only
        events = [{"timestamp": now_ms + i, "message": m} for i, m in enumerate(("up", EVIL))]
        await plane.dispatch(
            Call("logs", "PutLogEvents", {"logGroupName": group, "logStreamName": "A/i-1", "logEvents": events}, None)
        )
        return await logview.recent_logs(call, group)

    got = asyncio.run(run())
    assert [(e.stream, e.message) for e in got.events] == [("A/i-1", "up"), ("A/i-1", EVIL)]
    assert not re.search(r"<script", logview.logs_section(got, "/console/endpoints/ep", ""))
