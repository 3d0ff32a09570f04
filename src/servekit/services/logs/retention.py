"""How much log data ``servekit up`` keeps: a total size and an age, so logs never fill the disk.

- **Age**: events older than their group's retention (PutRetentionPolicy's ``retentionInDays``) are dropped; a
  group without a policy keeps events for ``max_age_days`` (AWS keeps them forever: servekit bounds them).
- **Size**: while the events of all groups together pass ``max_bytes`` (counted as CloudWatch counts
  ``storedBytes``: message length plus 26 per event), the oldest ingested are dropped.
- Both are enforced every ``interval_s`` by the shipper's loop (:class:`~servekit.services.logs.shipper.LogShipper`).

Set them for ``servekit up`` with ``SERVEKIT_LOGS_MAX_BYTES`` (bytes; suffixes K, M, G, T accepted),
``SERVEKIT_LOGS_MAX_AGE_DAYS`` and ``SERVEKIT_LOGS_RETENTION_INTERVAL_S``; ``0`` turns a bound off.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["AGE_ENV", "BYTES_ENV", "INTERVAL_ENV", "RetentionLimits", "parse_bytes"]

BYTES_ENV = "SERVEKIT_LOGS_MAX_BYTES"
AGE_ENV = "SERVEKIT_LOGS_MAX_AGE_DAYS"
INTERVAL_ENV = "SERVEKIT_LOGS_RETENTION_INTERVAL_S"
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True, slots=True)
class RetentionLimits:
    max_bytes: int | None = 2 * 2**30  # 2 GiB of events in all
    max_age_days: float | None = 30.0  # for groups without a retention policy
    interval_s: float = 60.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> RetentionLimits:
        """The limits the environment sets (the defaults for what it leaves out); ``ValueError`` for a value that
        is not a size or a number."""
        default = cls()
        max_bytes = default.max_bytes
        max_age = default.max_age_days
        interval = default.interval_s
        if env.get(BYTES_ENV):
            max_bytes = parse_bytes(env[BYTES_ENV]) or None
        if env.get(AGE_ENV):
            max_age = _number(AGE_ENV, env[AGE_ENV]) or None
        if env.get(INTERVAL_ENV):
            interval = _number(INTERVAL_ENV, env[INTERVAL_ENV]) or default.interval_s
        return cls(max_bytes, max_age, interval)


def parse_bytes(text: str) -> int:
    """``"512M"`` → 536870912; plain digits are bytes."""
    value = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = value[-1:] if value[-1:] in _UNITS and value[-1:] else ""
    try:
        number = float(value[: len(value) - len(unit)])
    except ValueError:
        raise ValueError(f"{BYTES_ENV} must be a size like 2G or 500M, not {text!r}") from None
    if number < 0:
        raise ValueError(f"{BYTES_ENV} must not be negative, not {text!r}")
    return int(number * _UNITS[unit])


def _number(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number, not {text!r}") from None
    if value < 0:
        raise ValueError(f"{name} must not be negative, not {text!r}")
    return value
