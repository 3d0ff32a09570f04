"""gRPC Predict vs REST :predict on the same servekit process and model, and vs a bare grpcio echo server.

    python benchmarks/grpc_bench.py [--seconds 3] [--rows 1 64] [--concurrency 1 64] [--serve-arg=--workers=2]
        [--server-env GRPC_POLL_STRATEGY=poll] [--connections 4] [--echo-uvloop] [--out benchmarks/GRPC_RESULTS.md]

Builds the demo iris ONNX model, starts ``servekit serve --port <grpc> --rest_api_port <rest>`` (one worker) and a
bare ``grpc.aio`` server whose Predict handler answers a prepared reply of the same size without decoding
anything (the ceiling of grpcio itself on this machine). Then, for one-row and 64-row requests at concurrency 1
and 64, runs a closed loop of asyncio clients for ``--seconds`` per cell and reports throughput and p50/p99.
Clients and servers share this machine's cores: the numbers say how the fronts compare here, not absolute limits.

Beside throughput each cell reports the server's CPU per answer (user + system time of the server's processes
over the cell, from /proc, divided by the answers): the client shares the cores, so req/s moves with whatever
else runs, while CPU per answer says what the server itself spends on one. ``--echo-uvloop`` adds a second bare
server on uvloop's event loop (the loop servekit runs), to separate the loop's share from servekit's own work.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import multiprocessing as mp
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import numpy as np
import orjson

from servekit.serving.codecs.tensor_proto import fill_proto
from servekit.tools.demo.build import build_demo
from servekit.serving.protos.tensorflow_serving.apis import predict_pb2

PREDICT = "/tensorflow.serving.PredictionService/Predict"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rows(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.uniform(0.1, 7.0, size=(n, 4)).astype(np.float32)


def _request(rows: np.ndarray) -> bytes:
    req = predict_pb2.PredictRequest()
    req.model_spec.name = "iris"
    fill_proto(req.inputs["X"], rows)
    return bytes(req.SerializeToString())


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` and its descendants (``--workers N`` serves from child processes)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    pending = [pid]
    while pending:
        p = pending.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            for task in Path(f"/proc/{p}/task").iterdir():
                children = (task / "children").read_text().split()
                pending.extend(int(c) for c in children)
        except (OSError, ValueError):  # exited meanwhile
            continue
    return total


def _echo_main(port: int, uvloop_loop: bool = False) -> None:
    """A bare grpc.aio server: Predict answers a prepared reply (iris-sized outputs), nothing decoded."""

    replies: dict[int, bytes] = {}
    for n in (1, 64):
        resp = predict_pb2.PredictResponse()
        fill_proto(resp.outputs["probabilities"], np.zeros((n, 3), dtype=np.float32))
        fill_proto(resp.outputs["label"], np.zeros(n, dtype=np.int64))
        replies[n] = resp.SerializeToString()

    async def predict(request: bytes, context: Any) -> bytes:
        return replies[64] if len(request) > 200 else replies[1]

    async def serve() -> None:
        server = grpc.aio.server()
        handler = grpc.method_handlers_generic_handler(
            "tensorflow.serving.PredictionService", {"Predict": grpc.unary_unary_rpc_method_handler(predict)}
        )
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    if uvloop_loop:
        import uvloop

        uvloop.run(serve())
    else:
        asyncio.run(serve())


async def _closed_loop(call: Any, concurrency: int, seconds: float) -> tuple[int, list[float], int]:
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            try:
                await call()
            except Exception:
                errors += 1
                continue
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return len(latencies), latencies, errors


async def _bench(
    grpc_port: int,
    rest_port: int,
    echoes: dict[str, tuple[int, int]],
    server_pid: int,
    seconds: float,
    cells: tuple[tuple[int, ...], tuple[int, ...]] = ((1, 64), (1, 64)),
    connections: int = 1,
) -> list[dict[str, Any]]:
    """``echoes``: name -> (port, pid) of each bare server. ``connections``: gRPC channels per target, each its
    own HTTP/2 connection (a local subchannel pool), the clients spread over them; SO_REUSEPORT spreads
    connections, not streams, so ``--workers N`` needs several to use more than one worker."""
    results = []
    pids = {"servekit gRPC": server_pid, "servekit REST": server_pid, **{n: pid for n, (_, pid) in echoes.items()}}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        ports = {"servekit gRPC": grpc_port, **{n: port for n, (port, _) in echoes.items()}}
        own_connection = [("grpc.use_local_subchannel_pool", 1)]
        channels = {
            name: [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=own_connection) for _ in range(connections)]
            for name, port in ports.items()
        }
        for rows_n in cells[0]:
            rows = _rows(rows_n)
            payload = _request(rows)
            rest_body = orjson.dumps({"inputs": rows.tolist()})
            for concurrency in cells[1]:
                targets: dict[str, Any] = {}
                for name, chs in channels.items():
                    # raw bytes both ways: the client's decode cost is not timed
                    methods = itertools.cycle([ch.unary_unary(PREDICT) for ch in chs])

                    async def grpc_call(methods: Any = methods, payload: bytes = payload) -> None:
                        await next(methods)(payload, timeout=30)

                    targets[name] = grpc_call

                async def rest_call(rest_body: bytes = rest_body) -> None:
                    async with http.post(
                        f"http://127.0.0.1:{rest_port}/v1/models/iris:predict",
                        data=rest_body,
                        headers={"content-type": "application/json"},
                    ) as r:
                        await r.read()
                        if r.status != 200:
                            raise RuntimeError(r.status)

                targets["servekit REST"] = rest_call
                for name, call in targets.items():
                    await _closed_loop(call, concurrency, min(0.5, seconds))  # warm connections and caches
                    cpu0 = _cpu_seconds(pids[name])
                    n, lat, errors = await _closed_loop(call, concurrency, seconds)
                    cpu_s = _cpu_seconds(pids[name]) - cpu0
                    lat_ms = np.asarray(lat) * 1e3
                    results.append(
                        {
                            "target": name,
                            "rows": rows_n,
                            "c": concurrency,
                            "rps": n / seconds,
                            "p50": float(np.percentile(lat_ms, 50)) if n else float("nan"),
                            "p99": float(np.percentile(lat_ms, 99)) if n else float("nan"),
                            "errors": errors,
                            "cpu_us": cpu_s / n * 1e6 if n else float("nan"),
                        }
                    )
                    print(results[-1], flush=True)
        for chs in channels.values():
            for ch in chs:
                await ch.close()
    return results


def _wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"servekit exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit("servekit did not become ready")


def _table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| rows | c | target | req/s | p50 ms | p99 ms | errors | server CPU us/answer | x echo req/s |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        echo = next(
            e for e in results if e["target"] == "bare grpcio echo" and (e["rows"], e["c"]) == (r["rows"], r["c"])
        )
        ratio = r["rps"] / echo["rps"] if echo["rps"] else float("nan")
        lines.append(
            f"| {r['rows']} | {r['c']} | {r['target']} | {r['rps']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} | "
            f"{r['errors']} | {r['cpu_us']:.0f} | {ratio:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per cell")
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 64], help="rows per request (cells)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 64], help="clients (cells)")
    parser.add_argument(
        "--serve-arg", action="append", default=[], help="extra servekit serve argument, e.g. --serve-arg=--workers=2"
    )
    parser.add_argument(
        "--server-env", action="append", default=[], help="KEY=VALUE in servekit's environment (GRPC_POLL_STRATEGY)"
    )
    parser.add_argument("--connections", type=int, default=1, help="gRPC connections per target (for --workers)")
    parser.add_argument("--echo-uvloop", action="store_true", help="also measure a bare grpc.aio server on uvloop")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    args = parser.parse_args()
    load_before = Path("/proc/loadavg").read_text().strip()
    env = dict(os.environ, **dict(kv.split("=", 1) for kv in args.server_env))
    with tempfile.TemporaryDirectory() as tmp:
        config = build_demo(Path(tmp))
        grpc_port, rest_port = _port(), _port()
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "servekit.cli.main", "serve", "--model_config_file", str(config)),
                *("--rest_api_port", str(rest_port), "--port", str(grpc_port), "--log_level", "warning"),
                *("--file_system_poll_wait_seconds", "0", *args.serve_arg),
            ],
            env=env,
        )
        kinds = {"bare grpcio echo": False, **({"bare grpcio echo (uvloop)": True} if args.echo_uvloop else {})}
        echoes: dict[str, tuple[int, int]] = {}
        procs = []
        for name, on_uvloop in kinds.items():
            port = _port()
            proc = mp.get_context("spawn").Process(target=_echo_main, args=(port, on_uvloop), daemon=True)
            proc.start()
            procs.append(proc)
            echoes[name] = (port, proc.pid or 0)
        try:
            _wait_http(f"http://127.0.0.1:{rest_port}/v2/health/ready", server)
            cells = (tuple(args.rows), tuple(args.concurrency))
            results = asyncio.run(
                _bench(grpc_port, rest_port, echoes, server.pid, args.seconds, cells, args.connections)
            )
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)
            for proc in procs:
                if proc.pid is not None:
                    os.kill(proc.pid, signal.SIGTERM)
                proc.join(timeout=10)
    table = _table(results)
    print(table)
    load_after = Path("/proc/loadavg").read_text().strip()
    print(f"load average before: {load_before}; after: {load_after}")
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
