#!/usr/bin/env python3
"""``servekit serve`` from two or more source trees (or with different flags) side by side, interleaved: wrk req/s,
p99 and the server process's CPU per request (all its threads, from /proc), one tiny-model row per request.

``python benchmarks/serve_ab_bench.py ROUNDS CONCURRENCY NAME=SRC[:serve flags] ...``, e.g.
``python benchmarks/serve_ab_bench.py 4 64 "off=src:--inline_run_limit_micros 0" on=src`` or, against a git
worktree of an older commit, ``base=/tmp/base/src head=src``; ``NAME=bare`` runs the bare Starlette app
(benchmarks/baselines/bare_app.py) and ``NAME=asgi@SRC`` servekit's app from SRC on the same plain uvicorn, without
``serve``'s connection guard (benchmarks/baselines/servekit_asgi.py); ``NAME=python@PYTHON`` runs the servekit
installed for another interpreter (a fresh virtualenv's default install, say). Each target is started with
``PYTHONPATH=SRC``, warmed 2 s, measured 4 s; the order alternates by round. CPU per request is steadier than
req/s on a shared machine, not immune to it. The model is built into a temporary folder (benchmarks/models.py
``tiny``).
"""

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import tiny

WORK = Path(tempfile.mkdtemp(prefix="servekit-serve-ab-"))
MODEL = WORK / "tiny"
tiny(MODEL / "1")
LUA = WORK / "post.lua"
LUA.write_text(
    'wrk.method = "POST"\nwrk.body = \'{"instances": [[1.0, 2.0, 3.0, 4.0]]}\'\n'
    'wrk.headers["Content-Type"] = "application/json"\n'
)
BASELINES = str(Path(__file__).resolve().parent / "baselines")
BODY = b'{"instances": [[1.0, 2.0, 3.0, 4.0]]}'
URL = "http://127.0.0.1:18501/v1/models/tiny:predict"


def cpu_seconds(pid: int) -> float:
    """User + system CPU of every thread of ``pid`` so far."""
    ticks = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def wrk(connections: int, seconds: int) -> tuple[float, int, str]:
    """req/s, requests done and the p99 latency as wrk prints it."""
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(LUA), URL]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    done = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1)  # type: ignore[union-attr]
    return rps, done, p99


def command(src: str, flags: str) -> tuple[list[str], dict[str, str]]:
    if src == "bare":
        cmd = [sys.executable, "-m", "uvicorn", "bare_app:app", "--port", "18501", "--loop", "uvloop", "--http"]
        return [*cmd, "httptools", "--no-access-log", "--log-level", "warning"], {"PYTHONPATH": BASELINES}
    if src.startswith("asgi@"):  # servekit's app on plain uvicorn, without serve's connection guard
        cmd = [sys.executable, "-m", "uvicorn", "servekit_asgi:app", "--port", "18501", "--loop", "uvloop", "--http"]
        env = {"PYTHONPATH": f"{BASELINES}:{src[5:]}", "SERVEKIT_BENCH_MODEL": str(MODEL), "SERVEKIT_BENCH_NAME": "tiny"}
        return [*cmd, "httptools", "--no-access-log", "--log-level", "warning"], env
    python, env = sys.executable, {"PYTHONPATH": src}
    if src.startswith("python@"):  # the servekit installed for that interpreter, nothing put before it
        python, env = src[7:], {}
    cmd = [python, "-m", "servekit.cli.main", "serve", "--model_name", "tiny", "--model_base_path"]
    return [*cmd, str(MODEL), "--rest_api_port", "18501", *flags.split()], env


def measure(name: str, spec: str, connections: int) -> tuple[float, float, str, int]:
    """req/s, CPU us per request, p99, and how often the server logged an inline move."""
    src, _, flags = spec.partition(":")
    cmd, env = command(src, flags)
    log = WORK / f"{name}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            cmd, env={**os.environ, **env}, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(urllib.request.Request(URL, BODY), timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        wrk(connections, 2)
        before = cpu_seconds(proc.pid)
        rps, done, p99 = wrk(connections, 4)
        per_request = (cpu_seconds(proc.pid) - before) / done * 1e6
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait()
    moves = sum("event loop (" in line or "back on the model" in line for line in log.read_text().splitlines())
    return rps, per_request, p99, moves


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rounds", type=int)
    parser.add_argument("connections", type=int)
    parser.add_argument("targets", nargs="+", help="NAME=SRC[:serve flags] or NAME=bare")
    args = parser.parse_args()
    targets = [t.split("=", 1) for t in args.targets]
    results: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in targets}
    for r in range(args.rounds):
        for name, spec in targets if r % 2 == 0 else targets[::-1]:
            rps, per_request, p99, moves = measure(name, spec, args.connections)
            results[name].append((rps, per_request))
            print(
                f"round {r + 1} {name:10s} {rps:8.0f} req/s {per_request:6.1f} us CPU/request p99 {p99} "
                f"inline moves {moves}",
                flush=True,
            )
    for name, got in results.items():
        rps = statistics.median(x[0] for x in got)
        cpu = statistics.median(x[1] for x in got)
        print(f"{name:10s} median {rps:8.0f} req/s {cpu:6.1f} us CPU/request")


if __name__ == "__main__":
    main()
