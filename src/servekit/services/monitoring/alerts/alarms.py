"""The consecutive-windows rule, as a pure function over one window's judgements at a time.

A (feature, metric) pair alarms when its metric has exceeded its threshold in ``consecutive`` judged windows
in a row, once per run of exceedances: it alarms again only after a window below the threshold. A window that
was not judged (too few rows, a missing column, a metric that could not be computed, a failed feature)
neither extends nor breaks a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

Key = tuple[str, str]  # (feature, metric)


@dataclass(frozen=True, slots=True)
class Judgement:
    value: float
    threshold: float
    flag: bool | None = None  # the verdict, when it is not simply value > threshold (a p-value, a combined rule)

    @property
    def exceeded(self) -> bool:
        return self.value > self.threshold if self.flag is None else self.flag


@dataclass(frozen=True, slots=True)
class Alarm:
    feature: str
    window_index: int
    metric: str
    value: float
    threshold: float

    def describe(self) -> str:
        """``metric value > threshold``; a test's Holm-adjusted p-value alarms by falling to its level."""
        if self.metric.endswith("pvalue"):
            return f"{self.metric} (Holm) {self.value:.4g} <= {self.threshold:.4g}"
        return f"{self.metric} {self.value:.4g} > {self.threshold:.4g}"

    def to_json(self) -> dict[str, object]:
        return {
            "feature": self.feature,
            "window_index": self.window_index,
            "metric": self.metric,
            "value": self.value,
            "threshold": self.threshold,
        }


def step(
    streaks: Mapping[Key, int], window_index: int, judged: Mapping[Key, Judgement], consecutive: int
) -> tuple[dict[Key, int], list[Alarm]]:
    """Advance the run lengths by one window; return the new run lengths and the alarms this window raises."""
    if consecutive < 1:
        raise ValueError("consecutive must be >= 1")
    out = dict(streaks)
    alarms = []
    for key, j in sorted(judged.items()):
        if not j.exceeded:
            out.pop(key, None)
            continue
        out[key] = out.get(key, 0) + 1
        if out[key] == consecutive:
            alarms.append(Alarm(key[0], window_index, key[1], j.value, j.threshold))
    return out, alarms
