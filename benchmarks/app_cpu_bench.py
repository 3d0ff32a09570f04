#!/usr/bin/env python3
"""Event-loop CPU per request of servekit's ASGI app, without an HTTP server or a network: a steadier number than
req/s on a shared machine, because it counts the loop thread's own CPU time (``time.thread_time``), not the wall.

``python benchmarks/app_cpu_bench.py --model heavy --rows 1 --concurrency 64 --requests 20000 [--batching]
[--profile out.prof]`` builds the benchmark model, starts the app's lifespan (models load, warm up), then runs
``--concurrency`` coroutines that each call the app directly with a prebuilt :predict request until
``--requests`` are answered, ``--repeat`` times; prints the best and median loop-thread µs per request and the
process's total CPU per request (model threads included). ``--profile`` writes cProfile stats of the loop thread
for one more run.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import uvloop

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compute_bench import payload  # noqa: E402
from models import BUILDERS  # noqa: E402

from servekit.config.models import BatchingConfig, ModelConfig, ServerConfig  # noqa: E402
from servekit.launch.serve import served_app  # noqa: E402


async def drive(app: Any, name: str, body: bytes, concurrency: int, total: int) -> None:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": f"/v1/models/{name}:predict",
        "raw_path": f"/v1/models/{name}:predict".encode(),
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8501),
    }
    left = [total]

    async def client() -> None:
        while left[0] > 0:
            left[0] -= 1
            sent = False

            async def receive() -> dict[str, Any]:
                nonlocal sent
                if sent:
                    await asyncio.Event().wait()  # a disconnect would come here; never in this run
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}

            status: list[int] = []

            async def send(message: dict[str, Any], status: list[int] = status) -> None:
                if message["type"] == "http.response.start":
                    status.append(message["status"])

            await app(dict(scope), receive, send)
            if status != [200]:
                raise RuntimeError(f"status {status}")

    await asyncio.gather(*(client() for _ in range(concurrency)))


async def main_async(args: argparse.Namespace) -> None:
    work = Path(tempfile.mkdtemp(prefix="servekit-app-cpu-"))
    model = BUILDERS[args.model](work / args.model / "1").parent
    batching = BatchingConfig(max_batch_size=64, batch_timeout_micros=args.timeout_us, num_batch_threads=1)
    config = ServerConfig(
        models=(ModelConfig(name=args.model, base_path=str(model)),),
        file_system_poll_wait_seconds=0,
        batching=batching if args.batching else None,
    )
    app = served_app(config)
    body = payload(args.model, args.rows).encode()
    startup: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    await startup.put({"type": "lifespan.startup"})
    lifespan = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}}, startup.get, events.put))
    assert (await events.get())["type"] == "lifespan.startup.complete"
    while not app.state.core.service.is_ready(args.model):
        await asyncio.sleep(0.05)
    await drive(app, args.model, body, args.concurrency, 500)  # warm
    loop_us, proc_us = [], []
    for _ in range(args.repeat):
        t0, p0 = time.thread_time(), time.process_time()
        await drive(app, args.model, body, args.concurrency, args.requests)
        loop_us.append((time.thread_time() - t0) / args.requests * 1e6)
        proc_us.append((time.process_time() - p0) / args.requests * 1e6)
    print(
        f"{args.model} rows={args.rows} c={args.concurrency} batching={args.batching}: event loop "
        f"{min(loop_us):.1f} us/request best, {statistics.median(loop_us):.1f} median; whole process "
        f"{min(proc_us):.1f} / {statistics.median(proc_us):.1f} us/request",
        flush=True,
    )
    if args.profile:
        # The loop thread's CPU time, as measured above: a wall-clock profile also counts its waits for the GIL.
        prof = cProfile.Profile(time.thread_time)
        prof.enable()
        await drive(app, args.model, body, args.concurrency, args.requests)
        prof.disable()
        prof.dump_stats(args.profile)
    await startup.put({"type": "lifespan.shutdown"})
    await lifespan


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", choices=sorted(BUILDERS))
    parser.add_argument("--rows", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--batching", action="store_true")
    parser.add_argument("--timeout-us", type=int, default=1000)
    parser.add_argument("--profile", type=Path, default=None)
    args = parser.parse_args()
    uvloop.run(main_async(args))


if __name__ == "__main__":
    main()
