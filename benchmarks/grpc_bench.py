"""gRPC Predict vs REST :predict on the same servekit process and model, and vs a bare grpcio echo server.

    python benchmarks/grpc_bench.py [--seconds 3] [--out benchmarks/GRPC_RESULTS.md]

Builds the demo iris ONNX model, starts ``servekit serve --port <grpc> --rest_api_port <rest>`` (one worker) and a
bare ``grpc.aio`` server whose Predict handler answers a prepared reply of the same size without decoding
anything (the ceiling of grpcio itself on this machine). Then, for one-row and 64-row requests at concurrency 1
and 64, runs a closed loop of asyncio clients for ``--seconds`` per cell and reports throughput and p50/p99.
Clients and servers share this machine's cores: the numbers say how the fronts compare here, not absolute limits.
"""

from __future__ import annotations

import argparse
import asyncio
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

from servekit.codecs.tensor_proto import fill_proto
from servekit.demo.build import build_demo
from servekit.protos.tensorflow_serving.apis import predict_pb2

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
    return req.SerializeToString()


def _echo_main(port: int) -> None:
    """A bare grpc.aio server: Predict answers a prepared reply (iris-sized outputs), nothing decoded."""

    replies = {}
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


async def _bench(grpc_port: int, rest_port: int, echo_port: int, seconds: float) -> list[dict[str, Any]]:
    results = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        channels = {
            "servekit gRPC": grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}"),
            "bare grpcio echo": grpc.aio.insecure_channel(f"127.0.0.1:{echo_port}"),
        }
        for rows_n in (1, 64):
            rows = _rows(rows_n)
            payload = _request(rows)
            rest_body = orjson.dumps({"inputs": rows.tolist()})
            for concurrency in (1, 64):
                targets: dict[str, Any] = {}
                for name, ch in channels.items():
                    method = ch.unary_unary(PREDICT)  # raw bytes both ways: the client's decode cost is not timed

                    async def grpc_call(method: Any = method, payload: bytes = payload) -> None:
                        await method(payload, timeout=30)

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
                    n, lat, errors = await _closed_loop(call, concurrency, seconds)
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
                        }
                    )
                    print(results[-1], flush=True)
        for ch in channels.values():
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
        "| rows | c | target | req/s | p50 ms | p99 ms | errors | x echo req/s |",
        "|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        echo = next(
            e for e in results if e["target"] == "bare grpcio echo" and (e["rows"], e["c"]) == (r["rows"], r["c"])
        )
        ratio = r["rps"] / echo["rps"] if echo["rps"] else float("nan")
        lines.append(
            f"| {r['rows']} | {r['c']} | {r['target']} | {r['rps']:.0f} | {r['p50']:.2f} | {r['p99']:.2f} | "
            f"{r['errors']} | {ratio:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=3.0, help="measured time per cell")
    parser.add_argument("--out", type=Path, help="also write the table here (markdown)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        config = build_demo(Path(tmp))
        grpc_port, rest_port, echo_port = _port(), _port(), _port()
        server = subprocess.Popen(
            [
                *(sys.executable, "-m", "servekit.cli.main", "serve", "--model_config_file", str(config)),
                *("--rest_api_port", str(rest_port), "--port", str(grpc_port), "--log_level", "warning"),
                *("--file_system_poll_wait_seconds", "0"),
            ],
        )
        echo = mp.get_context("spawn").Process(target=_echo_main, args=(echo_port,), daemon=True)
        echo.start()
        try:
            _wait_http(f"http://127.0.0.1:{rest_port}/v2/health/ready", server)
            results = asyncio.run(_bench(grpc_port, rest_port, echo_port, args.seconds))
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)
            if echo.pid is not None:
                os.kill(echo.pid, signal.SIGTERM)
            echo.join(timeout=10)
    table = _table(results)
    print(table)
    if args.out:
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
