"""Sliding windows over event time, as pure arithmetic on epoch seconds.

Windows end on multiples of ``step`` (counted from the Unix epoch, UTC) and span ``window`` seconds, so the
same data always gives the same windows. Rows are summarised into *panes* of ``gcd(window, step)`` seconds;
a window is the sum of the panes it covers, so overlapping windows never re-read or re-summarise a row.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

# One parser of ISO 8601 times, capture's; the monitor's options and tests name it here.
from servekit.serving.capture.decode import parse_time as parse_time

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}


def parse_duration(text: str) -> int:
    """``90s``, ``15m``, ``6h``, ``1d``, ``2w`` or plain seconds → whole seconds (> 0)."""
    m = _DURATION_RE.match(text)
    if not m:
        raise ValueError(f"bad duration {text!r}: expected a number with s, m, h, d or w (e.g. 6h)")
    seconds = float(m.group(1)) * _UNIT[m.group(2)]
    if seconds < 1 or seconds != int(seconds):
        raise ValueError(f"bad duration {text!r}: must be a whole number of seconds >= 1")
    return int(seconds)


def format_time(seconds: float) -> str:
    dt = datetime.fromtimestamp(seconds, UTC)
    text = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if dt.microsecond:
        text += f".{dt.microsecond // 1000:03d}"
    return text + "Z"


@dataclass(frozen=True, slots=True)
class Window:
    index: int
    start: float
    end: float


def pane_seconds(window: int, step: int) -> int:
    return math.gcd(window, step)


def pane_of(timestamps: npt.NDArray[np.float64], pane: int) -> npt.NDArray[np.int64]:
    """Pane number of each timestamp: ``floor(t / pane)``."""
    return np.floor(timestamps / pane).astype(np.int64)


def default_range(first: float, last: float, step: int) -> tuple[float, float]:
    """``[floor(first, step), floor(last, step) + step)``: every row falls inside."""
    return math.floor(first / step) * step, (math.floor(last / step) + 1) * step


def plan(since: float, until: float, window: int, step: int, first_index: int = 0) -> list[Window]:
    """Every window ``[end - window, end)`` with ``end`` a multiple of ``step``, ``end - window >= since`` and
    ``end <= until``, oldest first, numbered from ``first_index``."""
    if window <= 0 or step <= 0:
        raise ValueError("window and step must be > 0")
    end = math.ceil((since + window) / step) * step
    out: list[Window] = []
    while end <= until:
        out.append(Window(first_index + len(out), float(end - window), float(end)))
        end += step
    return out


def panes_in(w: Window, pane: int) -> range:
    return range(int(w.start // pane), int(w.end // pane))
