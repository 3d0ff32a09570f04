"""Baselines on disk: versioned folders, atomic writes, and the fall-back to the previous version.

A baseline folder holds ``v0001/``, ``v0002/``, … (never deleted) and ``CURRENT`` naming the one in use. Each
version holds SageMaker's ``statistics.json`` and ``constraints.json`` plus servekit's ``baseline.json``
(binned summaries) and ``thresholds.json`` (learned thresholds, editable ``fixed`` values). A version is
written under a temporary name and renamed when whole; ``CURRENT`` is replaced atomically after it.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from servekit.services.monitoring.baseline import from_sagemaker, statistics_constraints
from servekit.services.monitoring.baseline.sagemaker_files import SageMakerFileError
from servekit.services.monitoring.drift.profiles import Baseline, CategoricalProfile, NumericProfile, Profile
from servekit.services.monitoring.drift.schema import Feature, InferredType
from servekit.services.monitoring.drift.sketch import Binning, CategoricalSummary, NumericSummary
from servekit.services.monitoring.drift.thresholds import Threshold
from servekit.storage import Storage

log = logging.getLogger(__name__)

FORMAT = "servekit-monitor-baseline"
# 2: numerical features also keep their sorted values in ``values/<n>.npy`` (exact statistics). Version 1
# files (binned summaries only) still load; their statistics are computed from bins and marked approximate.
FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
VALUES_DIR = "values"
FILES = ("statistics.json", "constraints.json", "baseline.json", "thresholds.json")
_VERSION_RE = re.compile(r"^v(\d+)$")
_VALUES_RE = re.compile(r"^values/\d+\.npy$")


class BaselineError(RuntimeError):
    """No usable baseline: the message says which versions were tried and why each failed."""


@dataclass(frozen=True, slots=True)
class Loaded:
    baseline: Baseline
    path: Path
    fallback_reason: str | None = None  # why the current version was not used


def dump(data: Any) -> bytes:
    return orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY) + b"\n"


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` as the whole of ``path``: written under a hidden temporary name, renamed when whole."""
    Storage().put(str(path), data)


def save(baseline: Baseline, root: Path) -> Path:
    """Write ``baseline`` as the next version under ``root`` and make it current; returns its folder."""
    root.mkdir(parents=True, exist_ok=True)
    numbers = [int(m.group(1)) for p in root.iterdir() if (m := _VERSION_RE.match(p.name))]
    name = f"v{max(numbers, default=0) + 1:04d}"
    tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}."))
    write_files(baseline, tmp)
    final = root / name
    os.replace(tmp, final)
    write_atomic(root / "CURRENT", f"{name}\n".encode())
    return final


def write_files(baseline: Baseline, folder: Path, constraints: dict[str, Any] | None = None) -> None:
    """A version's files in ``folder`` (which exists): what :func:`load` reads as a version folder given as is.
    ``constraints``: the ``constraints.json`` to write, when not the one made from ``baseline``."""
    contents = {
        "statistics.json": statistics_constraints.statistics(baseline),
        "constraints.json": constraints if constraints is not None else statistics_constraints.constraints(baseline),
        "baseline.json": profiles_json(baseline),
        "thresholds.json": thresholds_json(baseline),
    }
    for file, data in contents.items():
        (folder / file).write_bytes(dump(data))
    (folder / VALUES_DIR).mkdir(exist_ok=True)
    for feature, file in _values_files(baseline).items():
        profile = baseline.profiles[feature]
        assert isinstance(profile, NumericProfile) and profile.values is not None
        np.save(folder / file, profile.values, allow_pickle=False)


def versions(root: Path) -> list[str]:
    found = [(int(m.group(1)), p.name) for p in root.iterdir() if p.is_dir() and (m := _VERSION_RE.match(p.name))]
    return [name for _, name in sorted(found)]


def load(path: Path) -> Loaded:
    """A version folder as given, or the current version of a baseline root with a fall-back to the previous; or a
    folder of SageMaker's own ``statistics.json``/``constraints.json`` (converted as it is read: see
    :mod:`~servekit.services.monitoring.baseline.from_sagemaker`)."""
    if from_sagemaker.is_sagemaker_folder(path):
        try:
            return Loaded(from_sagemaker.load_folder(path), path)
        except SageMakerFileError as exc:
            raise BaselineError(str(exc)) from None
    if (path / "baseline.json").exists() and not (path / "CURRENT").exists():
        return Loaded(load_version(path), path)
    if not path.is_dir():
        raise BaselineError(f"no baseline at {path}")
    names = versions(path)
    current_file = path / "CURRENT"
    current = current_file.read_text().strip() if current_file.exists() else (names[-1] if names else "")
    if not current:
        raise BaselineError(f"no baseline versions under {path}")
    older = [n for n in names if _number(n) < _number(current)]
    tried = []
    for name in [current, *older[-1:]]:
        try:
            baseline = load_version(path / name)
        except (OSError, ValueError, KeyError, TypeError, BaselineError) as exc:
            reason = f"{name}: {type(exc).__name__}: {exc}"
            log.warning("baseline %s is unusable (%s)", path / name, reason)
            tried.append(reason)
            continue
        return Loaded(baseline, path / name, "; ".join(tried) or None)
    raise BaselineError(f"no usable baseline under {path}: " + "; ".join(tried))


def _number(name: str) -> int:
    m = _VERSION_RE.match(name)
    return int(m.group(1)) if m else -1


def load_version(folder: Path) -> Baseline:
    data = orjson.loads((folder / "baseline.json").read_bytes())
    if data.get("format") != FORMAT or data.get("format_version") not in READABLE_VERSIONS:
        raise BaselineError(f"{folder / 'baseline.json'} is not a {FORMAT} file of version 1 or 2")
    thresholds = orjson.loads((folder / "thresholds.json").read_bytes())
    constraints = orjson.loads((folder / "constraints.json").read_bytes())
    statistics = orjson.loads((folder / "statistics.json").read_bytes())
    profiles = {name: _profile(name, f, folder) for name, f in data["features"].items()}
    limits = {
        name: {metric: Threshold.from_json(metric, t) for metric, t in per.items()}
        for name, per in thresholds["features"].items()
    }
    return Baseline(
        tuple(data["columns"]), int(data["rows"]), profiles, limits, constraints, statistics, version=folder.name
    )


def _values_files(baseline: Baseline) -> dict[str, str]:
    """Feature name → its values file, numbered by position (feature names need not be valid file names)."""
    return {
        name: f"{VALUES_DIR}/{i}.npy"
        for i, (name, p) in enumerate(baseline.profiles.items())
        if isinstance(p, NumericProfile) and p.values is not None
    }


def profiles_json(baseline: Baseline) -> dict[str, Any]:
    features: dict[str, Any] = {}
    files = _values_files(baseline)
    for name, p in baseline.profiles.items():
        if isinstance(p, NumericProfile):
            s = p.summary
            features[name] = {
                "inferred_type": p.feature.inferred_type.value,
                "edges": p.binning.edges.tolist(),
                "counts": s.counts.tolist(),
                "sums": s.sums.tolist(),
                "missing": s.missing,
                "mismatched": s.mismatched,
                "unbinned": s.unbinned,
                "negative": s.negative,
                "shift": s.shift,
                "shifted_sum": s.shifted_sum,
                "shifted_sumsq": s.shifted_sumsq,
                "psi_groups": p.psi_groups.tolist(),
                "min": p.minimum,
                "max": p.maximum,
                "buckets": [list(b) for b in p.buckets],
                "values_file": files.get(name),
                "values_exact": p.values_exact,
            }
        else:
            features[name] = {
                "inferred_type": p.feature.inferred_type.value,
                "domain": list(p.domain),
                "complete": p.complete,
                "counts": p.summary.counts.tolist(),
                "missing": p.summary.missing,
                "distinct": p.distinct,
            }
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "rows": baseline.rows,
        "columns": list(baseline.columns),
        "features": features,
    }


def thresholds_json(baseline: Baseline) -> dict[str, Any]:
    return {
        "features": {
            name: {metric: t.to_json() for metric, t in per.items()} for name, per in baseline.thresholds.items()
        }
    }


def _profile(name: str, f: dict[str, Any], folder: Path) -> Profile:
    feature = Feature(name, InferredType(f["inferred_type"]))
    if "edges" in f:
        summary = NumericSummary(
            np.asarray(f["counts"], dtype=np.int64),
            np.asarray(f["sums"], dtype=np.float64),
            int(f["missing"]),
            int(f["mismatched"]),
            int(f["unbinned"]),
            int(f["negative"]),
            float(f["shifted_sum"]),
            float(f["shifted_sumsq"]),
            float(f["shift"]),
        )
        edges = np.asarray(f["edges"], dtype=np.float64)
        if len(summary.counts) != len(edges) + 1 or len(f["psi_groups"]) != len(summary.counts):
            raise BaselineError(f"feature {name!r}: counts do not match its edges")
        buckets = tuple((float(lo), float(hi), int(n)) for lo, hi, n in f["buckets"])
        values = None
        if f.get("values_file"):
            if not _VALUES_RE.match(str(f["values_file"])):  # an edited file must not point outside the version
                raise BaselineError(f"feature {name!r}: bad values_file {f['values_file']!r}")
            values = np.load(folder / f["values_file"], allow_pickle=False).astype(np.float64, copy=False)
            if len(values) > summary.present or (f.get("values_exact") and len(values) != summary.present):
                raise BaselineError(f"feature {name!r}: its values file does not match its counts")
        return NumericProfile(
            feature,
            Binning(edges),
            summary,
            np.asarray(f["psi_groups"], dtype=np.int64),
            float(f["min"]),
            float(f["max"]),
            buckets,
            values,
        )
    counts = np.asarray(f["counts"], dtype=np.int64)
    if len(counts) != len(f["domain"]) + 1:
        raise BaselineError(f"feature {name!r}: counts do not match its domain")
    return CategoricalProfile(
        feature,
        tuple(f["domain"]),
        bool(f["complete"]),
        CategoricalSummary(counts, int(f["missing"])),
        int(f["distinct"]),
    )
