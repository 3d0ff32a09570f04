#!/usr/bin/env python3
"""Does `servekit serve` give back the memory large request bodies took? RSS of the serving process (its own, not
its decode child's) idle, right after N large `:predict` requests, and while it settles afterwards.

    python benchmarks/large_body_rss_bench.py [--mb 15] [--requests 10] [--settle-s 5] [--path predict|invocations]

Issue 30, item 5: memory returns to within 20% of its idle level once large-body traffic stops. Run it against
two trees (PYTHONPATH=<other>/src) to compare. Loopback only; every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from models import INPUT_WIDTH, build_all  # noqa: E402

from servekit._utils.processes import free_port, rss_bytes  # noqa: E402

PATHS = {"predict": "/v1/models/tiny:predict", "invocations": "/invocations"}


def own_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


def run(model_dir: Path, mb: int, n: int, settle_s: float, path: str) -> dict[str, object]:
    port = free_port()
    cmd = [
        sys.executable, "-m", "servekit.cli.main", "serve", "--model_name", "tiny", "--model_base_path", str(model_dir),
        "--host", "127.0.0.1", "--rest_api_port", str(port), "--max_request_bytes", str((mb + 8) << 20),
        "--file_system_poll_wait_seconds", "0",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{url}/v2/health/ready", timeout=1).status_code == 200:
                    break
            except (requests.ConnectionError, requests.Timeout):  # still starting
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not become ready")
            time.sleep(0.1)
        rows = max(1, (mb << 20) // (INPUT_WIDTH["tiny"] * 9))
        values = np.round(np.random.default_rng(0).random((rows, INPUT_WIDTH["tiny"])), 5).tolist()
        body = json.dumps({"instances": values} if path == "predict" else values).encode()
        with requests.Session() as s:  # a few small requests first: idle means warm, not freshly started
            for _ in range(5):
                s.post(url + PATHS[path], json={"instances": [[0.1] * INPUT_WIDTH["tiny"]]}, timeout=30)
        time.sleep(1.0)  # let the idle process settle before its reading
        idle = own_rss_mb(proc.pid)
        statuses: list[int] = []
        peak = idle
        t0 = time.perf_counter()
        with requests.Session() as s:
            for _ in range(n):
                r = s.post(url + PATHS[path], data=body, headers={"Content-Type": "application/json"}, timeout=300)
                statuses.append(r.status_code)
                peak = max(peak, own_rss_mb(proc.pid))
        elapsed = time.perf_counter() - t0
        after = own_rss_mb(proc.pid)
        settled: list[float] = []
        settle_end = time.monotonic() + settle_s
        while time.monotonic() < settle_end:  # sampled, not waited on: the reading is the last one
            time.sleep(0.5)
            settled.append(round(own_rss_mb(proc.pid), 1))
        final = settled[-1] if settled else after
        return {
            "path": PATHS[path],
            "body_mb": round(len(body) / 2**20, 1),
            "requests": n,
            "statuses": sorted(set(statuses)),
            "seconds": round(elapsed, 2),
            "rss_idle_mb": round(idle, 1),
            "rss_peak_sampled_mb": round(peak, 1),
            "rss_right_after_mb": round(after, 1),
            "rss_settled_mb": final,
            "settled_over_idle": round(final / idle, 3),
            "settle_samples_mb": settled,
            "rss_with_children_mb": round((rss_bytes(proc.pid) or 0) / 2**20, 1),
        }
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=15)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--settle-s", type=float, default=5.0)
    ap.add_argument("--path", choices=sorted(PATHS), nargs="+", default=["predict", "invocations"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_all(Path(tmp))["tiny"]
        for path in args.path:
            print(json.dumps(run(model_dir, args.mb, args.requests, args.settle_s, path)), flush=True)


if __name__ == "__main__":
    main()
