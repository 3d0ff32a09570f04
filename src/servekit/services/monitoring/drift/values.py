"""Exact values of a numerical feature, or a uniform sample of them once there are too many.

Exact statistics (KS and its p-value, Wasserstein) need the values themselves, not bins. A
:class:`ValueSample` keeps every value until ``cap`` have arrived; beyond that it keeps the values with the
``cap`` smallest random keys (a bottom-k sample). Bottom-k samples merge: the bottom-k of the union of two
bottom-k samples is the bottom-k sample of the union, so panes still add up to windows, and the result is a
uniform sample without replacement of everything that was offered.

The keys are independent of the values, so they need not exist before a sample first has to choose: while every
value is kept (``seen <= cap``) a sample holds the values alone, and keys are drawn (uniform, from the sample's
generator) for every held value the first time a prune or a merge with a sampled side needs them. Drawing them
then rather than on arrival gives the same distribution. Memory: 8 bytes per value while exact, 16 once sampled
(value and key); a merge may hold up to twice the cap before it prunes, so at most ``32 · cap`` bytes per summary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

EXACT_VALUES = 1_000_000  # values kept exactly per feature (8 MB as float64; 16 MB with keys while building)
DKW_DELTA = 0.001  # the sampled KS error bound holds with probability >= 1 - DKW_DELTA per sampled side


@dataclass(slots=True)
class ValueSample:
    values: FloatArray
    keys: FloatArray | None  # None while every value offered is held: drawn when a choice first needs them
    seen: int  # values offered, kept or not
    cap: int
    rng: np.random.Generator | None = None  # draws the keys; None: one seeded by ``seen`` (reproducible)

    @classmethod
    def empty(cls, cap: int) -> ValueSample:
        return cls(np.empty(0), None, 0, cap)

    @classmethod
    def of(cls, values: FloatArray, rng: np.random.Generator, cap: int) -> ValueSample:
        out = cls(np.asarray(values, dtype=np.float64), None, len(values), cap, rng)
        out._prune(cap)
        return out

    @property
    def exact(self) -> bool:
        return len(self.values) == self.seen

    def add(self, other: ValueSample) -> None:
        if self.rng is None:
            self.rng = other.rng
        if self.keys is not None or other.keys is not None:  # a sampled side: the union chooses by keys
            self.keys = np.concatenate([self._keys(), other._keys()])
        self.values = np.concatenate([self.values, other.values])
        self.seen += other.seen
        # Pruning costs a pass over the buffer, so let it grow to twice the cap first (amortised O(1) per value).
        self._prune(2 * self.cap)

    def copy(self) -> ValueSample:
        keys = None if self.keys is None else self.keys.copy()
        return ValueSample(self.values.copy(), keys, self.seen, self.cap, self.rng)

    def kept(self) -> FloatArray:
        """The exact values, or the uniform sample of ``cap`` values (in no particular order)."""
        self._prune(self.cap)
        return self.values

    @property
    def nbytes(self) -> int:
        """Memory held by the values and keys."""
        return int(self.values.nbytes + (0 if self.keys is None else self.keys.nbytes))

    def _keys(self) -> FloatArray:
        if self.keys is None:
            if self.rng is None:
                self.rng = np.random.default_rng(self.seen)
            self.keys = self.rng.random(len(self.values))
        return self.keys

    def _prune(self, limit: int) -> None:
        if len(self.values) > limit:
            keys = self._keys()
            keep = np.argpartition(keys, self.cap)[: self.cap]
            self.values, self.keys = self.values[keep], keys[keep]


def ecdf_error_bound(sample_size: int, delta: float = DKW_DELTA) -> float:
    """Dvoretzky-Kiefer-Wolfowitz (Massart's constant): a uniform sample of ``k`` values has an empirical CDF
    within ``sqrt(ln(2/δ) / (2k))`` of the population's everywhere, with probability >= 1 - δ (sampling without
    replacement is at least as tight)."""
    return math.sqrt(math.log(2 / delta) / (2 * sample_size)) if sample_size > 0 else 1.0
