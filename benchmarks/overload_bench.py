#!/usr/bin/env python3
"""Goodput under overload (issue 34, goal 1): a compute-bound ONNX MLP (32 -> 1024 -> 1024 -> 1, 64 rows a
request) served by ``servekit serve``, driven at offered concurrency 16 ... 800 in one run per server.

    flock /tmp/servekit-bench.lock python3 benchmarks/overload_bench.py [--steps 16,32,64,128,200,400,800]
        [--duration 5] [--modes unbatched,batched] [--workers 1,2] [--out /tmp/overload.json]

Each step is closed loop (a client sends its next request as soon as it has an answer, shed or not): ``wrk``
(one thread) holds ``c - probes`` connections, and a probe in this process holds ``probes = max(4, c // 8)``
more, timing every request it sends by its status. wrk's own latency histogram mixes sheds and successes;
the probe's connections are ordinary clients of the same server, so their samples are a fair sample of both.
Per step: goodput (2xx/s, wrk + probe), shed/s (503/429), p50/p99 of successes and of sheds (probe; a shed of a
request sent right after a 503 on the same connection is reported apart: the server holds those for Retry-After),
sheds without Retry-After (probe), socket errors and timeouts (wrk's and the probe's, 2 s like wrk's
default), server CPU per success (utime+stime of the server and its workers over the step) and RSS after the
step, and goodput(c)/goodput(32). The load average is recorded before and after every server's curve.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import psutil
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from run import free_port, machine, servekit_cmd  # noqa: E402

WIDTHS = [32, 1024, 1024, 1]
ROWS = 64
REQUEST_TIMEOUT_S = 2.0  # wrk's default socket timeout; the probe uses the same
SHED = (429, 503)


def build_mlp(base: Path, seed: int = 34) -> Path:
    """``<base>/1/model.onnx``: Gemm+Relu layers of WIDTHS with seeded random weights."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i, (a, b) in enumerate(itertools.pairwise(WIDTHS)):
        w = (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(np.zeros(b, np.float32), f"b{i}")]
        nodes.append(helper.make_node("Gemm", [prev, f"w{i}", f"b{i}"], [f"h{i}"]))
        if i < len(WIDTHS) - 2:
            nodes.append(helper.make_node("Relu", [f"h{i}"], [f"r{i}"]))
            prev = f"r{i}"
        else:
            nodes.append(helper.make_node("Identity", [f"h{i}"], ["y"]))
    graph = helper.make_graph(
        nodes,
        "overload_mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", WIDTHS[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", WIDTHS[-1]])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    (base / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(base / "1" / "model.onnx"))
    return base


def request_body(seed: int = 7) -> bytes:
    rows = np.random.default_rng(seed).standard_normal((ROWS, WIDTHS[0])).round(4)
    return json.dumps({"instances": rows.tolist()}).encode()


# ---- the probe: timed closed-loop connections ---------------------------------------------------------------
class Probe:
    def __init__(self, port: int, path: str, body: bytes) -> None:
        self.port = port
        self.head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        self.body = body
        self.ok: list[float] = []
        self.shed: list[float] = []  # sheds of requests sent after a 200 or on a new connection
        self.shed_after_shed: list[float] = []  # sent right after a 503: the server held them for Retry-After
        self.other: dict[int, int] = {}
        self.no_retry_after = 0
        self.timeouts = 0
        self.errors = 0

    async def _connection(self, stop: float) -> None:
        reader: asyncio.StreamReader | None = None
        writer: asyncio.StreamWriter | None = None
        loop = asyncio.get_running_loop()
        after_shed = False
        while loop.time() < stop:
            try:
                if writer is None:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection("127.0.0.1", self.port), REQUEST_TIMEOUT_S
                    )
                assert reader is not None
                t0 = time.perf_counter()
                writer.write(self.head + self.body)
                status, retry_after, close = await asyncio.wait_for(self._answer(reader), REQUEST_TIMEOUT_S)
                ms = (time.perf_counter() - t0) * 1e3
                if loop.time() > stop:
                    break  # answered after the step ended: not counted, as wrk does
                if 200 <= status < 300:
                    self.ok.append(ms)
                elif status in SHED:
                    (self.shed_after_shed if after_shed else self.shed).append(ms)
                    self.no_retry_after += not retry_after
                else:
                    self.other[status] = self.other.get(status, 0) + 1
                after_shed = status in SHED
                if close:
                    writer.close()
                    writer = None
                    after_shed = False
            except TimeoutError:
                self.timeouts += 1
                after_shed = False
                if writer is not None:
                    writer.close()
                writer = None
            except (OSError, asyncio.IncompleteReadError, ValueError):
                self.errors += 1
                after_shed = False
                if writer is not None:
                    writer.close()
                writer = None
                await asyncio.sleep(0.01)
        if writer is not None:
            writer.close()

    @staticmethod
    async def _answer(reader: asyncio.StreamReader) -> tuple[int, bool, bool]:
        head = (await reader.readuntil(b"\r\n\r\n")).lower()
        status = int(head[9:12])
        m = re.search(rb"content-length: *(\d+)", head)
        if m:
            await reader.readexactly(int(m.group(1)))
        return status, b"retry-after:" in head, b"connection: close" in head

    async def run(self, connections: int, seconds: float) -> None:
        stop = asyncio.get_running_loop().time() + seconds
        await asyncio.gather(*(self._connection(stop) for _ in range(connections)))


# ---- wrk ----------------------------------------------------------------------------------------------------
def wrk_cmd(url: str, body: bytes, connections: int, seconds: int) -> tuple[list[str], Path]:
    script = Path(tempfile.mkstemp(suffix=".lua")[1])
    script.write_text(
        f'wrk.method = "POST"\nwrk.body = {json.dumps(body.decode())}\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    return ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "-s", str(script), url], script


def parse_wrk(text: str) -> dict[str, int]:
    def num(pattern: str) -> int:
        m = re.search(pattern, text)
        return int(m.group(1)) if m else 0

    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    connect, read, write, timeout = (int(x) for x in errors.groups()) if errors else (0, 0, 0, 0)
    return {
        "requests": num(r"(\d+) requests in"),
        "non2xx": num(r"Non-2xx or 3xx responses:\s+(\d+)"),
        "connect_errors": connect,
        "read_errors": read,
        "write_errors": write,
        "timeouts": timeout,
    }


# ---- the server ---------------------------------------------------------------------------------------------
def server_cpu(proc: psutil.Process) -> tuple[float, float]:
    """CPU seconds (user + system) and RSS MiB of the server and every process under it."""
    cpu = rss = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            t = p.cpu_times()
            cpu += t.user + t.system
            rss += p.memory_info().rss / 2**20
    return cpu, rss


@contextlib.contextmanager
def serve(model: Path, port: int, extra: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    cmd = servekit_cmd(model, "mlp", port, *extra)
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + 120
            url = f"http://127.0.0.1:{port}/v1/models/mlp:predict"
            body = request_body()
            import requests

            while True:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"{' '.join(cmd)} did not start; see {log}")
                with contextlib.suppress(requests.RequestException):
                    if requests.post(url, data=body, timeout=5).status_code == 200:
                        break
                time.sleep(0.3)
            yield proc
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def step(port: int, body: bytes, c: int, seconds: int, server: psutil.Process) -> dict[str, Any]:
    probes = max(4, c // 8)
    url = f"http://127.0.0.1:{port}/v1/models/mlp:predict"
    cmd, script = wrk_cmd(url, body, c - probes, seconds)
    probe = Probe(port, "/v1/models/mlp:predict", body)
    cpu0, _ = server_cpu(server)
    t0 = time.perf_counter()
    wrk = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    asyncio.run(probe.run(probes, seconds))
    text, _ = wrk.communicate()
    wall = time.perf_counter() - t0
    cpu1, rss = server_cpu(server)
    script.unlink()
    w = parse_wrk(text)
    ok = w["requests"] - w["non2xx"] + len(probe.ok)
    # wrk counts every non-2xx as one; the probe tells what those are (all sheds in these runs: see `other`).
    shed = w["non2xx"] + len(probe.shed) + len(probe.shed_after_shed)
    return {
        "c": c,
        "probes": probes,
        "goodput": ok / seconds,
        "shed_per_s": shed / seconds,
        "ok_p50_ms": percentile(probe.ok, 50),
        "ok_p99_ms": percentile(probe.ok, 99),
        "shed_p50_ms": percentile(probe.shed, 50),
        "shed_p99_ms": percentile(probe.shed, 99),
        "probe_ok": len(probe.ok),
        "shed_after_shed_p50_ms": percentile(probe.shed_after_shed, 50),
        "probe_shed": len(probe.shed),
        "probe_shed_after_shed": len(probe.shed_after_shed),
        "probe_other": probe.other,
        "shed_without_retry_after": probe.no_retry_after,
        "timeouts": w["timeouts"] + probe.timeouts,
        "probe_timeouts": probe.timeouts,
        "probe_after_shed_max_ms": max(probe.shed_after_shed, default=float("nan")),
        "socket_errors": w["connect_errors"] + w["read_errors"] + w["write_errors"] + probe.errors,
        "cpu_ms_per_ok": (cpu1 - cpu0) * 1e3 / ok if ok else float("nan"),
        "server_cpu_share": (cpu1 - cpu0) / wall,
        "rss_mib": rss,
    }


def curve(model: Path, mode: str, workers: int, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    port = free_port()
    extra = ["--enable_batching"] if mode == "batched" else []
    if workers > 1:
        extra += ["--workers", str(workers)]
    extra += args.server_args.split()
    body = request_body()
    label = f"{mode} workers={workers}"
    with serve(model, port, extra, logs / f"{mode}-{workers}.log") as proc:
        server = psutil.Process(proc.pid)
        step(port, body, 32, 2, server)  # warm-up: the model's first runs, the workers' connections
        load_before = Path("/proc/loadavg").read_text().split()[:3]
        steps = []
        for c in args.steps:
            r = step(port, body, c, args.duration, server)
            steps.append(r)
            print(f"  {label} c={c}: {fmt(r)}", flush=True)
        load_after = Path("/proc/loadavg").read_text().split()[:3]
    base = next((s["goodput"] for s in steps if s["c"] == 32), None)
    for s in steps:
        s["ratio_to_c32"] = s["goodput"] / base if base else float("nan")
    return {
        "mode": mode,
        "workers": workers,
        "server_args": extra,
        "load_before": load_before,
        "load_after": load_after,
        "steps": steps,
    }


def fmt(r: dict[str, Any]) -> str:
    return (
        f"goodput {r['goodput']:.0f}/s shed {r['shed_per_s']:.0f}/s ok p50 {r['ok_p50_ms']:.1f} p99 "
        f"{r['ok_p99_ms']:.1f} ms shed p50 {r['shed_p50_ms']:.2f} p99 {r['shed_p99_ms']:.2f} ms (after a 503: "
        f"{r['shed_after_shed_p50_ms']:.0f} ms), timeouts {r['timeouts']} errors "
        f"{r['socket_errors']}, cpu/ok {r['cpu_ms_per_ok']:.2f} ms, rss {r['rss_mib']:.0f} MiB"
    )


def table(res: dict[str, Any]) -> str:
    lines = [
        f"### {res['mode']}, workers {res['workers']} (`{' '.join(res['server_args'])}`; load "
        f"{' '.join(res['load_before'])} -> {' '.join(res['load_after'])})",
        "",
        "| c | goodput/s | x c=32 | shed/s | ok p50 ms | ok p99 ms | shed p50 / p99 ms | shed after a 503, p50 ms "
        "| timeouts | errors | CPU ms/ok | RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in res["steps"]:
        lines.append(
            f"| {s['c']} | {s['goodput']:.0f} | {s['ratio_to_c32']:.2f} | {s['shed_per_s']:.0f} | "
            f"{s['ok_p50_ms']:.1f} | {s['ok_p99_ms']:.1f} | {s['shed_p50_ms']:.2f} / {s['shed_p99_ms']:.2f} | "
            f"{s['shed_after_shed_p50_ms']:.0f} | {s['timeouts']} | "
            f"{s['socket_errors']} | {s['cpu_ms_per_ok']:.2f} | {s['rss_mib']:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", default="16,32,64,128,200,400,800")
    parser.add_argument("--duration", type=int, default=5, help="whole seconds per step")
    parser.add_argument("--modes", default="unbatched,batched")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--server-args", default="", help="extra `servekit serve` flags, space separated")
    parser.add_argument("--out", type=Path, help="JSON results")
    args = parser.parse_args()
    args.steps = [int(c) for c in args.steps.split(",")]
    work = Path(tempfile.mkdtemp(prefix="servekit-overload-"))
    model = build_mlp(work / "mlp")
    logs = work / "logs"
    logs.mkdir()
    results: dict[str, Any] = {
        "command": "python3 benchmarks/overload_bench.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "curves": [],
    }
    for mode in args.modes.split(","):
        for workers in (int(w) for w in args.workers.split(",")):
            res = curve(model, mode, workers, args, logs)
            results["curves"].append(res)
            print(table(res), "\n", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    print(f"logs: {logs}")


if __name__ == "__main__":
    main()
