#!/usr/bin/env python3
"""Memory of ``servekit serve`` with the demo models: idle, after N requests, and over a soak at a fixed rate.

``python benchmarks/memory_bench.py [--requests 200000] [--soak-seconds 120] [--soak-rate 500]``:
1. serves every demo model (``servekit demo``'s repository, models.config) and records RSS and PSS idle once
   they are loaded;
2. sends ``--requests`` one-row requests (wrk, c=16, closed loop, rotating over the demo's ONNX, sklearn and
   handler models in --chunk-seconds runs) and records memory after each run, so growth shows as a curve;
3. soaks at ``--soak-rate`` requests/s (``servekit bench --rate``, open loop) for ``--soak-seconds``, sampling
   memory every ``--sample-seconds``; reports the first and last sample and the least-squares slope.
Loopback only, bounded by its arguments. Prints a markdown report; ``--out`` also writes it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import free_port, machine, server, wrk  # noqa: E402

# (model, body): one row each, the shapes the demo models take.
TARGETS = (
    ("iris", {"instances": [[5.9, 3.0, 4.2, 1.5]]}),
    ("iris_sklearn", {"instances": [[5.9, 3.0, 4.2, 1.5]]}),
    ("diabetes", {"instances": [[0.03, 0.05, 0.06, 0.02, -0.04, -0.03, -0.04, 0.0, 0.02, -0.02]]}),
)


def memory(pid: int) -> dict[str, float]:
    """RSS and PSS in MiB (PSS from smaps_rollup: shared library pages split among their users)."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            out["rss_mib"] = int(line.split()[1]) / 1024
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            out["pss_mib"] = int(line.split()[1]) / 1024
    return out


def served(port: int) -> float:
    """Requests the server has answered (its own counter)."""
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return sum(float(m.group(1)) for m in re.finditer(r"^servekit_requests_total{[^}]*} ([\d.e+]+)", text, re.M))


def slope_mib_per_min(samples: list[tuple[float, float]]) -> float:
    n = len(samples)
    if n < 2:
        return 0.0
    mt = sum(t for t, _ in samples) / n
    mv = sum(v for _, v in samples) / n
    den = sum((t - mt) ** 2 for t, _ in samples)
    return 60 * sum((t - mt) * (v - mv) for t, v in samples) / den if den else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--chunk-seconds", type=float, default=10.0)
    parser.add_argument("--soak-seconds", type=float, default=120.0)
    parser.add_argument("--soak-rate", type=float, default=500.0)
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from servekit.demo.build import build_demo

    work = Path(tempfile.mkdtemp(prefix="servekit-memory-bench-"))
    config_file = build_demo(work / "demo")  # the models.config it wrote
    port = free_port()
    cmd = [sys.executable, "-m", "servekit.cli.main", "serve", "--model_config_file", str(config_file)]
    cmd += ["--rest_api_port", str(port), "--file_system_poll_wait_seconds", "0", "--log_level", "warning"]
    lines = [
        "# Memory of servekit serve (demo models)",
        "",
        f"`python benchmarks/memory_bench.py --requests {args.requests} --soak-seconds {args.soak_seconds:g} "
        f"--soak-rate {args.soak_rate:g}` on {machine()['date']}: {machine()['cpu']}, {machine()['cores']} cores.",
        "",
    ]
    with server(cmd, port, "/v2/health/ready", log=work / "serve.log") as proc:
        for model, payload in TARGETS:  # every model answers once before "idle" is taken
            r = requests.post(f"http://127.0.0.1:{port}/v1/models/{model}:predict", json=payload, timeout=10)
            r.raise_for_status()
        idle = memory(proc.pid)
        lines += [f"Idle, models loaded: RSS {idle['rss_mib']:.1f} MiB, PSS {idle['pss_mib']:.1f} MiB.", ""]
        lines += ["| requests served | RSS MiB | PSS MiB |", "|---:|---:|---:|"]
        lines.append(f"| {served(port):,.0f} | {idle['rss_mib']:.1f} | {idle['pss_mib']:.1f} |")
        i = 0
        while served(port) < args.requests:
            model, payload = TARGETS[i % len(TARGETS)]
            wrk(f"http://127.0.0.1:{port}/v1/models/{model}:predict", json.dumps(payload), 16, args.chunk_seconds)
            m = memory(proc.pid)
            lines.append(f"| {served(port):,.0f} | {m['rss_mib']:.1f} | {m['pss_mib']:.1f} |")
            print(lines[-1], flush=True)
            i += 1
        samples: list[tuple[float, float]] = []
        stop = threading.Event()

        def sample() -> None:
            t0 = time.monotonic()
            while not stop.wait(args.sample_seconds):
                samples.append((time.monotonic() - t0, memory(proc.pid)["rss_mib"]))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        bench = [sys.executable, "-m", "servekit.cli.main", "bench", "run", "--model", "iris"]
        bench += ["--url", f"http://127.0.0.1:{port}", "--rate", str(args.soak_rate), "--duration"]
        bench += [f"{args.soak_seconds:g}s"]
        subprocess.run(bench, check=True, stdout=subprocess.DEVNULL)
        stop.set()
        sampler.join()
    if samples:
        lines += [
            "",
            f"Soak at {args.soak_rate:g} req/s for {args.soak_seconds:g} s (iris, open loop): RSS {samples[0][1]:.1f} "
            f"MiB at {samples[0][0]:.0f} s, {samples[-1][1]:.1f} MiB at {samples[-1][0]:.0f} s, least-squares slope "
            f"{slope_mib_per_min(samples):+.2f} MiB/min over {len(samples)} samples.",
            "",
            "Soak samples (s: RSS MiB): "
            + ", ".join(f"{t:.0f}: {v:.1f}" for t, v in samples[:: max(1, len(samples) // 20)]),
        ]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
