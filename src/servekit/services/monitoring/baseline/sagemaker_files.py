"""SageMaker Model Monitor's own baseline files, ``statistics.json`` and ``constraints.json``, read and checked.

What the SageMaker SDK's ``Statistics.from_file_path`` / ``Constraints.from_file_path`` upload and a data-quality
job definition's ``StatisticsResource`` / ``ConstraintsResource`` name (the shapes Model Monitor documents under
"Schema for Statistics" and "Schema for Constraints"). This module is plain Python (no numpy): the control plane
reads a file with it when a job definition or schedule is made (it must be a JSON object), and the monitor checks the
shapes when an execution starts, as SageMaker does; :mod:`~servekit.services.monitoring.baseline.from_sagemaker`
turns the checked files into the baseline the monitor judges against.

Files are untrusted (anyone with S3 access wrote them): size, feature, bucket and sketch counts are capped, every
field that is used is type-checked, and each error names the file and the field and says what was expected.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STATISTICS = "statistics.json"
CONSTRAINTS = "constraints.json"
# Caps against hostile files: far above what the analyzer writes (a few KB per feature; a KLL sketch of k=2048 holds
# tens of thousands of items) yet small enough to parse in the control plane without a second thought.
MAX_FILE_BYTES = 64 * 1024 * 1024
MAX_FEATURES = 10_000
MAX_BUCKETS = 100_000  # per feature: categorical buckets, KLL buckets, domain values
MAX_SKETCH_ITEMS = 1_000_000  # per feature, over all KLL levels
MAX_SKETCH_LEVELS = 64  # level h weighs 2**h: more levels than that cannot come from any real count
TYPES = ("Integral", "Fractional", "String", "Unknown")


class SageMakerFileError(ValueError):
    """A statistics.json or constraints.json servekit cannot use; the message names the file and what was expected."""


@dataclass(frozen=True, slots=True)
class NumericStats:
    name: str
    inferred_type: str
    present: int
    missing: int
    mean: float | None
    total: float | None
    std_dev: float | None
    minimum: float | None
    maximum: float | None
    buckets: tuple[tuple[float, float, float], ...]  # kll.buckets: (lower_bound, upper_bound, count)
    sketch: tuple[tuple[float, float], ...]  # kll.sketch items as (value, weight = 2**level); () without a sketch


@dataclass(frozen=True, slots=True)
class StringStats:
    name: str
    inferred_type: str
    present: int
    missing: int
    distinct: int | None
    buckets: tuple[tuple[str, float], ...]  # categorical.buckets: (value, count)


FeatureStats = NumericStats | StringStats


@dataclass(frozen=True, slots=True)
class SageMakerBaseline:
    """The files as read: either may be absent (not both)."""

    item_count: int | None
    statistics: dict[str, FeatureStats] = field(default_factory=dict)  # in the file's order
    constraints: dict[str, Any] | None = None  # constraints.json as given (the violation checks read it as it is)
    constraint_types: dict[str, str] = field(default_factory=dict)  # feature -> inferred_type, in the file's order
    domains: dict[str, tuple[str, ...]] = field(default_factory=dict)


def read_json(path: Path, what: str) -> dict[str, Any]:
    """A JSON object from ``path`` (at most :data:`MAX_FILE_BYTES`); ``what`` names it in errors."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise SageMakerFileError(f"{what}: cannot be read ({exc.strerror or exc}).") from None
    if size > MAX_FILE_BYTES:
        raise SageMakerFileError(f"{what}: {size} bytes, more than the {MAX_FILE_BYTES} servekit reads.")
    try:
        doc = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:
        raise SageMakerFileError(f"{what}: not a JSON document ({exc}).") from None
    if not isinstance(doc, dict):
        raise SageMakerFileError(f"{what}: expected a JSON object, not {type(doc).__name__}.")
    return doc


def load(statistics: Path | None, constraints: Path | None) -> SageMakerBaseline:
    """The two files checked (either may be None, not both)."""
    if statistics is None and constraints is None:
        raise SageMakerFileError("no statistics.json or constraints.json given.")
    item_count: int | None = None
    stats: dict[str, FeatureStats] = {}
    if statistics is not None:
        item_count, stats = parse_statistics(read_json(statistics, str(statistics)), str(statistics))
    doc = types = domains = None
    if constraints is not None:
        doc = read_json(constraints, str(constraints))
        types, domains = parse_constraints(doc, str(constraints))
    return SageMakerBaseline(item_count, stats, doc, types or {}, domains or {})


# ---------------------------------------------------------------------------------------------- statistics.json
def parse_statistics(doc: Mapping[str, Any], what: str) -> tuple[int | None, dict[str, FeatureStats]]:
    dataset = doc.get("dataset")
    item_count = None
    if dataset is not None:
        _expect(isinstance(dataset, dict), what, "dataset", "an object")
        item_count = _count(dataset.get("item_count"), what, "dataset.item_count", optional=True)
    features = _features(doc, what, "statistics")
    out: dict[str, FeatureStats] = {}
    for i, f in enumerate(features):
        where = f"features[{i}]"
        name, type_ = _name_and_type(f, what, where, out)
        numeric, string = f.get("numerical_statistics"), f.get("string_statistics")
        if numeric is not None and type_ in ("Integral", "Fractional"):
            out[name] = _numeric(name, type_, numeric, what, f"{where}.numerical_statistics")
        elif string is not None and type_ in ("String", "Unknown"):
            out[name] = _string(name, type_, string, what, f"{where}.string_statistics")
        elif numeric is None and string is None and type_ == "Unknown":
            out[name] = StringStats(name, type_, 0, 0, 0, ())  # a column with no values at all
        else:
            expected = "numerical_statistics" if type_ in ("Integral", "Fractional") else "string_statistics"
            raise SageMakerFileError(f"{what}: {where} ({name!r}, {type_}) needs {expected}.")
    return item_count, out


def _numeric(name: str, type_: str, s: Any, what: str, where: str) -> NumericStats:
    _expect(isinstance(s, dict), what, where, "an object")
    present, missing = _common(s, what, where)
    dist = s.get("distribution") or {}
    _expect(isinstance(dist, dict), what, f"{where}.distribution", "an object")
    kll = dist.get("kll") or {}
    _expect(isinstance(kll, dict), what, f"{where}.distribution.kll", "an object")
    raw = kll.get("buckets") or []
    _expect(isinstance(raw, list) and len(raw) <= MAX_BUCKETS, what, f"{where}.distribution.kll.buckets",
            f"a list of at most {MAX_BUCKETS} {{lower_bound, upper_bound, count}}")  # fmt: skip
    buckets = []
    for j, b in enumerate(raw):
        at = f"{where}.distribution.kll.buckets[{j}]"
        _expect(isinstance(b, dict), what, at, "an object {lower_bound, upper_bound, count}")
        lo = _number(b.get("lower_bound"), what, f"{at}.lower_bound")
        hi = _number(b.get("upper_bound"), what, f"{at}.upper_bound")
        count = _number(b.get("count"), what, f"{at}.count")
        _expect(lo <= hi and count >= 0, what, at, "lower_bound <= upper_bound and a count >= 0")
        buckets.append((lo, hi, count))
    return NumericStats(
        name,
        type_,
        present,
        missing,
        _number(s.get("mean"), what, f"{where}.mean", optional=True),
        _number(s.get("sum"), what, f"{where}.sum", optional=True),
        _number(s.get("std_dev"), what, f"{where}.std_dev", optional=True),
        _number(s.get("min"), what, f"{where}.min", optional=True),
        _number(s.get("max"), what, f"{where}.max", optional=True),
        tuple(buckets),
        _sketch(kll.get("sketch"), what, f"{where}.distribution.kll.sketch"),
    )


def _sketch(sketch: Any, what: str, where: str) -> tuple[tuple[float, float], ...]:
    """A KLL sketch's items with their weights: ``data[h]`` holds the items of level ``h``, each standing for
    ``2**h`` values (the compactor layout of Karnin, Lang and Liberty's sketch, which the analyzer serialises)."""
    if sketch is None:
        return ()
    _expect(isinstance(sketch, dict), what, where, "an object {parameters, data}")
    data = sketch.get("data") or []
    _expect(isinstance(data, list) and len(data) <= MAX_SKETCH_LEVELS, what, f"{where}.data",
            f"a list of at most {MAX_SKETCH_LEVELS} levels, each a list of numbers")  # fmt: skip
    items: list[tuple[float, float]] = []
    for h, level in enumerate(data):
        _expect(isinstance(level, list), what, f"{where}.data[{h}]", "a list of numbers")
        if len(items) + len(level) > MAX_SKETCH_ITEMS:
            raise SageMakerFileError(f"{what}: {where} holds more than {MAX_SKETCH_ITEMS} items.")
        items += [(_number(v, what, f"{where}.data[{h}][{j}]"), float(2**h)) for j, v in enumerate(level)]
    return tuple(items)


def _string(name: str, type_: str, s: Any, what: str, where: str) -> StringStats:
    _expect(isinstance(s, dict), what, where, "an object")
    present, missing = _common(s, what, where)
    dist = s.get("distribution") or {}
    _expect(isinstance(dist, dict), what, f"{where}.distribution", "an object")
    categorical = dist.get("categorical") or {}
    _expect(isinstance(categorical, dict), what, f"{where}.distribution.categorical", "an object")
    raw = categorical.get("buckets") or []
    _expect(isinstance(raw, list) and len(raw) <= MAX_BUCKETS, what, f"{where}.distribution.categorical.buckets",
            f"a list of at most {MAX_BUCKETS} {{value, count}}")  # fmt: skip
    buckets: dict[str, float] = {}
    for j, b in enumerate(raw):
        at = f"{where}.distribution.categorical.buckets[{j}]"
        _expect(isinstance(b, dict) and isinstance(b.get("value"), (str, int, float)) and
                not isinstance(b.get("value"), bool), what, at, "an object {value: text, count}")  # fmt: skip
        count = _number(b.get("count"), what, f"{at}.count")
        _expect(count >= 0, what, f"{at}.count", "a count >= 0")
        value = str(b["value"])
        buckets[value] = buckets.get(value, 0.0) + count  # the same value twice: one category
    distinct = _count(s.get("distinct_count"), what, f"{where}.distinct_count", optional=True)
    return StringStats(name, type_, present, missing, distinct, tuple(buckets.items()))


def _common(s: Mapping[str, Any], what: str, where: str) -> tuple[int, int]:
    common = s.get("common")
    _expect(isinstance(common, dict), what, f"{where}.common", "an object {num_present, num_missing}")
    assert isinstance(common, dict)
    return (_count(common.get("num_present"), what, f"{where}.common.num_present") or 0,
            _count(common.get("num_missing"), what, f"{where}.common.num_missing", optional=True) or 0)  # fmt: skip


# ---------------------------------------------------------------------------------------------- constraints.json
def parse_constraints(doc: Mapping[str, Any], what: str) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """Each feature's inferred type and string domain; the fields the violation checks read are type-checked here so
    that they cannot fail later."""
    features = _features(doc, what, "constraints")
    types: dict[str, str] = {}
    domains: dict[str, tuple[str, ...]] = {}
    for i, f in enumerate(features):
        where = f"features[{i}]"
        name, type_ = _name_and_type(f, what, where, types)
        types[name] = type_
        _number(f.get("completeness"), what, f"{where}.completeness", optional=True)
        num = f.get("num_constraints")
        if num is not None:
            _expect(isinstance(num, dict) and isinstance(num.get("is_non_negative", False), bool), what,
                    f"{where}.num_constraints", "an object {is_non_negative: true|false}")  # fmt: skip
        strings = f.get("string_constraints")
        if strings is not None:
            _expect(isinstance(strings, dict), what, f"{where}.string_constraints", "an object {domains}")
            given = strings.get("domains")
            if given is not None:
                _expect(isinstance(given, list) and len(given) <= MAX_BUCKETS and
                        all(isinstance(v, (str, int, float)) and not isinstance(v, bool) for v in given),
                        what, f"{where}.string_constraints.domains",
                        f"a list of at most {MAX_BUCKETS} values")  # fmt: skip
                domains[name] = tuple(str(v) for v in given)
        overrides = f.get("monitoring_config_overrides")
        if overrides is not None:
            _config(overrides, what, f"{where}.monitoring_config_overrides")
    config = doc.get("monitoring_config")
    if config is not None:
        _config(config, what, "monitoring_config")
        distribution = config.get("distribution_constraints")
        if distribution is not None:
            _expect(isinstance(distribution, dict), what, "monitoring_config.distribution_constraints", "an object")
            for key in ("comparison_threshold", "categorical_comparison_threshold"):
                _number(distribution.get(key), what, f"monitoring_config.distribution_constraints.{key}", True)
    return types, domains


def _config(config: Any, what: str, where: str) -> None:
    _expect(isinstance(config, dict), what, where, "an object")
    for key in ("datatype_check_threshold", "domain_content_threshold"):
        _number(config.get(key), what, f"{where}.{key}", optional=True)
    for key in ("evaluate_constraints", "emit_metrics"):
        _expect(config.get(key, "Enabled") in ("Enabled", "Disabled"), what, f"{where}.{key}", "Enabled or Disabled")


def comparison_threshold(constraints: Mapping[str, Any] | None) -> float | None:
    """``monitoring_config.distribution_constraints.comparison_threshold`` when distribution comparisons are on (the
    documented ``perform_comparison``, or the older ``enable_comparisons`` the SDK's test files carry); default 0.1 as
    the analyzer suggests it; None when comparisons are off."""
    config = (constraints or {}).get("monitoring_config") or {}
    distribution = config.get("distribution_constraints") or {}
    if distribution.get("perform_comparison", "Enabled") != "Enabled":
        return None
    if distribution.get("enable_comparisons") is False:
        return None
    value = distribution.get("comparison_threshold", 0.1)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.1


# ---------------------------------------------------------------------------------------------- helpers
def _features(doc: Mapping[str, Any], what: str, kind: str) -> list[dict[str, Any]]:
    features = doc.get("features")
    _expect(isinstance(features, list) and len(features) <= MAX_FEATURES, what, "features",
            f"a list of at most {MAX_FEATURES} feature objects (SageMaker's {kind} shape)")  # fmt: skip
    assert isinstance(features, list)
    for i, f in enumerate(features):
        _expect(isinstance(f, dict), what, f"features[{i}]", "an object {name, inferred_type, ...}")
    return features


def _name_and_type(f: Mapping[str, Any], what: str, where: str, seen: Mapping[str, Any]) -> tuple[str, str]:
    name, type_ = f.get("name"), f.get("inferred_type")
    _expect(isinstance(name, str) and bool(name), what, f"{where}.name", "a non-empty text")
    _expect(type_ in TYPES, what, f"{where}.inferred_type", " | ".join(TYPES))
    assert isinstance(name, str) and isinstance(type_, str)
    if name in seen:
        raise SageMakerFileError(f"{what}: feature {name!r} appears twice.")
    return name, type_


def _expect(ok: bool, what: str, where: str, expected: str) -> None:
    if not ok:
        raise SageMakerFileError(f"{what}: {where} must be {expected}.")


def _number(value: Any, what: str, where: str, optional: bool = False) -> Any:
    """A finite number as float (None when ``optional`` and absent)."""
    if value is None and optional:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    _expect(ok, what, where, "a finite number")
    return float(value)


def _count(value: Any, what: str, where: str, optional: bool = False) -> int | None:
    """A count as int (the analyzer writes counts as floats, ``418.0``)."""
    number = _number(value, what, where, optional)
    if number is None:
        return None
    _expect(number >= 0 and float(number).is_integer(), what, where, "a whole number >= 0")
    return int(number)
