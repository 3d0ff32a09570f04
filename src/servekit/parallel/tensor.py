"""Tensor parallelism of a torch MLP: each Linear layer's weight matrix split across N ranks (Megatron's pattern).

The model is a TorchScript ``nn.Sequential`` of ``Linear`` layers and elementwise activations (ReLU, Tanh,
Sigmoid, Identity). Linear layers alternate: the 1st, 3rd, ... are *column-parallel* (rank r holds rows r/N of the
weight, i.e. a slice of the output features, and its slice of the bias), the 2nd, 4th, ... *row-parallel* (rank r
holds the matching slice of the input features; the partial products are summed with an all-reduce, then the
whole bias is added). An activation between the two works on each rank's slice alone; a model ending on a
column-parallel layer gathers the slices. Every output feature count that is split must divide by N.

``python -m servekit.parallel.tensor MODEL.pt N OUT_DIR`` (a one-shot process outside the envelopes, run by the
control plane) writes ``OUT_DIR/rank-<r>/1/{shard.bin, code/inference.py}`` and ``ranks.json``. Each rank is a
``servekit serve`` of its own directory: :func:`model_fn` loads only its shard and joins a gloo process group
(``SERVEKIT_TP_MASTER`` host:port, ``SERVEKIT_TP_RANK``, ``SERVEKIT_TP_WORLD``). Rank 0 answers requests: it
broadcasts each batch to the others and all compute their slices in step; ranks > 0 serve only their health check
and follow rank 0 from a thread. torch is the ``servekit[torch]`` extra; the sharding itself is numpy.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.parallel.stage import STATS_ENV, start_stats_writer

Array = npt.NDArray[Any]
SHARD_FILE = "shard.bin"
RANKS_FILE = "ranks.json"
HANDLER = "from servekit.parallel.tensor import model_fn  # noqa: F401  (a tensor-parallel rank: servekit.parallel)\n"
MASTER_ENV, RANK_ENV, WORLD_ENV = "SERVEKIT_TP_MASTER", "SERVEKIT_TP_RANK", "SERVEKIT_TP_WORLD"
ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "ReLU": lambda x: np.maximum(x, 0),
    "Tanh": np.tanh,
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "Identity": lambda x: x,
}


class TensorSplitError(ValueError):
    """The model cannot be split as asked; the message says why."""


@dataclass(frozen=True, slots=True)
class Op:
    """One step of a rank's forward pass: ``matmul`` (x @ weight.T, + bias when given), ``act`` (an activation by
    name), ``all_reduce`` (sum over ranks, then + bias) or ``all_gather`` (slices joined on the last axis)."""

    kind: str
    weight: Array | None = None
    bias: Array | None = None
    name: str = ""


Layer = tuple[str, Array | None, Array | None]  # ("Linear", weight [out, in], bias [out]) or (activation, None, None)


def shard(layers: Sequence[Layer], n: int) -> list[list[Op]]:
    """Each rank's ops for ``layers`` split ``n`` ways (``n`` = 1: the whole model on one rank)."""
    if n < 1:
        raise TensorSplitError(f"a tensor-parallel degree must be at least 1, got {n}")
    ranks: list[list[Op]] = [[] for _ in range(n)]
    column = True  # the next Linear is column-parallel
    for i, (kind, w, b) in enumerate(layers):
        if kind != "Linear":
            if kind not in ACTIVATIONS:
                raise TensorSplitError(f"layer {i} is {kind}: tensor parallelism splits Linear layers and {_acts()}")
            for ops in ranks:
                ops.append(Op("act", name=kind))
            continue
        assert w is not None
        out_f, in_f = w.shape
        if column:
            if out_f % n:
                raise TensorSplitError(f"layer {i} has {out_f} output features, which do not divide by {n}")
            for r, ops in enumerate(ranks):
                rows = slice(r * out_f // n, (r + 1) * out_f // n)
                ops.append(Op("matmul", np.ascontiguousarray(w[rows]), None if b is None else b[rows].copy()))
        else:
            for r, ops in enumerate(ranks):
                cols = slice(r * in_f // n, (r + 1) * in_f // n)
                ops.append(Op("matmul", np.ascontiguousarray(w[:, cols])))
                ops.append(Op("all_reduce", bias=None if b is None else b.copy()))
        column = not column
    if not column:  # the last Linear was column-parallel: each rank holds a slice of the output
        for ops in ranks:
            ops.append(Op("all_gather"))
    return ranks


def _acts() -> str:
    return ", ".join(sorted(ACTIVATIONS))


def run_ops(
    ops: Sequence[Op], x: Array, all_reduce: Callable[[Array], Array], all_gather: Callable[[Array], Array]
) -> Array:
    """A rank's forward pass; the collectives are handed in (torch.distributed in a rank, threads in a test)."""
    h = x.astype(np.float32, copy=False)
    for op in ops:
        if op.kind == "matmul":
            assert op.weight is not None
            h = h @ op.weight.T
            if op.bias is not None:
                h = h + op.bias
        elif op.kind == "act":
            h = ACTIVATIONS[op.name](h)
        elif op.kind == "all_reduce":
            h = all_reduce(h)
            if op.bias is not None:
                h = h + op.bias
        else:
            h = all_gather(h)
    return h


def shard_bytes(ops: Sequence[Op]) -> int:
    return sum(
        (o.weight.nbytes if o.weight is not None else 0) + (o.bias.nbytes if o.bias is not None else 0) for o in ops
    )


# ---- over torch (the servekit[torch] extra) ------------------------------------------------------------------


def torch_layers(module: Any) -> list[Layer]:
    """The children of a (TorchScript) Sequential as layers."""
    out: list[Layer] = []
    for _, child in module.named_children():
        kind = getattr(child, "original_name", type(child).__name__)
        if kind == "Linear":
            w = child.weight.detach().numpy().astype(np.float32)
            b = child.bias.detach().numpy().astype(np.float32) if child.bias is not None else None
            out.append(("Linear", w, b))
        else:
            out.append((kind, None, None))
    if not any(k == "Linear" for k, _, _ in out):
        raise TensorSplitError("tensor parallelism splits a Sequential of Linear layers; the model has none")
    return out


def _ops_to_saveable(ops: Sequence[Op]) -> list[dict[str, Any]]:
    import torch

    def t(a: Array | None) -> Any:
        return None if a is None else torch.from_numpy(a)

    return [{"kind": o.kind, "weight": t(o.weight), "bias": t(o.bias), "name": o.name} for o in ops]


def split_torch_model(model_path: str | os.PathLike[str], n: int, out_dir: str | os.PathLike[str]) -> list[int]:
    """Write each rank's shard and handler under ``out_dir``; returns each rank's weight bytes."""
    import torch

    module = torch.jit.load(str(model_path), map_location="cpu")
    ranks = shard(torch_layers(module), n)
    out = Path(out_dir)
    sizes = []
    for r, ops in enumerate(ranks):
        version = out / f"rank-{r}" / "1"
        (version / "code").mkdir(parents=True, exist_ok=True)
        torch.save(_ops_to_saveable(ops), str(version / SHARD_FILE))
        (version / "code" / "inference.py").write_text(HANDLER)
        sizes.append(shard_bytes(ops))
    (out / RANKS_FILE).write_text(json.dumps({"degree": n, "bytes": sizes}))
    return sizes


class Rank:
    """This process's rank: its shard, and (rank 0) the lock that keeps requests in step across ranks."""

    def __init__(self, ops: Sequence[Op], rank: int, world: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.ops = list(ops)
        self.rank, self.world = rank, world
        self._lock = threading.Lock()
        self._clock = clock
        self.started = clock()
        self.compute_s = 0.0  # time in this rank's own matrix products and activations, not in collectives
        self.batches = 0

    def stats(self) -> dict[str, float]:
        return {"compute_s": self.compute_s, "wall_s": self._clock() - self.started, "batches": self.batches}

    def _all_reduce(self, h: Array) -> Array:
        import torch
        import torch.distributed as dist

        t = torch.from_numpy(np.ascontiguousarray(h))
        dist.all_reduce(t)
        out: Array = t.numpy()
        return out

    def _all_gather(self, h: Array) -> Array:
        import torch
        import torch.distributed as dist

        t = torch.from_numpy(np.ascontiguousarray(h))
        parts = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(parts, t)
        return np.concatenate([p.numpy() for p in parts], axis=-1)

    def _step(self, x: Array) -> Array:
        waited = 0.0

        def timed(collective: Callable[[Array], Array]) -> Callable[[Array], Array]:
            def run(h: Array) -> Array:
                nonlocal waited
                t0 = self._clock()
                try:
                    return collective(h)
                finally:
                    waited += self._clock() - t0

            return run

        t0 = self._clock()
        out = run_ops(self.ops, x, timed(self._all_reduce), timed(self._all_gather))
        self.compute_s += self._clock() - t0 - waited
        self.batches += 1
        return out

    def predict(self, batch: Any) -> Array:
        """Rank 0: send the batch to every rank, compute this rank's slice in step with them."""
        import torch
        import torch.distributed as dist

        x = np.ascontiguousarray(np.asarray(batch, dtype=np.float32))
        if x.ndim == 1:
            x = x[None, :]
        with self._lock:
            dist.broadcast(torch.tensor(x.shape, dtype=torch.int64), 0)
            dist.broadcast(torch.from_numpy(x), 0)
            return self._step(x)

    def follow(self) -> None:
        """Ranks > 0: take each batch rank 0 broadcasts and compute this rank's slice, forever."""
        import torch
        import torch.distributed as dist

        while True:
            shape = torch.zeros(2, dtype=torch.int64)
            dist.broadcast(shape, 0)
            x = torch.empty(tuple(int(s) for s in shape), dtype=torch.float32)
            dist.broadcast(x, 0)
            self._step(x.numpy())


def _load_ops(model_dir: str) -> list[Op]:
    import torch

    raw = torch.load(str(Path(model_dir) / SHARD_FILE), weights_only=True)
    return [
        Op(
            d["kind"],
            None if d["weight"] is None else d["weight"].numpy(),
            None if d["bias"] is None else d["bias"].numpy(),
            d["name"],
        )
        for d in raw
    ]


def model_fn(model_dir: str) -> Rank:
    """The toolkit's ``model_fn``: this rank's shard only, joined to the process group."""
    import datetime

    import torch
    import torch.distributed as dist

    rank, world = int(os.environ[RANK_ENV]), int(os.environ[WORLD_ENV])
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1))
    me = Rank(_load_ops(model_dir), rank, world)
    if os.environ.get(STATS_ENV):
        start_stats_writer(os.environ[STATS_ENV], me.stats)

    def join() -> None:
        dist.init_process_group(
            "gloo",
            init_method=f"tcp://{os.environ[MASTER_ENV]}",
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=300),
        )

    if rank == 0:
        join()  # the later ranks started first and wait for rank 0's store: this returns once all have joined
        return me

    def run() -> None:
        join()
        me.follow()

    # a later rank answers its health check at once (rank 0 starts after it) and follows rank 0 from a thread
    threading.Thread(target=run, name="tensor-parallel-rank", daemon=True).start()
    return me


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3:
        sys.stderr.write("usage: python -m servekit.parallel.tensor MODEL.pt DEGREE OUT_DIR\n")
        return 2
    try:
        split_torch_model(args[0], int(args[1]), args[2])
    except TensorSplitError as exc:
        sys.stderr.write(f"{exc}\n")
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
