"""SageMaker Model Monitor's ``statistics.json`` and ``constraints.json``, written from a baseline.

Shapes follow the Model Monitor documentation (see ``docs/monitoring.md``). Numerical distributions carry
the ten equal-width ``kll.buckets`` only: servekit keeps its own quantile edges in ``baseline.json`` rather
than a KLL sketch, so no ``kll.sketch`` is written.
"""

from __future__ import annotations

from typing import Any

from servekit.services.monitoring.drift.profiles import Baseline, CategoricalProfile, NumericProfile

MONITORING_CONFIG: dict[str, Any] = {
    "evaluate_constraints": "Enabled",
    "emit_metrics": "Enabled",
    "datatype_check_threshold": 0.1,
    "domain_content_threshold": 0.1,
    "distribution_constraints": {
        "perform_comparison": "Enabled",
        "comparison_threshold": 0.1,
        "comparison_method": "Robust",
        "categorical_comparison_threshold": 0.1,
        "categorical_drift_method": "LInfinity",
    },
}


def statistics(baseline: Baseline) -> dict[str, Any]:
    features = []
    for name, p in baseline.profiles.items():
        common = {"num_present": p.summary.present, "num_missing": p.summary.missing}
        entry: dict[str, Any] = {"name": name, "inferred_type": p.feature.inferred_type.value}
        if isinstance(p, NumericProfile):
            s = p.summary
            entry["numerical_statistics"] = {
                "common": common,
                "mean": s.mean(),
                "sum": float(s.sums.sum()),
                "std_dev": s.std(),
                "min": p.minimum,
                "max": p.maximum,
                "distribution": {
                    "kll": {
                        "buckets": [
                            {"lower_bound": lo, "upper_bound": hi, "count": float(n)} for lo, hi, n in p.buckets
                        ]
                    }
                },
            }
        else:
            entry["string_statistics"] = {
                "common": common,
                "distinct_count": float(p.distinct),
                "distribution": {
                    "categorical": {
                        "buckets": [
                            {"value": v, "count": float(n)}
                            for v, n in zip(p.domain, p.summary.counts.tolist(), strict=False)
                        ]
                    }
                },
            }
        features.append(entry)
    return {"version": 0.0, "dataset": {"item_count": baseline.rows}, "features": features}


def monitoring_config(categorical_drift_method: str | None = None) -> dict[str, Any]:
    """``constraints.json``'s ``monitoring_config``; ``categorical_drift_method`` (``LInfinity`` or ``ChiSquared``) as
    the SDK's ``monitoring_config_override`` sets it, written for compatibility: servekit judges drift with its
    learned thresholds."""
    distribution = dict(MONITORING_CONFIG["distribution_constraints"])
    if categorical_drift_method is not None:
        distribution["categorical_drift_method"] = categorical_drift_method
    return {**MONITORING_CONFIG, "distribution_constraints": distribution}


def constraints(baseline: Baseline, categorical_drift_method: str | None = None) -> dict[str, Any]:
    features = []
    for name, p in baseline.profiles.items():
        rows = p.summary.present + p.summary.missing
        entry: dict[str, Any] = {
            "name": name,
            "inferred_type": p.feature.inferred_type.value,
            "completeness": p.summary.present / rows if rows else 0.0,
        }
        if isinstance(p, NumericProfile):
            entry["num_constraints"] = {"is_non_negative": bool(p.minimum >= 0)}
        elif isinstance(p, CategoricalProfile) and p.complete and p.domain:
            entry["string_constraints"] = {"domains": list(p.domain)}
        features.append(entry)
    return {"version": 0.0, "features": features, "monitoring_config": monitoring_config(categorical_drift_method)}
