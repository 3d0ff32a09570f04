"""Timestamps on the wire: JSON protocols send epoch seconds; headers use RFC 822 (HTTP date) by default."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from email.utils import format_datetime, parsedate_to_datetime


class TimestampOutOfRange(ValueError):
    """A number of epoch seconds past the years a timestamp may hold (1 to 9999)."""


def parse_timestamp(value: object) -> datetime:
    """Epoch seconds (number or numeric string), ISO 8601 or an HTTP date → an aware UTC datetime.

    Raises ``ValueError`` for anything else (the caller turns it into the protocol's error).
    """
    if isinstance(value, bool):
        raise ValueError("a boolean is not a timestamp")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise ValueError("not a finite number")
        try:
            return datetime.fromtimestamp(value, UTC)
        except (OverflowError, OSError, ValueError):  # past the years a datetime holds (1 to 9999)
            raise TimestampOutOfRange(f"{value!r} is out of the range of timestamps (years 1 to 9999)") from None
    if isinstance(value, str):
        text = value.strip()
        try:
            return parse_timestamp(float(text))
        except TimestampOutOfRange:
            raise
        except ValueError:
            pass
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            try:
                parsed = parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError) as e:
                raise ValueError(f"{value!r} is not a timestamp") from e
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    raise ValueError(f"{type(value).__name__} is not a timestamp")


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def to_epoch(value: datetime | float) -> float:
    """Epoch seconds as JSON protocols send them (naive datetimes are taken as UTC)."""
    if isinstance(value, datetime):
        return _aware(value).timestamp()
    return float(value)


def optional_epoch(value: datetime | float | None) -> float | None:
    """:func:`to_epoch` of an optional parameter (None stays None): the time filters of List* operations."""
    return None if value is None else to_epoch(value)


def format_timestamp(value: datetime | float, fmt: str) -> str | float:
    """``unixTimestamp`` (a float), ``iso8601`` or ``rfc822`` per a shape's ``timestampFormat``."""
    when = value if isinstance(value, datetime) else datetime.fromtimestamp(float(value), UTC)
    when = _aware(when).astimezone(UTC)
    if fmt == "iso8601":
        return when.isoformat().replace("+00:00", "Z")
    if fmt == "rfc822":
        return format_datetime(when, usegmt=True)
    return when.timestamp()
