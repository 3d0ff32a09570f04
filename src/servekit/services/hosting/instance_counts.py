"""Instance counts over time: each metrics period, every endpoint variant's ``CurrentInstanceCount`` and
``DesiredInstanceCount`` (as DescribeEndpoint answers them at that moment) recorded as metrics, so a chart of
desired against current instances can be drawn from GetMetricData.

CloudWatch publishes no such series for SageMaker endpoints; servekit's go under their own namespace
(:data:`NAMESPACE`, dimensions EndpointName and VariantName, one sample per period: read them with the Maximum
statistic). Only DescribeEndpoint's public answer is sampled, so the series say exactly what the API said.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from servekit._utils.background import BackgroundLoop, until_next_bucket
from servekit.services.cloudwatch.store import MetricsStore

log = logging.getLogger(__name__)

NAMESPACE = "servekit/Endpoints"
METRICS = ("CurrentInstanceCount", "DesiredInstanceCount")


class InstanceCountSeries(BackgroundLoop):
    """Samples ``describe`` for every name of ``endpoints`` each ``interval_s`` (the store's resolution by default,
    at least a second) into ``store``; ``start()``/``close()`` run it beside the control plane."""

    def __init__(
        self,
        endpoints: Callable[[], Iterable[str]],
        describe: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]],
        store: MetricsStore,
        interval_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._endpoints = endpoints
        self._describe = describe
        self.store = store
        self.interval_s = max(1.0, float(interval_s if interval_s is not None else store.resolution_s))
        self.clock = clock

    async def sample(self) -> int:
        """One pass: record both counts of every variant of every endpoint that still exists; how many variants."""
        at = self.clock()
        n = 0
        for name in list(self._endpoints()):
            try:
                described = await self._describe({"EndpointName": name})
            except Exception:  # deleted meanwhile: nothing to count
                continue
            for v in described.get("ProductionVariants") or []:
                dims = (("EndpointName", name), ("VariantName", str(v["VariantName"])))
                for metric in METRICS:
                    value = v.get(metric)
                    if isinstance(value, int | float):
                        self.store.record(NAMESPACE, metric, dims, float(value), at)
                n += 1
        return n

    async def run(self) -> None:
        while True:
            try:
                await self.sample()
            except Exception:
                log.exception("sampling instance counts failed")
            step = self.interval_s
            await asyncio.sleep(until_next_bucket(self.clock(), step, min(0.1, step / 10)))
