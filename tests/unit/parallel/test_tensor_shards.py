"""Tensor parallelism's sharding (servekit.parallel.tensor): Linear layers split column- then row-wise across N
ranks compose, with an all-reduce after each row-parallel layer and a gather at a column-parallel end, to the whole
MLP's answers; ranks run in threads here with the collectives made of a barrier. Splits that cannot work are
refused with the reason."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from servekit.parallel.tensor import Layer, TensorSplitError, run_ops, shard, shard_bytes


def layers(dims: list[int], act: str = "ReLU", seed: int = 5) -> list[Layer]:
    rng = np.random.default_rng(seed)
    out: list[Layer] = []
    for a, b in itertools.pairwise(dims):
        out.append(
            ("Linear", rng.standard_normal((b, a)).astype(np.float32), rng.standard_normal(b).astype(np.float32))
        )
        out.append((act, None, None))
    return out[:-1]  # no activation after the last layer


def whole(ls: list[Layer], x: np.ndarray) -> np.ndarray:
    (only,) = shard(ls, 1)
    return run_ops(only, x, lambda h: h, lambda h: h)


class Collectives:
    """all_reduce / all_gather among ``n`` threads, in step (a barrier between writing and reading)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.barrier = threading.Barrier(n)
        self.slots: list[Any] = [None] * n

    def for_rank(self, r: int) -> tuple[Callable[[np.ndarray], np.ndarray], Callable[[np.ndarray], np.ndarray]]:
        def exchange(h: np.ndarray) -> list[np.ndarray]:
            self.slots[r] = h
            self.barrier.wait()
            got = list(self.slots)
            self.barrier.wait()  # everyone has read before the next write
            return got

        return (lambda h: np.sum(exchange(h), axis=0)), (lambda h: np.concatenate(exchange(h), axis=-1))


def run_ranks(ls: list[Layer], n: int, x: np.ndarray) -> list[np.ndarray]:
    ranks = shard(ls, n)
    coll = Collectives(n)
    out: list[Any] = [None] * n

    def go(r: int) -> None:
        out[r] = run_ops(ranks[r], x, *coll.for_rank(r))

    threads = [threading.Thread(target=go, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


@pytest.mark.parametrize("dims", [[8, 16, 12, 4], [8, 16, 12], [6, 8, 8, 8, 4]])
@pytest.mark.parametrize("n", [2, 4])
def test_shards_compose_to_the_whole_model(dims: list[int], n: int) -> None:
    ls = layers(dims)
    x = np.random.default_rng(1).standard_normal((3, dims[0])).astype(np.float32)
    expected = whole(ls, x)
    for got in run_ranks(ls, n, x):  # every rank ends with the whole answer
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_each_rank_holds_a_share_of_the_weights() -> None:
    ls = layers([8, 16, 12, 4])
    total = sum(w.nbytes + b.nbytes for k, w, b in ls if k == "Linear" and w is not None and b is not None)
    sizes = [shard_bytes(ops) for ops in shard(ls, 2)]
    # weights halve; the row-parallel layer's bias is kept whole on each rank
    assert sum(sizes) == total + 12 * 4 and abs(sizes[0] - sizes[1]) == 0


def test_splits_that_cannot_work_are_refused() -> None:
    with pytest.raises(TensorSplitError, match="6 output features, which do not divide by 4"):
        shard(layers([8, 6, 4]), 4)
    with pytest.raises(TensorSplitError, match="layer 1 is Softmax"):
        shard(layers([8, 8, 4], act="Softmax"), 2)
    with pytest.raises(TensorSplitError, match="at least 1"):
        shard(layers([8, 8]), 0)


def test_a_ranks_compute_time_leaves_out_its_waits_in_collectives() -> None:
    from servekit.parallel.tensor import Rank

    now = [0.0]

    class Waiting(Rank):
        def _all_reduce(self, h: np.ndarray) -> np.ndarray:
            now[0] += 2.0  # two seconds waiting for the other ranks
            return h

        def _all_gather(self, h: np.ndarray) -> np.ndarray:
            return h

    ops = shard(layers([4, 4, 4]), 1)[0]  # column, act, row (+ all-reduce)
    rank = Waiting(ops, 0, 1, clock=lambda: now[0])
    rank._step(np.ones((1, 4), np.float32))
    now[0] += 1.0
    assert rank.stats() == {"compute_s": 0.0, "wall_s": 3.0, "batches": 1}
