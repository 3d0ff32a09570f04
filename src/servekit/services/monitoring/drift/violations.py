"""SageMaker Model Monitor's constraint checks on one window, as ``constraint_violations.json`` entries.

Checks and their thresholds come from the baseline's ``constraints.json`` (users may edit it, including
per-feature ``monitoringConfigOverrides``): ``data_type_check`` (share of present values of the wrong type >
``datatype_check_threshold``; a negative value where ``is_non_negative`` holds is reported here too),
``completeness_check`` (non-missing share below the baseline's ``completeness``), ``missing_column_check``,
``extra_column_check``, ``categorical_values_check`` (share of values outside ``domains`` >
``domain_content_threshold``) and ``baseline_drift_check`` (servekit's learned thresholds; only when
``distribution_constraints.perform_comparison`` is ``Enabled``). ``evaluate_constraints: Disabled`` turns all
but the drift check off.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from servekit.services.monitoring.drift.sketch import CategoricalSummary, NumericSummary

Summary = NumericSummary | CategoricalSummary


def _exceedance(metric: str, value: float, threshold: float) -> str:
    if metric.endswith("pvalue"):  # a test: the Holm-adjusted p-value fell to the family level or below
        return f"{metric} (Holm) {value:.4g} <= {threshold:.4g}"
    return f"{metric} {value:.4g} > {threshold:.4g}"


def _violation(feature: str, check: str, description: str) -> dict[str, str]:
    return {"feature_name": feature, "constraint_check_type": check, "description": description}


def _setting(config: Mapping[str, Any], feature: Mapping[str, Any], key: str, default: float) -> float:
    overrides = feature.get("monitoringConfigOverrides") or {}
    return float(overrides.get(key, config.get(key, default)))


def check(
    constraints: Mapping[str, Any],
    summaries: Mapping[str, Summary],
    columns: Collection[str],
    drift: Mapping[str, list[tuple[str, float, float]]],
    summary_domains: Mapping[str, Sequence[str]],
) -> list[dict[str, str]]:
    """``summaries`` per baseline feature, ``columns`` seen in the window, ``drift`` = exceeded (metric, value,
    threshold) per feature, ``summary_domains`` = the categories a categorical summary counts, in order."""
    config = constraints.get("monitoring_config") or {}
    out: list[dict[str, str]] = []
    features = {f["name"]: f for f in constraints.get("features", [])}
    if config.get("evaluate_constraints", "Enabled") == "Enabled":
        for name in sorted(set(columns) - set(features)):
            out.append(_violation(name, "extra_column_check", f"Column {name!r} is not in the baseline."))
        for name, feature in features.items():
            if name not in columns:
                out.append(_violation(name, "missing_column_check", f"Baseline column {name!r} is missing."))
                continue
            s = summaries.get(name)
            if s is not None:
                out.extend(_feature_checks(name, feature, config, s, summary_domains.get(name, ())))
    distribution = config.get("distribution_constraints") or {}
    if distribution.get("perform_comparison", "Enabled") == "Enabled":
        for name, exceeded in sorted(drift.items()):
            if exceeded:
                detail = ", ".join(_exceedance(m, v, t) for m, v, t in exceeded)
                out.append(_violation(name, "baseline_drift_check", f"Drift from the baseline: {detail}."))
    return out


def _feature_checks(
    name: str, feature: Mapping[str, Any], config: Mapping[str, Any], s: Summary, summary_domain: Sequence[str]
) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    rows = s.rows
    if rows == 0:
        return out
    completeness = 1 - s.missing / rows
    want = feature.get("completeness")
    if want is not None and completeness < float(want):
        out.append(
            _violation(
                name,
                "completeness_check",
                f"Completeness {completeness:.4g} is below the baseline's {float(want):.4g}.",
            )
        )
    non_missing = rows - s.missing
    if isinstance(s, NumericSummary):
        limit = _setting(config, feature, "datatype_check_threshold", 0.1)
        if non_missing and s.mismatched / non_missing > limit:
            out.append(
                _violation(
                    name,
                    "data_type_check",
                    f"{s.mismatched / non_missing:.4g} of the values are not {feature.get('inferred_type')} "
                    f"(threshold {limit:.4g}).",
                )
            )
        if (feature.get("num_constraints") or {}).get("is_non_negative") and s.negative > 0:
            out.append(
                _violation(name, "data_type_check", f"{s.negative} negative values where is_non_negative holds.")
            )
    domains = (feature.get("string_constraints") or {}).get("domains")
    if isinstance(s, CategoricalSummary) and domains is not None and s.present:
        limit = _setting(config, feature, "domain_content_threshold", 0.1)
        unknown = _outside(s, set(domains), summary_domain)
        if unknown / s.present > limit:
            out.append(
                _violation(
                    name,
                    "categorical_values_check",
                    f"{unknown / s.present:.4g} of the values are outside the baseline domain (threshold {limit:.4g}).",
                )
            )
    return out


def _outside(s: CategoricalSummary, domains: set[str], summary_domain: Sequence[str]) -> int:
    """Values outside ``domains``: summaries count against the baseline's own domain, and constraints.json may
    have been edited since, so each counted category is looked up."""
    known = sum(int(n) for v, n in zip(summary_domain, s.counts.tolist(), strict=False) if v in domains)
    tracked_inside = sum(n for v, n in s.unseen.items() if v in domains)
    return s.present - known - tracked_inside
