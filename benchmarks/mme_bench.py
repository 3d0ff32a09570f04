#!/usr/bin/env python3
"""Multi-model endpoint under Zipf traffic (issue 12's measure): ``--models`` small models behind one endpoint whose
one instance has memory for about ``--fit`` of them; each request picks a model from a Zipf distribution.

    python benchmarks/mme_bench.py [--models 1000] [--fit 100] [--requests 4000] [--zipf 1.1] [--concurrency 4]

Each model is an ``inference.py`` handler holding ``--ballast-mb`` of resident memory, so the instance's memory
really runs short: the instance type's memory is the empty instance's measured resident memory plus ``--fit``
times one model's measured footprint, over the 0.85 share a multi-model instance keeps for itself. Every request
is classified by the gateway's ``x-servekit-model-cache: hit|miss`` answer header. Reports the hit ratio, client
latency p50/p99 of hits and of misses, the models loaded and unloaded (the instance's own counts), and the failed
requests (goal 0). Loopback, boto3 clients (one per thread), closed loop.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import textwrap
import threading
import time
from collections import OrderedDict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from servekit.testing.hosting import UpProcess  # noqa: E402

HANDLER = textwrap.dedent(
    """
    import json

    def model_fn(model_dir):
        with open(f"{model_dir}/factor.txt") as f:
            factor = float(f.read())
        return factor, b"x" * int(BALLAST_MB * 2**20)

    def transform_fn(model, data, content_type, accept):
        return json.dumps({"out": [x * model[0] for x in json.loads(data)]}), "application/json"
    """
)


def build_models(prefix: Path, n: int, ballast_mb: float) -> None:
    handler = HANDLER.replace("BALLAST_MB", repr(ballast_mb))
    for i in range(n):
        d = prefix / f"customer-{i}"
        (d / "code").mkdir(parents=True)
        (d / "code" / "inference.py").write_text(handler)
        (d / "factor.txt").write_text(str(i))


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]  # nearest rank


def lru_hit_ratio(sequence: list[int], capacity: int) -> float:
    """What an ideal least-recently-used cache of ``capacity`` models would hit on the same sequence: the yardstick
    for the measured ratio (the instance's capacity is in bytes, not models, so it can hold a few more or less)."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = 0
    for key in sequence:
        if key in cache:
            hits += 1
            cache.move_to_end(key)
        else:
            cache[key] = None
            if len(cache) > capacity:
                cache.popitem(last=False)
    return hits / len(sequence) if sequence else 0.0


def zipf_weights(n: int, s: float) -> list[float]:
    return [1.0 / (k**s) for k in range(1, n + 1)]


def instance_logs(up: UpProcess) -> str:
    return "".join(p.read_text(errors="replace") for p in (up.home / "instances").glob("*.log"))


def deploy(up: UpProcess, prefix: Path, instance_type: str) -> None:
    sm = up.sm()
    sm.create_model(
        ModelName="mme", PrimaryContainer={"Image": "servekit", "Mode": "MultiModel", "ModelDataUrl": str(prefix)}
    )
    sm.create_endpoint_config(
        EndpointConfigName="mme-cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "mme", "InitialInstanceCount": 1, "InstanceType": instance_type}
        ],
    )
    sm.create_endpoint(EndpointName="mme", EndpointConfigName="mme-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="mme", WaiterConfig={"Delay": 1, "MaxAttempts": 120})


def measure_sizes(work: Path, prefix: Path) -> tuple[float, float]:
    """(empty instance MiB, one model's footprint MiB) from a probe endpoint with no memory limit."""
    types = work / "probe-types.yaml"
    types.write_text("instance_types:\n  - name: ml.probe\n    vcpus: 1\n    memory_gib: 64\n    price_per_hour: 0\n")
    up = UpProcess(work / "probe-home", "--instance-types", str(types))
    up.start()
    try:
        deploy(up, prefix, "ml.probe")
        pid_line = [ln for ln in instance_logs(up).splitlines() if "Started server process" in ln]
        pid = int(pid_line[-1].rsplit("[", 1)[1].split("]")[0]) if pid_line else None
        empty = _rss_mib(pid) if pid else 100.0
        rt = up.rt()
        rt.invoke_endpoint(EndpointName="mme", Body=b"[1]", ContentType="application/json", TargetModel="customer-1")
        footprints = [
            int(ln.rsplit("(", 1)[1].split(" ")[0]) / 2**20
            for ln in instance_logs(up).splitlines()
            if "servekit.serving.core.multi_model: loaded" in ln
        ]
        return empty, (footprints[-1] if footprints else 1.0)
    finally:
        up.stop()


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=int, default=1000)
    ap.add_argument("--fit", type=int, default=100, help="models the instance's memory should hold")
    ap.add_argument("--ballast-mb", type=float, default=2.0)
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--zipf", type=float, default=1.1)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out", type=Path, default=None, help="append the result table to this markdown file")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="servekit-mme-bench-"))
    prefix = work / "models"
    build_models(prefix, args.models, args.ballast_mb)
    empty_mib, model_mib = measure_sizes(work, prefix)
    memory_mib = (empty_mib + args.fit * model_mib) / 0.85
    types = work / "types.yaml"
    types.write_text(
        "instance_types:\n  - name: ml.mme.bench\n    vcpus: 1\n"
        f"    memory_gib: {memory_mib / 1024:.4f}\n    price_per_hour: 0\n"
    )
    up = UpProcess(work / "home", "--instance-types", str(types))
    up.start()
    try:
        deploy(up, prefix, "ml.mme.bench")
        rng = random.Random(args.seed)
        weights = zipf_weights(args.models, args.zipf)
        targets = rng.choices(range(args.models), weights=weights, k=args.requests)
        hits: list[float] = []
        misses: list[float] = []
        failures: list[str] = []
        lock = threading.Lock()
        queue = list(enumerate(targets))

        def worker() -> None:
            rt = up.rt()
            while True:
                with lock:
                    if not queue:
                        return
                    _, i = queue.pop()
                began = time.perf_counter()
                try:
                    r = rt.invoke_endpoint(
                        EndpointName="mme", Body=b"[1.0]", ContentType="application/json", TargetModel=f"customer-{i}"
                    )
                    out = json.loads(r["Body"].read())["out"][0]
                    took = time.perf_counter() - began
                    if out != float(i):
                        raise AssertionError(f"customer-{i} answered {out}")
                    kind = r["ResponseMetadata"]["HTTPHeaders"].get("x-servekit-model-cache")
                    with lock:
                        (hits if kind == "hit" else misses).append(took)
                except Exception as exc:  # counted and reported: the goal is none
                    with lock:
                        failures.append(repr(exc)[:200])

        began = time.perf_counter()
        threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - began
        logs = instance_logs(up)
        loads = sum("servekit.serving.core.multi_model: loaded" in ln for ln in logs.splitlines())
        unloads = sum("servekit.serving.core.manager" in ln and "left the config" in ln for ln in logs.splitlines())
        distinct = len(set(targets))
    finally:
        up.stop()

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v * 1e3:.1f}"

    total = len(hits) + len(misses)
    rows = [
        ("models behind the endpoint / distinct requested", f"{args.models} / {distinct}"),
        (
            "instance memory (MiB): empty + fit x model / 0.85",
            f"{memory_mib:.0f} ({empty_mib:.0f} + {args.fit} x {model_mib:.1f})",
        ),
        ("requests, concurrency, Zipf s", f"{args.requests}, {args.concurrency}, {args.zipf}"),
        ("throughput (req/s)", f"{total / wall:.0f}"),
        ("hit ratio", f"{len(hits) / total:.3f}" if total else "-"),
        (f"ideal LRU of {args.fit} models, same sequence", f"{lru_hit_ratio(list(reversed(targets)), args.fit):.3f}"),
        ("hit latency p50 / p99 (ms)", f"{ms(percentile(hits, 50))} / {ms(percentile(hits, 99))}"),
        ("miss latency p50 / p99 (ms)", f"{ms(percentile(misses, 50))} / {ms(percentile(misses, 99))}"),
        ("loads / unloads on the instance", f"{loads} / {unloads}"),
        ("failed requests", str(len(failures))),
    ]
    table = "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)
    print(table)
    if failures:
        print("first failures:", *failures[:5], sep="\n  ")
    if args.out is not None:
        command = "python benchmarks/mme_bench.py " + " ".join(sys.argv[1:])
        with args.out.open("a") as f:
            f.write(f"\n## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} ({os.cpu_count()} CPUs)\n\n")
            f.write(f"`{command}`\n\n{table}\n")


if __name__ == "__main__":
    main()
