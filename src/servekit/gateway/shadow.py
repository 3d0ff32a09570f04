"""Shadow variants' records and their comparison report.

The gateway copies a sampled share of an endpoint's requests to its shadow variant and hands each pair of answers
to :class:`ShadowLog`, which appends one JSON line per pair under
``<dir>/<endpoint>/<shadow variant>/yyyy/mm/dd/hh/<MM>.jsonl`` (the data capture layout, one file a minute): the
request, the production answer and the shadow's, side by side, with their status and latency.

:func:`summarise` reads such records and compares the two models: latency percentiles of each, how often the
shadow failed, and how their outputs differ — for JSON outputs, the share of requests whose non-numeric leaves
(labels, class names) agree, and the largest and mean absolute difference of their numeric leaves (scores,
regressions). Outputs that are not JSON are compared byte for byte. Pure functions over records; the record
writer is the only part that touches the disk.
"""

from __future__ import annotations

import base64
import logging
import math
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from servekit.gateway.service import ShadowResult

log = logging.getLogger(__name__)


def _payload(data: bytes) -> dict[str, str]:
    try:
        return {"data": data.decode("utf-8"), "encoding": "UTF8"}
    except UnicodeDecodeError:
        return {"data": base64.b64encode(data).decode("ascii"), "encoding": "BASE64"}


def _bytes(doc: dict[str, Any]) -> bytes:
    data = str(doc.get("data", ""))
    return base64.b64decode(data) if doc.get("encoding") == "BASE64" else data.encode("utf-8")


def record_of(r: ShadowResult) -> dict[str, Any]:
    """The JSON record of one mirrored request."""
    return {
        "endpoint": r.endpoint,
        "variant": r.variant,
        "shadowVariant": r.shadow_variant,
        "eventMetadata": {
            "inferenceId": r.inference_id,
            "inferenceTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(r.at)),
        },
        "request": {"contentType": r.content_type, **_payload(r.request)},
        "production": {"status": r.production_status, "latencyMs": r.production_s * 1e3, **_payload(r.production_body)},
        "shadow": {"status": r.shadow_status, "latencyMs": r.shadow_s * 1e3, **_payload(r.shadow_body)},
    }


class ShadowLog:
    """The gateway's shadow sink: appends each pair as a JSON line (files are opened per write: a minute's file is
    small, and nothing stays open when an endpoint goes away)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, endpoint: str, shadow_variant: str, at: float) -> Path:
        t = time.gmtime(at)
        return (
            self.directory
            / endpoint
            / shadow_variant
            / time.strftime("%Y/%m/%d/%H", t)
            / f"{time.strftime('%M', t)}.jsonl"
        )

    def __call__(self, result: ShadowResult) -> None:
        path = self.path(result.endpoint, result.shadow_variant, result.at)
        path.parent.mkdir(parents=True, exist_ok=True)
        line = orjson.dumps(record_of(result)) + b"\n"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line)  # one write of a whole line: concurrent appends never interleave mid-record
        finally:
            os.close(fd)


def read_records(directory: Path, endpoint: str, shadow_variant: str | None = None) -> Iterator[dict[str, Any]]:
    """Every record of an endpoint's shadow variant(s), oldest file first; a torn last line is skipped."""
    base = directory / endpoint
    if not base.is_dir():
        return
    for path in sorted(base.glob("*/*/*/*/*/*.jsonl")):
        if shadow_variant is not None and path.relative_to(base).parts[0] != shadow_variant:
            continue
        for line in path.read_bytes().splitlines():
            try:
                yield orjson.loads(line)
            except orjson.JSONDecodeError:
                log.warning("skipping a torn shadow record in %s", path)


# ---- comparison -------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OutputComparison:
    comparable: bool  # both JSON with the same structure (or both not JSON)
    labels_agree: bool | None  # None: no non-numeric leaves to compare
    abs_diffs: tuple[float, ...]  # per numeric leaf, in order


def _leaves(doc: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(doc, dict):
        for k in sorted(doc):
            yield from _leaves(doc[k], f"{path}/{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _leaves(v, f"{path}/{i}")
    else:
        yield path, doc


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def compare_outputs(production: bytes, shadow: bytes) -> OutputComparison:
    """How the shadow's output differs from production's (see the module docstring)."""
    try:
        a, b = orjson.loads(production), orjson.loads(shadow)
    except orjson.JSONDecodeError:
        return OutputComparison(True, production == shadow, ())
    la, lb = list(_leaves(a)), list(_leaves(b))
    if [p for p, _ in la] != [p for p, _ in lb]:
        return OutputComparison(False, False, ())
    diffs: list[float] = []
    labels: list[bool] = []
    for (_, x), (_, y) in zip(la, lb, strict=True):
        if _number(x) and _number(y):
            diffs.append(abs(float(x) - float(y)))
        else:
            labels.append(x == y)
    return OutputComparison(True, all(labels) if labels else None, tuple(diffs))


def _percentile(values: list[float], q: float) -> float | None:
    """Nearest rank (numpy's ``inverted_cdf``): the ceil(q/100 * n)-th smallest."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summarise(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The shadow report: request counts, errors, latency p50/p99 of both models, output agreement and numeric
    differences over the requests both answered."""
    n = shadow_errors = production_errors = compared = mismatched = 0
    agree = labelled = 0
    diffs: list[float] = []
    latency: dict[str, list[float]] = {"production": [], "shadow": []}
    for r in records:
        n += 1
        p, s = r["production"], r["shadow"]
        latency["production"].append(float(p["latencyMs"]))
        latency["shadow"].append(float(s["latencyMs"]))
        if p["status"] != 200:
            production_errors += 1
        if s["status"] != 200:
            shadow_errors += 1
        if p["status"] != 200 or s["status"] != 200:
            continue
        c = compare_outputs(_bytes(p), _bytes(s))
        if not c.comparable:
            mismatched += 1
            continue
        compared += 1
        diffs.extend(c.abs_diffs)
        if c.labels_agree is not None:
            labelled += 1
            agree += c.labels_agree
    return {
        "requests": n,
        "production_errors": production_errors,
        "shadow_errors": shadow_errors,
        "shadow_error_rate": shadow_errors / n if n else None,
        "latency_ms": {
            k: {"p50": _percentile(v, 50), "p99": _percentile(v, 99), "mean": sum(v) / len(v) if v else None}
            for k, v in latency.items()
        },
        "outputs": {
            "compared": compared,
            "different_shape": mismatched,
            "label_agreement": agree / labelled if labelled else None,
            "max_abs_diff": max(diffs) if diffs else None,
            "mean_abs_diff": sum(diffs) / len(diffs) if diffs else None,
        },
    }
