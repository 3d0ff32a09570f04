"""A monitor run's verdict as CloudWatch metrics on a servekit control plane (``servekit monitor run
--publish-url``), so an alarm can watch drift like any endpoint metric and a rollout can roll back on it.

Namespace ``servekit`` (``--publish-namespace``), dimensions ``EndpointName`` and, when given, ``VariantName``;
one datapoint each, stamped with the time of the run, from the latest judged window:

- ``DriftedFeatures``: how many features drifted (docs/monitoring.md §4; missing-value jumps are not drift);
- ``DataQualityViolations``: how many constraint violations it has (``constraint_violations.json``'s entries);
- ``DriftAlarms``: the alarms this run raised (``--consecutive`` drifted windows in a row).

A run with no judged window (too few rows everywhere) publishes nothing: an alarm on these metrics then follows
its ``TreatMissingData``.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from servekit.services.monitoring.runs.run import RunResult

NAMESPACE = "servekit"


def drift_metric_data(result: RunResult, endpoint: str, variant: str | None, at: datetime) -> list[dict[str, Any]]:
    """PutMetricData's ``MetricData`` for ``result`` (empty when no window was judged)."""
    judged = [w for w in result.windows if w.status == "ok"]
    if not judged:
        return []
    latest = judged[-1]
    dims = [{"Name": "EndpointName", "Value": endpoint}]
    if variant:
        dims.append({"Name": "VariantName", "Value": variant})
    values = {
        "DriftedFeatures": sum(1 for f in latest.features.values() if f.drifted),
        "DataQualityViolations": len(latest.violations),
        "DriftAlarms": len(result.alarms),
    }
    # StorageResolution 1: a high-resolution datapoint, so a store finer than a minute keeps it at its own time
    return [
        {
            "MetricName": name,
            "Dimensions": dims,
            "Timestamp": at,
            "Value": float(value),
            "Unit": "Count",
            "StorageResolution": 1,
        }
        for name, value in values.items()
    ]
