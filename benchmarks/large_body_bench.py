#!/usr/bin/env python3
"""Large bodies against `servekit serve`: how long health checks stall and how much memory the server takes while
one (or three concurrent) valid multi-megabyte `:predict` requests are decoded.

    python benchmarks/large_body_bench.py [--mb 50] [--concurrent 1 3]

A probe thread polls `/v2/health/live` back to back while the large requests run and reports its worst and p99
latency; RSS of the server is sampled from /proc. Run it against two trees (PYTHONPATH=<other>/src) to compare.
Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from models import INPUT_WIDTH, build_all  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    """RSS of ``pid`` and all its descendants (a decoding child process counts), in MiB."""
    total = 0.0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) / 1024
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                total += rss_mb(int(child))
    except (FileNotFoundError, ProcessLookupError):
        pass
    return total


def run(model_dir: Path, mb: int, concurrent: int) -> dict[str, float]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servekit.cli.main",
            "serve",
            "--model_name",
            "tiny",
            "--model_base_path",
            str(model_dir),
            "--rest_api_port",
            str(port),
            "--max_request_bytes",
            str((mb + 8) << 20),
            "--file_system_poll_wait_seconds",
            "0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.1)
        else:
            raise RuntimeError("server did not become ready")
        rows = max(1, (mb << 20) // (INPUT_WIDTH["tiny"] * 9))
        body = json.dumps(
            {"instances": np.round(np.random.default_rng(0).random((rows, INPUT_WIDTH["tiny"])), 5).tolist()}
        )
        idle_rss = rss_mb(proc.pid)
        stop = threading.Event()
        lat: list[float] = []
        peak = [idle_rss]

        def probe() -> None:
            with requests.Session() as s:
                while not stop.is_set():
                    t0 = time.perf_counter()
                    s.get(f"{url}/v2/health/live", timeout=60)
                    lat.append(time.perf_counter() - t0)
                    peak[0] = max(peak[0], rss_mb(proc.pid))

        def big(out: list[int]) -> None:
            out.append(
                requests.post(
                    f"{url}/v1/models/tiny:predict",
                    data=body,
                    timeout=300,
                    headers={"Content-Type": "application/json"},
                ).status_code
            )

        statuses: list[int] = []
        prober = threading.Thread(target=probe)
        prober.start()
        t0 = time.perf_counter()
        senders = [threading.Thread(target=big, args=(statuses,)) for _ in range(concurrent)]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        elapsed = time.perf_counter() - t0
        stop.set()
        prober.join()
        arr = np.array(lat) * 1e3
        return {
            "body_mb": round(len(body) / 2**20, 1),
            "concurrent": concurrent,
            "statuses": ",".join(map(str, sorted(statuses))),
            "seconds": round(elapsed, 2),
            "health_max_ms": round(float(arr.max()), 1),
            "health_p99_ms": round(float(np.percentile(arr, 99)), 1),
            "health_checks": len(arr),
            "rss_idle_mb": round(idle_rss),
            "rss_peak_mb": round(peak[0]),
            "rss_after_mb": round(rss_mb(proc.pid)),
        }
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=50)
    ap.add_argument("--concurrent", type=int, nargs="+", default=[1, 3])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_all(Path(tmp))["tiny"]
        for n in args.concurrent:
            print(json.dumps(run(model_dir, args.mb, n)))


if __name__ == "__main__":
    main()
