"""A training job's metrics from its log, as SageMaker finds them: each ``MetricDefinitions`` regex over the lines
the script prints. While the job runs, each match becomes a CloudWatch datapoint under ``/aws/sagemaker/TrainingJobs``
(dimension ``TrainingJobName``: what the SDK's ``TrainingJobAnalytics`` reads), stamped when the line was read."""

from __future__ import annotations

import codecs
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

NAMESPACE = "/aws/sagemaker/TrainingJobs"
POLL_S = 1.0  # how often a running job's log is read for metrics

# (job, metric name, value, time) -> the metrics store
MetricSink = Callable[[str, str, float, float], None]


def metric_values(regex: str | re.Pattern[str], text: str) -> list[float]:
    """Every match of a metric definition's regex in ``text``, in order: its first group (else the whole match) as
    a number; a match that is not a number is skipped."""
    try:
        pattern = re.compile(regex) if isinstance(regex, str) else regex
    except re.error:
        return []
    out = []
    for m in pattern.finditer(text):
        try:
            out.append(float(m.group(1) if m.groups() else m.group(0)))
        except ValueError:
            continue
    return out


def regex_problem(regex: str) -> str | None:
    """Why a MetricDefinitions regex cannot be used (None when it can)."""
    try:
        re.compile(regex)
    except re.error as exc:
        return f"{regex!r} is not a regular expression: {exc}"
    return None


class LogLines:
    """The complete lines a growing log gained since the last read (all of it, the last line too, when ``final``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._partial = ""

    def read(self, final: bool = False) -> str:
        try:
            with self.path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except OSError:
            chunk = b""
        self._offset += len(chunk)
        text = self._partial + self._decoder.decode(chunk, final=final)
        if final:
            self._partial = ""
            return text
        cut = text.rfind("\n") + 1
        self._partial = text[cut:]
        return text[:cut]


class MetricFollower:
    """Reads a job's logs as they grow and sends each metric match to ``sink``."""

    def __init__(
        self, job: str, definitions: Sequence[Mapping[str, str]], logs: Sequence[Path], sink: MetricSink
    ) -> None:
        self.job = job
        self.patterns = [(d["Name"], re.compile(d["Regex"])) for d in definitions if regex_problem(d["Regex"]) is None]
        self.logs = [LogLines(p) for p in logs]
        self.sink = sink

    def read(self, now: float, final: bool = False) -> int:
        """Send what the logs gained; how many datapoints."""
        sent = 0
        for log in self.logs:
            text = log.read(final)
            if not text:
                continue
            for name, pattern in self.patterns:
                for value in metric_values(pattern, text):
                    self.sink(self.job, name, value, now)
                    sent += 1
        return sent


_EVAL_LINE = re.compile(r"^\[\d+\]\t(.*)$", re.MULTILINE)


_EVAL_ITEM = re.compile(r"(\w+)-([\w@.:-]+?):([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")


def evaluation_metrics(text: str, when: float) -> list[dict[str, Any]]:
    """A built-in algorithm's metrics as SageMaker names them (``train:rmse``), from its last evaluation line
    (``[9]\ttrain-rmse:0.12\tvalidation-rmse:0.31``)."""
    lines = _EVAL_LINE.findall(text)
    if not lines:
        return []
    return [
        {"MetricName": f"{channel}:{metric}", "Value": float(value), "Timestamp": when}
        for channel, metric, value in _EVAL_ITEM.findall(lines[-1])
    ]


def evaluation_regex(name: str) -> str:
    """The regex that finds a built-in algorithm's metric ``channel:metric`` in its evaluation lines (what a tuning
    job's early stopping reads when the objective has no MetricDefinition)."""
    channel, _, metric = name.partition(":")
    return rf"(?<![\w-]){re.escape(channel)}-{re.escape(metric)}:([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"


def final_metrics(definitions: list[Mapping[str, str]], text: str, when: float) -> list[dict[str, Any]]:
    """``MetricDefinitions`` over the job's log: each metric's last match (its first group, else the match)."""
    out = []
    for d in definitions:
        values = metric_values(d["Regex"], text)
        if values:
            out.append({"MetricName": d["Name"], "Value": values[-1], "Timestamp": when})
    return out
