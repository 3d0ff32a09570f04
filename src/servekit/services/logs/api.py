"""CloudWatch Logs' operations on ``servekit up``: log groups and streams, reading (GetLogEvents, FilterLogEvents),
writing (PutLogEvents, for users' own logs), deletion and retention. The instances' and jobs' own output comes in
through the shipper (:mod:`servekit.services.logs.shipper`); both write the ``logs`` aggregate of the state.

What clients rely on, as AWS does it:

- **GetLogEvents** reads a stream in time order (by timestamp, then by arrival), as AWS sorts it. ``nextForwardToken``
  (``f/…``) reads on after the last event answered, ``nextBackwardToken`` (``b/…``) before the first (a token is
  the position: timestamp and event id); a call that finds nothing
  answers the token it was given, so a reader polling ``nextForwardToken`` knows it has caught up when the token
  repeats (the SageMaker SDK's ``logs_for_job`` loop) and still gets what arrives later.
- **DescribeLogStreams** answers ``nextToken`` only when more streams follow (the SDK asks again *without* the token
  while one is present).
- **FilterLogEvents** searches a group's streams by time, with terms, quoted phrases, ``?`` alternatives and ``-``
  exclusions (:mod:`servekit.services.logs.patterns`); it searches at most ``SCAN_BUDGET`` events per call and then
  answers a ``nextToken`` to continue, as AWS does when a search takes long.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import itertools
import re
from typing import Any

import orjson

from servekit.aws.errors import ApiError
from servekit.aws.front import Handler
from servekit.aws.names import Account
from servekit.services.logs.patterns import PatternError, parse
from servekit.services.logs.store import EventRow, GroupRow, InvalidNextToken, Logs, StreamBatch, StreamRow

__all__ = ["MAX_RESPONSE_BYTES", "RETENTION_DAYS", "SCAN_BUDGET", "LogsService"]

RETENTION_DAYS = frozenset(
    {1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}
)
MAX_RESPONSE_BYTES = 1_048_576  # GetLogEvents and FilterLogEvents answer at most 1 MB of events
SCAN_BUDGET = 100_000  # events one FilterLogEvents call looks at before it answers a nextToken
DAY_MS = 86_400_000
TOO_NEW_MS = 2 * 3_600_000  # PutLogEvents rejects events more than 2 hours ahead
# PutLogEvents' size limits (CloudWatch Logs quotas): a batch is the UTF-8 bytes of its messages plus 26 bytes an
# event, at most 1 MiB; one event at most 1 MiB as well
MAX_BATCH_BYTES = 1_048_576
MAX_EVENT_BYTES = 1_048_576
EVENT_OVERHEAD = 26
TOO_OLD_MS = 14 * DAY_MS  # ... and events older than 14 days
_NAME = re.compile(r"[\.\-_/#A-Za-z0-9]{1,512}")
_STREAM_NAME = re.compile(r"[^:*]{1,512}")
_TOKEN = re.compile(r"([fb])/(\d{1,20})(?:/(\d{1,20}))?")  # f/<timestamp>/<id>; f/<id> from before time order


def _error(code: str, message: str) -> ApiError:
    return ApiError(code, message, None)  # modeled: the status comes from the service model


def _invalid(message: str) -> ApiError:
    return _error("InvalidParameterException", message)


def _no_group() -> ApiError:
    return _error("ResourceNotFoundException", "The specified log group does not exist.")


def _no_stream() -> ApiError:
    return _error("ResourceNotFoundException", "The specified log stream does not exist.")


def _group_name(p: dict[str, Any]) -> str:
    """``logGroupName``, or the name in ``logGroupIdentifier`` (a name or an ARN)."""
    name = p.get("logGroupName")
    ident = p.get("logGroupIdentifier")
    if name and ident:
        raise _invalid("LogGroup name and LogGroup ARN are mutually exclusive parameters.")
    if ident:
        if ident.startswith("arn:"):
            name = ident.split(":log-group:", 1)[-1].removesuffix(":*")
        else:
            name = ident
    if not name:
        raise _invalid("Either LogGroup name or LogGroup ARN must be provided.")
    return str(name)


def _limit(p: dict[str, Any], default: int, most: int) -> int:
    value = p.get("limit")
    if value is None:
        return default
    if not 1 <= int(value) <= most:
        raise _invalid(f"limit must be between 1 and {most}.")
    return int(value)


def _token(kind: str, at: tuple[int, int]) -> str:
    return f"{kind}/{at[0]:020d}/{at[1]:020d}"


def _at(event: EventRow) -> tuple[int, int]:
    return event.timestamp, event.id


def _capped(events: list[EventRow], from_head: bool) -> list[EventRow]:
    """``events`` up to ``MAX_RESPONSE_BYTES`` (from the start, or from the end when reading backward)."""
    total = 0
    ordered = events if from_head else events[::-1]
    for n, e in enumerate(ordered):
        total += len(e.message) + 26
        if total > MAX_RESPONSE_BYTES and n:
            kept = ordered[:n]
            return kept if from_head else kept[::-1]
    return events


class LogsService:
    def __init__(self, repo: Logs, account: Account | None = None) -> None:
        self.repo = repo
        self.account = account or Account()

    def handlers(self) -> dict[str, Handler]:
        return {
            "CreateLogGroup": self.create_log_group,
            "DeleteLogGroup": self.delete_log_group,
            "DescribeLogGroups": self.describe_log_groups,
            "PutRetentionPolicy": self.put_retention_policy,
            "DeleteRetentionPolicy": self.delete_retention_policy,
            "CreateLogStream": self.create_log_stream,
            "DeleteLogStream": self.delete_log_stream,
            "DescribeLogStreams": self.describe_log_streams,
            "PutLogEvents": self.put_log_events,
            "GetLogEvents": self.get_log_events,
            "FilterLogEvents": self.filter_log_events,
        }

    def group_arn(self, name: str) -> str:
        a = self.account
        return f"arn:{a.partition}:logs:{a.region}:{a.account_id}:log-group:{name}"

    def _group(self, p: dict[str, Any]) -> GroupRow:
        group = self.repo.group(_group_name(p))
        if group is None:
            raise _no_group()
        return group

    def _stream(self, p: dict[str, Any]) -> StreamRow:
        group = _group_name(p)
        stream = self.repo.stream(group, p["logStreamName"])
        if stream is None:
            raise _no_group() if self.repo.group(group) is None else _no_stream()
        return stream

    # ---- groups ----------------------------------------------------------------------------------------------
    async def create_log_group(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["logGroupName"]
        if _NAME.fullmatch(name) is None:
            raise _invalid(
                f"1 validation error detected: Value '{name}' at 'logGroupName' failed to satisfy constraint: "
                r"Member must satisfy regular expression pattern: [\.\-_/#A-Za-z0-9]+"
            )
        if not self.repo.create_group(name):
            raise _error("ResourceAlreadyExistsException", "The specified log group already exists")
        return {}

    async def delete_log_group(self, p: dict[str, Any]) -> dict[str, Any]:
        if not self.repo.delete_group(p["logGroupName"]):
            raise _no_group()
        return {}

    async def describe_log_groups(self, p: dict[str, Any]) -> dict[str, Any]:
        if p.get("logGroupNamePrefix") and p.get("logGroupNamePattern"):
            raise _invalid("LogGroup name prefix and LogGroup name pattern are mutually exclusive parameters.")
        limit = _limit(p, 50, 50)
        names = p.get("logGroupIdentifiers")
        try:
            if names:  # a handful of names or ARNs: each looked up
                found = [g for n in names if (g := self.repo.group(_group_name({"logGroupIdentifier": n})))]
                groups, token = found[:limit], None
            else:
                page = self.repo.groups(p.get("logGroupNamePrefix"), p.get("logGroupNamePattern"), limit,
                                        p.get("nextToken"))  # fmt: skip
                groups, token = page.items, page.next_token
        except InvalidNextToken as exc:
            raise _invalid(f"The specified nextToken is invalid: {exc}") from None
        out: dict[str, Any] = {"logGroups": [self._describe_group(g) for g in groups]}
        if token:
            out["nextToken"] = token
        return out

    def _describe_group(self, g: GroupRow) -> dict[str, Any]:
        arn = self.group_arn(g.name)
        out: dict[str, Any] = {
            "logGroupName": g.name,
            "creationTime": g.created,
            "metricFilterCount": 0,
            "arn": f"{arn}:*",
            "logGroupArn": arn,
            "storedBytes": g.stored_bytes,
            "logGroupClass": "STANDARD",
        }
        if g.retention_days is not None:
            out["retentionInDays"] = g.retention_days
        return out

    async def put_retention_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        days = int(p["retentionInDays"])
        if days not in RETENTION_DAYS:
            raise _invalid(f"1 validation error detected: Value '{days}' at 'retentionInDays' failed to satisfy "
                           f"constraint: Member must satisfy enum value set: {sorted(RETENTION_DAYS)}")  # fmt: skip
        if not self.repo.set_retention(p["logGroupName"], days):
            raise _no_group()
        return {}

    async def delete_retention_policy(self, p: dict[str, Any]) -> dict[str, Any]:
        if not self.repo.set_retention(p["logGroupName"], None):
            raise _no_group()
        return {}

    # ---- streams ---------------------------------------------------------------------------------------------
    async def create_log_stream(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["logStreamName"]
        if _STREAM_NAME.fullmatch(name) is None:
            raise _invalid("A log stream name cannot contain ':' or '*'.")
        created = self.repo.create_stream(p["logGroupName"], name)
        if created is None:
            raise _no_group()
        if not created:
            raise _error("ResourceAlreadyExistsException", "The specified log stream already exists")
        return {}

    async def delete_log_stream(self, p: dict[str, Any]) -> dict[str, Any]:
        if not self.repo.delete_stream(p["logGroupName"], p["logStreamName"]):
            raise _no_group() if self.repo.group(p["logGroupName"]) is None else _no_stream()
        return {}

    async def describe_log_streams(self, p: dict[str, Any]) -> dict[str, Any]:
        group = self._group(p)
        order_by = p.get("orderBy") or "LogStreamName"
        prefix = p.get("logStreamNamePrefix")
        if prefix and order_by == "LastEventTime":
            raise _invalid("Cannot order by LastEventTime with a logStreamNamePrefix.")
        try:
            page = self.repo.streams(group.seq, prefix, order_by, bool(p.get("descending")), _limit(p, 50, 50),
                                     p.get("nextToken"))  # fmt: skip
        except InvalidNextToken as exc:
            raise _invalid(f"The specified nextToken is invalid: {exc}") from None
        arn = self.group_arn(group.name)
        out: dict[str, Any] = {"logStreams": [self._describe_stream(arn, s) for s in page.items]}
        if page.next_token:
            out["nextToken"] = page.next_token
        return out

    @staticmethod
    def _describe_stream(group_arn: str, s: StreamRow) -> dict[str, Any]:
        out: dict[str, Any] = {
            "logStreamName": s.name,
            "creationTime": s.created,
            "arn": f"{group_arn}:log-stream:{s.name}",
            "storedBytes": s.stored_bytes,
        }
        for key, value in (
            ("firstEventTimestamp", s.first_event),
            ("lastEventTimestamp", s.last_event),
            ("lastIngestionTime", s.last_ingestion),
        ):
            if value is not None:
                out[key] = value
        return out

    # ---- events ----------------------------------------------------------------------------------------------
    async def put_log_events(self, p: dict[str, Any]) -> dict[str, Any]:
        events = list(p["logEvents"])
        sizes = [len(str(e["message"]).encode()) for e in events]
        if sizes and max(sizes) > MAX_EVENT_BYTES:
            i = max(range(len(sizes)), key=sizes.__getitem__)
            raise _invalid(f"Log event {i} too large: {sizes[i]} bytes exceeds limit of {MAX_EVENT_BYTES}")
        if (total := sum(sizes) + EVENT_OVERHEAD * len(events)) > MAX_BATCH_BYTES:
            raise _invalid(f"Upload too large: {total} bytes exceeds limit of {MAX_BATCH_BYTES}")
        times = [int(e["timestamp"]) for e in events]
        if any(a > b for a, b in itertools.pairwise(times)):
            raise _invalid("Log events in a single PutLogEvents request must be in chronological order.")
        if times and times[-1] - times[0] > DAY_MS:
            raise _invalid("The batch of log events in a single PutLogEvents request cannot span more than 24 hours.")
        group = self.repo.group(p["logGroupName"])
        if group is None:
            raise _no_group()
        now = self.repo.now_ms()
        keep_ms = group.retention_days * DAY_MS if group.retention_days is not None else None
        rejected: dict[str, int] = {}
        kept: list[tuple[int, str]] = []
        for i, (ts, e) in enumerate(zip(times, events, strict=True)):
            if ts > now + TOO_NEW_MS:
                rejected.setdefault("tooNewLogEventStartIndex", i)
            elif keep_ms is not None and ts < now - keep_ms:
                rejected["expiredLogEventEndIndex"] = i
            elif ts < now - TOO_OLD_MS:
                rejected["tooOldLogEventEndIndex"] = i
            else:
                kept.append((ts, str(e["message"])))
        try:
            self.repo.put([StreamBatch(group.name, p["logStreamName"], kept)], create=False)
        except LookupError:
            raise _no_stream() from None
        out: dict[str, Any] = {}
        if rejected:
            out["rejectedLogEventsInfo"] = rejected
        return out

    async def get_log_events(self, p: dict[str, Any]) -> dict[str, Any]:
        stream = self._stream(p)
        limit = _limit(p, 10_000, 10_000)
        start, end = p.get("startTime"), p.get("endTime")
        token = p.get("nextToken")
        if token:
            m = _TOKEN.fullmatch(token)
            if m is None:
                raise _invalid("The specified nextToken is invalid.")
            forward = m.group(1) == "f"
            if m.group(3) is None:  # a token of the arrival-ordered reads: the event it named, where it now sorts
                at = self.repo.position(stream.seq, int(m.group(2)))
            else:
                at = (int(m.group(2)), int(m.group(3)))
            events = self.repo.read(stream.seq, after=at if forward else None, before=None if forward else at,
                                    start=start, end=end, limit=limit, from_head=forward)  # fmt: skip
            events = _capped(events, forward)
            if events:
                f_token, b_token = _token("f", _at(events[-1])), _token("b", _at(events[0]))
            elif forward:  # caught up: the same forward token again (readers stop when it repeats)
                f_token, b_token = token, _token("b", (at[0], at[1] + 1))
            else:
                f_token, b_token = _token("f", (at[0], max(at[1] - 1, 0))), token
        else:
            from_head = bool(p.get("startFromHead"))
            events = _capped(self.repo.read(stream.seq, start=start, end=end, limit=limit, from_head=from_head),
                             from_head)  # fmt: skip
            if events:
                f_token, b_token = _token("f", _at(events[-1])), _token("b", _at(events[0]))
            else:
                f_token, b_token = _token("f", (0, 0)), _token("b", (0, 0))
        return {
            "events": [{"timestamp": e.timestamp, "message": e.message, "ingestionTime": e.ingestion} for e in events],
            "nextForwardToken": f_token,
            "nextBackwardToken": b_token,
        }

    async def filter_log_events(self, p: dict[str, Any]) -> dict[str, Any]:
        group = self._group(p)
        names, prefix = p.get("logStreamNames"), p.get("logStreamNamePrefix")
        if names and prefix:
            raise _invalid("logStreamNames and logStreamNamePrefix are mutually exclusive parameters.")
        try:
            pattern = parse(p.get("filterPattern"))
        except PatternError as exc:
            raise _invalid(str(exc)) from None
        limit = _limit(p, 10_000, 10_000)
        stream_seqs: list[int] | None = None
        if names or prefix:
            streams = self.repo.streams(group.seq, prefix, limit=1_000_000, names=names).items
            stream_seqs = [s.seq for s in streams]
        query = [group.name, names, prefix, p.get("startTime"), p.get("endTime"), p.get("filterPattern")]
        fingerprint = hashlib.sha256(orjson.dumps(query)).hexdigest()[:16]
        after = _decode_filter_token(p["nextToken"], fingerprint) if p.get("nextToken") else None
        found: list[EventRow] = []
        scanned, size, more = 0, 0, False
        start, end = p.get("startTime"), p.get("endTime")
        while True:
            want = min(1000, SCAN_BUDGET - scanned)
            chunk = self.repo.scan(group.seq, stream_seqs, after=after, start=start, end=end, limit=want)
            full = False
            for e in chunk:
                after = (e.timestamp, e.id)
                scanned += 1
                if pattern.matches(e.message):
                    found.append(e)
                    size += len(e.message) + 26
                    if len(found) >= limit or size >= MAX_RESPONSE_BYTES:
                        full = True
                        break
            if full or scanned >= SCAN_BUDGET:  # answer now; a token when anything follows
                more = bool(self.repo.scan(group.seq, stream_seqs, after=after, start=start, end=end, limit=1))
                break
            if len(chunk) < want:
                break
        names_by_seq = self.repo.stream_names(e.stream_seq for e in found)
        out: dict[str, Any] = {
            "events": [
                {
                    "logStreamName": names_by_seq.get(e.stream_seq, ""),
                    "timestamp": e.timestamp,
                    "message": e.message,
                    "ingestionTime": e.ingestion,
                    "eventId": str(e.id),
                }
                for e in found
            ],
            "searchedLogStreams": [],
        }
        if more and after is not None:
            out["nextToken"] = _encode_filter_token(after, fingerprint)
        return out


def _encode_filter_token(after: tuple[int, int], fingerprint: str) -> str:
    doc = orjson.dumps({"t": after[0], "i": after[1], "q": fingerprint})
    return base64.urlsafe_b64encode(doc).decode().rstrip("=")


def _decode_filter_token(token: str, fingerprint: str) -> tuple[int, int]:
    try:
        doc = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        after, issued_for = (int(doc["t"]), int(doc["i"])), doc["q"]
    except (binascii.Error, ValueError, TypeError, KeyError):
        raise _invalid("The specified nextToken is invalid.") from None
    if issued_for != fingerprint:
        raise _invalid("The specified nextToken belongs to a search with other parameters.")
    return after
