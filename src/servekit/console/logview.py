"""An endpoint's or a transform job's logs on its console page: the newest lines of its CloudWatch Logs group, read
through the public API only (the ``logs`` service's DescribeLogStreams and GetLogEvents, as boto3 reads them), and
the section that shows them, newest at the bottom.

Log lines are whatever a model's code printed: untrusted text, escaped like every other value (:func:`esc`)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from servekit.console.client import ApiCall, ApiFailure
from servekit.console.render import esc, table

LINES = 200  # the newest lines a page shows
STREAMS = 10  # of the streams with the latest events (an endpoint's instances, a job's instances)
STREAM_PAGES = 20  # DescribeLogStreams pages (50 streams each) read for a job's streams, by name


def endpoint_group(endpoint: str) -> str:
    return f"/aws/sagemaker/Endpoints/{endpoint}"


TRANSFORM_GROUP = "/aws/sagemaker/TransformJobs"


@dataclass(frozen=True)
class LogEvent:
    stream: str
    timestamp: int  # epoch milliseconds, as CloudWatch Logs answers it
    message: str


@dataclass(frozen=True)
class RecentLogs:
    """The newest events of a group (oldest first) from its ``streams`` (those read), or why none could be read."""

    group: str
    events: list[LogEvent] = field(default_factory=list)
    streams: list[str] = field(default_factory=list)
    more_streams: bool = False  # the group has streams with older events than those read
    error: str = ""


async def recent_logs(api: ApiCall, group: str, prefix: str = "", lines: int = LINES) -> RecentLogs:
    """The newest ``lines`` events of ``group`` (of its streams named ``prefix…``): the ``STREAMS`` streams with the
    latest events, each read from its tail (GetLogEvents without ``startFromHead``), merged by time. A group not
    made yet is no logs; any other API error is told, not raised (the rest of the page still shows)."""
    try:
        streams, more = await _streams(api, group, prefix)
    except ApiFailure as exc:
        if exc.code == "ResourceNotFoundException":
            return RecentLogs(group)
        return RecentLogs(group, error=f"{exc.code}: {exc.message}")
    streams.sort(key=lambda s: int(s.get("lastEventTimestamp") or 0), reverse=True)
    picked = [str(s["logStreamName"]) for s in streams[:STREAMS] if s.get("lastEventTimestamp") is not None]

    async def tail(stream: str) -> list[LogEvent]:
        params = {"logGroupName": group, "logStreamName": stream, "limit": lines, "startFromHead": False}
        try:
            answer = await api("logs", "GetLogEvents", params, None)
        except ApiFailure as exc:
            if exc.code == "ResourceNotFoundException":  # deleted between the listing and the read
                return []
            raise
        return [LogEvent(stream, int(e.get("timestamp") or 0), str(e.get("message", ""))) for e in answer["events"]]

    try:
        read = await asyncio.gather(*(tail(s) for s in picked))
    except ApiFailure as exc:
        return RecentLogs(group, streams=picked, error=f"{exc.code}: {exc.message}")
    merged = sorted((e for events in read for e in events), key=lambda e: e.timestamp)  # stable: a stream's order
    return RecentLogs(group, merged[-lines:], picked, more_streams=more or len(streams) > STREAMS)


async def _streams(api: ApiCall, group: str, prefix: str) -> tuple[list[dict[str, Any]], bool]:
    """The streams to read and whether the group has more. Without a prefix, the ``STREAMS`` with the latest events
    (one page, newest first); with one, every stream of that prefix (by name: CloudWatch Logs orders by
    LastEventTime only without a prefix), at most ``STREAM_PAGES`` pages."""
    if not prefix:
        params = {"logGroupName": group, "orderBy": "LastEventTime", "descending": True, "limit": STREAMS}
        answer = await api("logs", "DescribeLogStreams", params, None)
        return list(answer.get("logStreams", [])), bool(answer.get("nextToken"))
    out: list[dict[str, Any]] = []
    token: str | None = None
    for _ in range(STREAM_PAGES):
        params = {"logGroupName": group, "logStreamNamePrefix": prefix, **({"nextToken": token} if token else {})}
        answer = await api("logs", "DescribeLogStreams", params, None)
        out.extend(answer.get("logStreams", []))
        token = answer.get("nextToken")
        if not token:
            break
    return out, bool(token)


def _utc(ms: int) -> datetime | None:
    try:
        return datetime.fromtimestamp(ms / 1000, UTC)
    except (OverflowError, OSError, ValueError):  # a timestamp no calendar holds: shown as the number
        return None


def log_time(ms: int) -> str:
    """An event's time (epoch milliseconds) as UTC text to the millisecond."""
    at = _utc(ms)
    return at.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}" if at else str(ms)


def logs_section(logs: RecentLogs, refresh_href: str, when_empty: str) -> str:
    """The newest lines as a table (time, stream, line; newest at the bottom) between two plain refresh links, or
    the "no logs yet" state saying where they will appear (``when_empty``: what makes them)."""
    refresh = f'<a href="{esc(refresh_href)}" data-field="refresh-logs">Refresh logs</a>'
    where = f"<code>{esc(logs.group)}</code>"
    if logs.error:
        return f'<p role="alert" class="error">Logs could not be read: {esc(logs.error)}</p><p>{refresh}</p>'
    if not logs.events:
        return f'<p class="empty" data-field="no-logs">No logs yet in {where}. {esc(when_empty)}</p><p>{refresh}</p>'
    streams = ", ".join(f"<code>{esc(s)}</code>" for s in logs.streams)
    others = " (streams with older lines are not shown)" if logs.more_streams else ""
    hint = (
        f'<p class="hint">The newest {len(logs.events)} lines of {where} from {streams}{others}, newest at the '
        f"bottom. Times are UTC. {refresh}</p>"
    )
    rows = _rows(logs.events)
    return f'{hint}<div class="logs">{table("Log lines", ("Time (UTC)", "Stream", "Line"), rows)}</div><p>{refresh}</p>'


def _rows(events: Sequence[LogEvent]) -> list[tuple[str, str, str]]:
    return [
        (
            f'<time datetime="{esc(_iso(e.timestamp))}">{esc(log_time(e.timestamp))}</time>',
            f"<code>{esc(e.stream)}</code>",
            f'<code class="line">{esc(e.message.rstrip(chr(10) + chr(13)))}</code>',
        )
        for e in events
    ]


def _iso(ms: int) -> str:
    at = _utc(ms)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z") if at else ""
