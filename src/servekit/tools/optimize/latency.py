"""Latency of the two versions per batch size, measured in this process through the runtime servekit serves
with (``Servable.predict``), interleaved: each round runs every batch size on both models, alternating which
goes first, so a noisy neighbour or a frequency change hits both sides alike instead of one whole series."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from servekit.serving.runtime.base import Servable
from servekit.tools.optimize.data import Dataset, take

WARMUP_CALLS = 3


@dataclass(frozen=True, slots=True)
class Latency:
    batch_size: int
    before_p50_ms: float
    after_p50_ms: float
    before_p90_ms: float
    after_p90_ms: float

    @property
    def speedup(self) -> float:
        return self.before_p50_ms / self.after_p50_ms if self.after_p50_ms > 0 else float("inf")


def measure(
    before: Servable, after: Servable, signature: str, data: Dataset, batch_sizes: Sequence[int], rounds: int
) -> list[Latency]:
    batches = {n: take(data, n) for n in batch_sizes}
    pair = (before, after)
    for servable in pair:  # first calls allocate buffers and pick kernels; not what serving steady state costs
        for inputs in batches.values():
            for _ in range(WARMUP_CALLS):
                servable.predict(signature, inputs)
    times: dict[tuple[int, int], list[float]] = {(n, side): [] for n in batch_sizes for side in (0, 1)}
    for r in range(rounds):
        for n, inputs in batches.items():
            for side in (0, 1) if r % 2 == 0 else (1, 0):
                started = time.perf_counter()
                pair[side].predict(signature, inputs)
                times[(n, side)].append((time.perf_counter() - started) * 1000)
    return [
        Latency(
            n,
            float(np.percentile(times[(n, 0)], 50)),
            float(np.percentile(times[(n, 1)], 50)),
            float(np.percentile(times[(n, 0)], 90)),
            float(np.percentile(times[(n, 1)], 90)),
        )
        for n in batch_sizes
    ]
