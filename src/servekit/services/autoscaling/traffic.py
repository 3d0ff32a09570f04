"""Traffic curves for the autoscaling what-if (:mod:`servekit.services.autoscaling.simulate`): requests per second over
time, read from a CSV or JSON file, made from a synthetic shape, or rebuilt from an endpoint's CloudWatch
``Invocations`` datapoints. Pure: nothing here reads a clock or the network (the CLI fetches the datapoints).

A curve is a list of ``(time_s, rps)`` points, ``time_s`` from the curve's start, strictly increasing; between two
points the rate holds at the earlier point's value (a step function), so a curve sampled once a minute replays
exactly the minute rates it lists. :meth:`Curve.at` is that rate at any time, :meth:`Curve.steps` the rate at each
step of a simulation. Bad input raises :class:`TrafficError` with a one-line message naming what is wrong.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

SHAPES = ("steps", "ramp", "diurnal", "spike")


class TrafficError(ValueError):
    """A traffic curve that cannot be replayed (empty, a negative or non-numeric rate, times out of order)."""


@dataclass(frozen=True, slots=True)
class Curve:
    points: tuple[tuple[float, float], ...]  # (time_s, rps), time_s strictly increasing from the first point
    source: str = "given"  # where the curve came from, for the report
    epoch: float | None = None  # the wall-clock time of time_s 0, when the curve was recorded (CloudWatch)

    def __post_init__(self) -> None:
        if not self.points:
            raise TrafficError(f"the traffic curve ({self.source}) is empty: it needs at least one time_s,rps row")
        last = -math.inf
        for t, rps in self.points:
            if not (math.isfinite(t) and math.isfinite(rps)):
                raise TrafficError(f"the traffic curve has a non-finite value at time_s={t}: {rps}")
            if rps < 0:
                raise TrafficError(f"the traffic curve has a negative rate at time_s={t:g}: {rps:g} rps")
            if t <= last:
                raise TrafficError(f"the traffic curve's times must increase: time_s={t:g} comes after {last:g}")
            last = t

    @property
    def start(self) -> float:
        return self.points[0][0]

    @property
    def end(self) -> float:
        return self.points[-1][0]

    def at(self, time_s: float) -> float:
        """The rate at ``time_s``: the value of the last point at or before it (the first point's before it)."""
        value = self.points[0][1]
        for t, rps in self.points:
            if t > time_s:
                break
            value = rps
        return value

    def steps(self, step_s: float) -> list[tuple[float, float]]:
        """``(time_s, rps)`` at each step from the first point to the last one (inclusive)."""
        if not step_s > 0:
            raise TrafficError(f"the step must be a positive number of seconds, not {step_s:g}")
        count = math.floor((self.end - self.start) / step_s + 1e-9) + 1
        return [(self.start + k * step_s, self.at(self.start + k * step_s)) for k in range(count)]


def _number(text: str, what: str, row: int) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise TrafficError(f"row {row}: {what} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise TrafficError(f"row {row}: {what} {text!r} is not a finite number")
    return value


def parse_csv(text: str, source: str = "CSV") -> Curve:
    """A CSV with a header naming ``time_s`` and ``rps`` (other columns ignored)."""
    reader = csv.reader(io.StringIO(text))
    rows = [r for r in reader if any(cell.strip() for cell in r)]
    if not rows:
        raise TrafficError(f"the traffic curve ({source}) is empty: it needs a header time_s,rps and rows")
    header = [h.strip().lower() for h in rows[0]]
    if "time_s" not in header or "rps" not in header:
        raise TrafficError(f"{source}: the header must name the columns time_s and rps, not {','.join(rows[0])!r}")
    ti, ri = header.index("time_s"), header.index("rps")
    points = []
    for n, r in enumerate(rows[1:], start=2):
        if len(r) <= max(ti, ri):
            raise TrafficError(f"{source}: row {n} has {len(r)} column(s), the header {len(header)}")
        points.append((_number(r[ti].strip(), "time_s", n), _number(r[ri].strip(), "rps", n)))
    return Curve(tuple(points), source)


def parse_json(text: str, source: str = "JSON") -> Curve:
    """``[{"time_s": 0, "rps": 50}, ...]``, ``[[0, 50], ...]`` or ``{"points": <either>}``."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TrafficError(f"{source} is not valid JSON: {exc.msg} (line {exc.lineno})") from None
    if isinstance(doc, dict):
        doc = doc.get("points", doc.get("steps"))
    if not isinstance(doc, list):
        raise TrafficError(f"{source}: expected a list of {{time_s, rps}} objects or [time_s, rps] pairs")
    points = []
    for n, item in enumerate(doc, start=1):
        if isinstance(item, dict) and "time_s" in item and "rps" in item:
            t, r = item["time_s"], item["rps"]
        elif isinstance(item, list | tuple) and len(item) == 2:
            t, r = item
        else:
            raise TrafficError(f"{source}: item {n} is neither {{time_s, rps}} nor [time_s, rps]")
        points.append((_number(t, "time_s", n), _number(r, "rps", n)))
    return Curve(tuple(points), source)


def parse_file(text: str, name: str) -> Curve:
    """A curve file by its content: JSON when it starts with ``[`` or ``{``, CSV otherwise."""
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        return parse_json(text, name)
    return parse_csv(text, name)


def shape(
    kind: str,
    duration_s: float,
    step_s: float,
    low: float,
    high: float,
    *,
    period_s: float = 86400.0,
    at_s: float | None = None,
    width_s: float | None = None,
    levels: Sequence[float] = (),
) -> Curve:
    """A synthetic curve, one point per step over ``duration_s``:

    - ``steps``: ``levels`` (default low, high, low) each held for an equal share of the duration;
    - ``ramp``: from ``low`` to ``high`` linearly;
    - ``diurnal``: a sine between ``low`` (at t=0) and ``high`` (half a ``period_s`` later);
    - ``spike``: ``low`` with ``high`` for ``width_s`` (default 5 steps) from ``at_s`` (default a third in).
    """
    if kind not in SHAPES:
        raise TrafficError(f"unknown traffic shape {kind!r}: use one of {', '.join(SHAPES)}")
    if not (duration_s > 0 and step_s > 0):
        raise TrafficError("a synthetic curve needs a positive duration and step")
    if low < 0 or high < 0 or any(v < 0 for v in levels):
        raise TrafficError(f"a synthetic curve's rates must not be negative (low {low:g}, high {high:g})")
    n = max(1, math.floor(duration_s / step_s + 1e-9))
    times = [k * step_s for k in range(n)]
    if kind == "steps":
        lv = list(levels) or [low, high, low]
        values = [lv[min(len(lv) - 1, int(k * len(lv) / n))] for k in range(n)]
    elif kind == "ramp":
        values = [low + (high - low) * (k / max(1, n - 1)) for k in range(n)]
    elif kind == "diurnal":
        values = [low + (high - low) * (1 - math.cos(2 * math.pi * t / period_s)) / 2 for t in times]
    else:
        start = duration_s / 3 if at_s is None else at_s
        width = 5 * step_s if width_s is None else width_s
        values = [high if start <= t < start + width else low for t in times]
    return Curve(tuple(zip(times, values, strict=True)), f"synthetic {kind}")


def from_invocations(datapoints: Iterable[tuple[float, float]], period_s: float, source: str) -> Curve:
    """A curve from CloudWatch ``Invocations`` datapoints (``(epoch, Sum over the period)``): the rate of each
    period, time from the first one. Missing periods in between are idle (0 rps), as an idle endpoint publishes."""
    points = sorted(datapoints)
    if not points:
        raise TrafficError(f"{source} has no Invocations datapoints in that time range")
    t0 = points[0][0]
    by_period = {round((t - t0) / period_s): v for t, v in points}
    last = max(by_period)
    rates = tuple((k * period_s, by_period.get(k, 0.0) / period_s) for k in range(last + 1))
    return Curve(rates, source, epoch=t0)
