"""Output bytes as log events: complete lines, each with its own time.

A line that starts with a date and time (ISO 8601, ``2024-05-01T12:00:00.123Z``; Python logging's
``2024-05-01 12:00:00,123``; either in brackets) is stamped with that time (local time when it names no zone);
any other line with the time it was read. Lines longer than an event may be are cut into several events; empty
lines are dropped (CloudWatch stores no empty event).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

__all__ = ["MAX_EVENT_CHARS", "LineTimes", "split_lines"]

MAX_EVENT_CHARS = 262_144 - 26  # CloudWatch's largest event, less its per-event overhead
PAST_MS = 14 * 86_400_000  # a time further back than PutLogEvents accepts is not the line's own
FUTURE_MS = 2 * 3_600_000

_STAMP = re.compile(
    r"\[?(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(?:[.,](\d{1,9}))?\s?(Z|[+-]\d{2}:?\d{2})?(?=[\s\]|]|$)"
)


class LineTimes:
    """Times of lines, remembering the last second it parsed (a busy writer's lines share it)."""

    def __init__(self) -> None:
        self._last: tuple[str, str, str | None] | None = None
        self._last_ms = 0

    def of(self, line: str, read_ms: int) -> int:
        if not line[:1].isdigit() and not line.startswith("["):
            return read_ms
        m = _STAMP.match(line)
        if m is None:
            return read_ms
        date, clock, fraction, zone = m.groups()
        key = (date, clock, zone)
        if key != self._last:
            try:
                when = datetime.fromisoformat(f"{date}T{clock}{'+00:00' if zone == 'Z' else zone or ''}")
            except ValueError:
                return read_ms
            if when.tzinfo is None:
                when = when.astimezone()  # the machine's local time, as Python's logging writes it
            self._last, self._last_ms = key, int(when.astimezone(UTC).timestamp() * 1000)
        ms = self._last_ms + (int(fraction[:3].ljust(3, "0")) if fraction else 0)
        if ms < read_ms - PAST_MS or ms > read_ms + FUTURE_MS:
            return read_ms
        return ms


def split_lines(data: bytes, times: LineTimes, read_ms: int) -> list[tuple[int, str]]:
    """``data`` (whole lines, the last one perhaps without its newline) as ``(timestamp ms, message)`` events."""
    events: list[tuple[int, str]] = []
    for line in data.decode("utf-8", "replace").split("\n"):
        if line.endswith("\r"):
            line = line[:-1]
        if not line:
            continue
        ts = times.of(line, read_ms)
        if len(line) <= MAX_EVENT_CHARS:
            events.append((ts, line))
        else:
            events += [(ts, line[i : i + MAX_EVENT_CHARS]) for i in range(0, len(line), MAX_EVENT_CHARS)]
    return events
