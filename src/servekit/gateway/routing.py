"""Routing decisions, pure: which variant a request goes to (by weight) and which instance within it (fewest
outstanding requests). Randomness is a number in [0, 1) that the caller draws from a seeded generator, so a
test replays the same choices and a statistical test counts exact splits."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


def choose_variant(weights: Sequence[tuple[str, float]], u: float) -> str | None:
    """The variant whose share of the total weight covers ``u`` (in [0, 1)); None when every weight is 0.

    Traffic share = weight / sum of weights, as SageMaker's ``CurrentWeight``; variants with weight 0 get none.
    """
    total = sum(w for _, w in weights if w > 0)
    if total <= 0:
        return None
    x = u * total
    acc = 0.0
    last = None
    for name, w in weights:
        if w <= 0:
            continue
        acc += w
        last = name
        if x < acc:
            return name
    return last  # u * total rounded up to the sum: the last variant with weight


def least_outstanding(outstanding: Sequence[tuple[str, int]], u: float) -> str | None:
    """The instance with the fewest requests in flight; ties broken by ``u`` so load spreads evenly."""
    if not outstanding:
        return None
    low = min(n for _, n in outstanding)
    tied = [name for name, n in outstanding if n == low]
    return tied[min(int(u * len(tied)), len(tied) - 1)]


def rendezvous(outstanding: Sequence[tuple[str, int]], key: str, spill_at: int) -> str | None:
    """The instance for ``key`` (a multi-model endpoint's TargetModel) by rendezvous hashing: each instance ranks
    by a hash of (key, instance), and the highest-ranked one with fewer than ``spill_at`` requests in flight takes
    it, so one model keeps landing where it is loaded and a saturated instance spills to the next in that model's
    order; when all are saturated, the least busy. Instances joining or leaving move only their share of keys."""
    if not outstanding:
        return None

    def rank(instance: str) -> bytes:
        return hashlib.blake2b(f"{key}\0{instance}".encode(), digest_size=8).digest()

    ordered = sorted(outstanding, key=lambda item: rank(item[0]), reverse=True)
    for name, n in ordered:
        if n < spill_at:
            return name
    return min(ordered, key=lambda item: item[1])[0]
