#!/usr/bin/env python3
"""Memory of ``servekit serve`` with the demo models: idle, after N requests, and over a soak at a fixed rate.

``python benchmarks/memory_bench.py [--requests 200000] [--soak-seconds 120] [--soak-rate 500]``:
1. serves every demo model (``servekit demo``'s repository, models.config) and records RSS and PSS idle once
   they are loaded;
2. sends ``--requests`` one-row requests (wrk, c=16, closed loop, rotating over the demo's ONNX, sklearn and
   handler models in --chunk-seconds runs) and records memory after each run, so growth shows as a curve;
3. soaks at ``--soak-rate`` requests/s (``servekit bench --rate``, open loop) for ``--soak-seconds``, sampling
   memory and the server's open sockets every ``--sample-seconds``; reports the first and last sample and the
   least-squares slope. ``--soak-rounds N`` soaks N times on the same process: growth that a first round shows and
   later rounds do not is warm-up (a high-water mark), growth in every round is a leak. After each round the
   server runs ``malloc_trim(0)`` and RSS is read again: what that gives back was free memory the allocator kept.
   ``--trace F`` also traces Python allocations in the server (tracemalloc, F frames) and prints the largest
   differences by file and line between the ends of consecutive rounds.
The server runs as ``benchmarks/memory_trace_serve.py serve ...`` (the same CLI, with those two probes on signals).
Loopback only, bounded by its arguments. Prints a markdown report; ``--out`` also writes it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
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


def sockets(pid: int) -> int:
    """Open sockets of the server (the listening one included): one per client connection it still holds."""
    fds = Path(f"/proc/{pid}/fd")
    count = 0
    for fd in fds.iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:  # closed while we looked
            pass
    return count


def probe(pid: int, trace_dir: Path, kind: str, n: int, timeout: float = 60.0) -> None:
    """Signal the server's probe (``snapshot``: SIGUSR1, ``trim``: SIGUSR2) and wait for its ``.done`` file."""
    os.kill(pid, signal.SIGUSR1 if kind == "snapshot" else signal.SIGUSR2)
    done = trace_dir / f"{kind}-{n}.done"
    deadline = time.monotonic() + timeout
    while not done.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"the server did not answer the {kind} probe in {timeout:.0f} s")
        time.sleep(0.05)


def settle(pid: int, idle_sockets: int, timeout: float = 60.0) -> int:
    """Wait until the server holds no more sockets than when idle (its answers sent, clients gone; a snapshot
    then counts no connection still open), at most ``timeout`` s; returns the sockets it holds."""
    deadline = time.monotonic() + timeout
    while (n := sockets(pid)) > idle_sockets and time.monotonic() < deadline:
        time.sleep(0.2)
    return n


def trace_diff(trace_dir: Path, before: int, after: int, top: int = 12) -> list[str]:
    """The largest tracemalloc differences by file and line between two snapshots, as markdown rows (snapshot n
    is taken at the end of round n - 1; snapshot 1 before the first round)."""
    old = tracemalloc.Snapshot.load(str(trace_dir / f"snapshot-{before}.pickle"))
    new = tracemalloc.Snapshot.load(str(trace_dir / f"snapshot-{after}.pickle"))
    stats = new.compare_to(old, "lineno")
    total = sum(st.size_diff for st in stats)
    rows = [
        f"Python heap (tracemalloc) from the end of round {before - 1} to the end of round {after - 1}: "
        f"{total / 1024:+,.1f} KiB in all; largest by line:",
        "",
        "| KiB | blocks | where |",
        "|---:|---:|---|",
    ]
    for st in sorted(stats, key=lambda st: abs(st.size_diff), reverse=True)[:top]:
        frame = st.traceback[0]
        rows.append(f"| {st.size_diff / 1024:+,.1f} | {st.count_diff:+,} | {_short(frame.filename)}:{frame.lineno} |")
    return rows


def _short(filename: str) -> str:
    for marker in ("site-packages/", "/src/", "/lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


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


def soak_round(args: argparse.Namespace, port: int, pid: int, rnd: int, trace_dir: Path) -> list[str]:
    """One open-loop soak; returns its report lines (samples, slope, sockets, the trim's effect, the client's view)."""
    samples: list[tuple[float, float, int]] = []
    stop = threading.Event()

    def sample() -> None:
        t0 = time.monotonic()
        while not stop.wait(args.sample_seconds):
            samples.append((time.monotonic() - t0, memory(pid)["rss_mib"], sockets(pid)))

    load = os.getloadavg()[0]
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    report = trace_dir / f"bench-{rnd}.json"
    bench = [sys.executable, "-m", "servekit.cli.main", "bench", "run", "--model", "iris", "--json", str(report)]
    bench += ["--url", f"http://127.0.0.1:{port}", "--rate", str(args.soak_rate), "--duration"]
    bench += [f"{args.soak_seconds:g}s"]
    subprocess.run(bench, check=True, stdout=subprocess.DEVNULL)
    stop.set()
    sampler.join()
    before = memory(pid)["rss_mib"]
    probe(pid, trace_dir, "trim", rnd)
    after = memory(pid)["rss_mib"]
    phase = json.loads(report.read_text())["phases"][0]
    lat = phase["latency_ms"] or {}
    if not samples:
        return [f"Round {rnd}: no samples (soak shorter than --sample-seconds)."]
    peak_sockets = max(s for _, _, s in samples)
    return [
        f"Round {rnd}: soak at {args.soak_rate:g} req/s for {args.soak_seconds:g} s (iris, open loop; load average "
        f"{load:.2f} before, {os.getloadavg()[0]:.2f} after): RSS {samples[0][1]:.1f} MiB at {samples[0][0]:.0f} s, "
        f"{samples[-1][1]:.1f} MiB at {samples[-1][0]:.0f} s (max {max(v for _, v, _ in samples):.1f}), "
        f"least-squares slope {slope_mib_per_min([(t, v) for t, v, _ in samples]):+.2f} MiB/min over "
        f"{len(samples)} samples; server sockets {samples[0][2]} at the start, at most {peak_sockets}, "
        f"{samples[-1][2]} at the end; after malloc_trim(0) RSS {before:.1f} -> {after:.1f} MiB. Client: "
        f"{phase['ok']:,} ok of {phase['requests']:,}, {phase['dropped']:,} dropped, errors {phase['errors'] or 0}, "
        f"p50 {lat.get('p50', float('nan')):.2f} ms, p99 {lat.get('p99', float('nan')):.1f} ms, max "
        f"{lat.get('max', float('nan')):.0f} ms.",
        "",
        f"Round {rnd} samples (s: RSS MiB / sockets): "
        + ", ".join(f"{t:.0f}: {v:.1f}/{n}" for t, v, n in samples[:: max(1, len(samples) // 24)]),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200_000)
    parser.add_argument("--chunk-seconds", type=float, default=10.0)
    parser.add_argument("--soak-seconds", type=float, default=120.0)
    parser.add_argument("--soak-rate", type=float, default=500.0)
    parser.add_argument("--sample-seconds", type=float, default=5.0)
    parser.add_argument("--soak-rounds", type=int, default=1, help="soaks on the same process, one after another")
    parser.add_argument(
        "--trace", type=int, default=0, help="tracemalloc frames in the server (0: off; it slows the server)"
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from servekit.tools.demo.build import build_demo

    work = Path(tempfile.mkdtemp(prefix="servekit-memory-bench-"))
    config_file = build_demo(work / "demo")  # the models.config it wrote
    port = free_port()
    trace_dir = work / "trace"
    cmd = [sys.executable, str(HERE / "memory_trace_serve.py"), "serve", "--model_config_file", str(config_file)]
    cmd += ["--rest_api_port", str(port), "--file_system_poll_wait_seconds", "0", "--log_level", "warning"]
    env = {"SERVEKIT_MEMTRACE_DIR": str(trace_dir)} | (
        {"SERVEKIT_MEMTRACE_FRAMES": str(args.trace)} if args.trace else {}
    )
    lines = [
        "# Memory of servekit serve (demo models)",
        "",
        f"`python benchmarks/memory_bench.py --requests {args.requests} --soak-seconds {args.soak_seconds:g} "
        f"--soak-rate {args.soak_rate:g} --soak-rounds {args.soak_rounds} --trace {args.trace}` on "
        f"{machine()['date']}: {machine()['cpu']}, {machine()['cores']} cores, load average "
        f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start.",
        "",
    ]
    with server(cmd, port, "/v2/health/ready", env=env, log=work / "serve.log") as proc:
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
        snapshots = 0
        idle_sockets = sockets(proc.pid)
        if args.trace:
            probe(proc.pid, trace_dir, "snapshot", snapshots := snapshots + 1)
        for rnd in range(1, args.soak_rounds + 1 if args.soak_seconds > 0 else 1):
            lines += ["", *soak_round(args, port, proc.pid, rnd, trace_dir)]
            print("\n".join(lines[-3:]), flush=True)
            if args.trace:
                held = settle(proc.pid, idle_sockets)
                probe(proc.pid, trace_dir, "snapshot", snapshots := snapshots + 1)
                lines += ["", f"Snapshot {snapshots} taken with {held} server sockets open (idle: {idle_sockets})."]
                if snapshots > 2:  # the first round's is warm-up; diff each later round against the one before
                    lines += ["", *trace_diff(trace_dir, snapshots - 1, snapshots)]
                    print("\n".join(lines[-16:]), flush=True)
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
