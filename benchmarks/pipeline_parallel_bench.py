"""Pipeline parallelism: throughput and Util of an ONNX MLP served as 1, 2 and 4 stages, with and without
micro-batches, in one run.

    python benchmarks/pipeline_parallel_bench.py [--seconds 6] [--clients 1,8] [--rows 32] [--micro-batches 2,8]

The model is the e2e test's: 4 dense layers of 2048 x 2048 float32 (64 MiB of weights) and a 2048 -> 16 head,
seeded. Each configuration starts its stages with servekit's own code (hosting.pipeline.PipelineBackend over
the local process backend with CPU pinning, as ``servekit up`` does, each stage an ml.m5.large-sized envelope with
1 vCPU) and sends ``--rows``-row x-npy batches to stage 0's /invocations from ``--clients`` closed-loop threads for
``--seconds``. One stage is the baseline (the same handler, no hop). Reported: rows/s and its ratio to the 1-stage
run with the same clients, and Util = T_compute / (T_compute + T_idle) summed over the stages from their own
counters over the window. Micro-batches: OPTION_PIPELINE_MICRO_BATCHES=1 (off) and each of --micro-batches.

What two cores allow: stages are pinned one per core while cores are free; with 4 stages on 2 cores two stages run
unpinned and all share the cores with the client threads, so 4 stages cannot beat 2 here; the figure shows the
bubble and hop costs, not a speed-up. Only loopback is used.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from servekit.backends.local import CpuPinningBackend, CpuPool, InstanceSpec, LocalProcessBackend
from servekit.services.hosting.pipeline import MICRO_BATCHES_ENV, PipelineBackend, read_stats
from servekit.testing.onnx_models import write_deep_mlp

WIDTH, LAYERS = 2048, 4


def build_model(path: Path, seed: int = 29) -> None:
    write_deep_mlp(path, WIDTH, LAYERS, seed=seed)


def load(url: str, body: bytes, clients: int, seconds: float) -> int:
    """Closed-loop clients for ``seconds``; the number of answered requests."""
    stop = time.monotonic() + seconds
    counts = [0] * clients

    def client(k: int) -> None:
        while time.monotonic() < stop:
            req = urllib.request.Request(
                f"{url}/invocations",
                body,
                {"Content-Type": "application/x-npy", "Accept": "application/x-npy"},
            )
            with urllib.request.urlopen(req, timeout=120) as resp:
                resp.read()
            counts[k] += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts)


async def run_config(
    backend: PipelineBackend, model: Path, degree: int, micro: int, clients: int, body: bytes, seconds: float
) -> dict[str, Any]:
    spec = InstanceSpec(
        f"bench-d{degree}-m{micro}-c{clients}",
        "mlp",
        str(model.parent.parent),
        vcpus=1,
        environment={MICRO_BATCHES_ENV: str(micro)},
    )
    handle = await backend.start_stages(spec, model, degree)
    try:
        await backend.ready(handle.stages[0])
        await asyncio.to_thread(load, handle.url, body, clients, 1.0)  # warm-up, not measured
        before = [read_stats(p) for p in handle.stats_paths]
        t0 = time.perf_counter()
        answered = await asyncio.to_thread(load, handle.url, body, clients, seconds)
        elapsed = time.perf_counter() - t0
        await asyncio.sleep(0.6)  # the stages write their counters twice a second: let the last window land
        after = [read_stats(p) for p in handle.stats_paths]
    finally:
        await backend.stop(handle)
    compute = sum(min(a["compute_s"] - b["compute_s"], elapsed) for a, b in zip(after, before, strict=True) if a and b)
    util = compute / (elapsed * degree)  # idle = the window less compute, per stage
    return {
        "degree": degree,
        "micro_batches": micro,
        "clients": clients,
        "rows_per_s": answered * body_rows(body) / elapsed,
        "util": util,
    }


def body_rows(body: bytes) -> int:
    return int(np.load(io.BytesIO(body)).shape[0])


async def main_async(args: argparse.Namespace) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = root / "mlp" / "1" / "model.onnx"
        build_model(model)
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        inner = CpuPinningBackend(LocalProcessBackend(root / "instances"), CpuPool(cpus))
        backend = PipelineBackend(inner, root / "stages")
        x = np.random.default_rng(1).standard_normal((args.rows, WIDTH)).astype(np.float32)
        buf = io.BytesIO()
        np.save(buf, x, allow_pickle=False)
        body = buf.getvalue()
        results = []
        try:
            for clients in args.clients:
                for degree in (1, 2, 4):
                    for micro in (1, *args.micro_batches) if degree > 1 else (1,):
                        r = await run_config(backend, model, degree, micro, clients, body, args.seconds)
                        results.append(r)
                        print(json.dumps(r), file=sys.stderr, flush=True)
        finally:
            await backend.close()
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--clients", type=lambda s: [int(c) for c in s.split(",")], default=[1, 8])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--micro-batches", type=lambda s: [int(m) for m in s.split(",")], default=[2, 8])
    args = parser.parse_args()
    results = asyncio.run(main_async(args))
    base = {r["clients"]: r["rows_per_s"] for r in results if r["degree"] == 1}
    print(f"cores available: {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}")
    print(f"{'clients':>7} {'stages':>6} {'micro':>5} {'rows/s':>9} {'vs 1 stage':>10} {'Util':>6}")
    for r in results:
        ratio = r["rows_per_s"] / base[r["clients"]]
        print(
            f"{r['clients']:>7} {r['degree']:>6} {r['micro_batches']:>5} {r['rows_per_s']:>9.1f} {ratio:>10.2f} "
            f"{r['util']:>6.2f}"
        )


if __name__ == "__main__":
    main()
