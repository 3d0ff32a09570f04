"""How many requests/s the bench client can drive: a trivial HTTP server in a subprocess, the closed loop here.

    python -m servekit.tools.bench.selftest [--concurrency 32] [--duration 5s]

The server (``TrivialServer``) answers every request with a fixed 200 JSON response carrying servekit's
timing headers, so the client does all the parsing and bookkeeping it does against a model server.
Run on an otherwise idle machine with at least two cores: the figure is the client's ceiling only when the
server, on its own core, is not the one saturated (the server here does far less work per request).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

from servekit.tools.bench.runner import loop_factory, run_bench
from servekit.tools.bench.spec import BenchSpec, parse_duration

_BODY = b'{"predictions":[[0.1,0.9]]}'
RESPONSE = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
    b"x-servekit-model-version: 1\r\nx-servekit-queue-ms: 0.001\r\nx-servekit-model-ms: 0.002\r\n"
    b"x-servekit-total-ms: 0.005\r\n\r\n%s" % (len(_BODY), _BODY)
)


class TrivialServer(asyncio.Protocol):
    """Keep-alive HTTP/1.1 answering ``RESPONSE`` once per request head (``CRLF CRLF``) it reads.

    It does not wait for bodies, which is fine for a client that sends whole requests and waits for each
    answer; the point is to spend as little CPU as possible, so the client is what gets measured.
    """

    def __init__(self) -> None:
        self._tail = b""  # the last bytes of the previous read, for a separator split across reads
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it

    def data_received(self, data: bytes) -> None:
        seen = self._tail + data
        answers = seen.count(b"\r\n\r\n")
        self._tail = seen[-3:] if not seen.endswith(b"\r\n\r\n") else b""
        if answers and self._transport is not None:
            self._transport.write(RESPONSE * answers)


async def serve(sock: socket.socket) -> None:
    server = await asyncio.get_running_loop().create_server(TrivialServer, sock=sock)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", default="5s")
    parser.add_argument("--serve-fd", type=int, help=argparse.SUPPRESS)  # internal: run the server on this socket
    args = parser.parse_args(argv)
    factory = loop_factory()
    if args.serve_fd is not None:
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(serve(socket.socket(fileno=args.serve_fd)))
        return
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    port = sock.getsockname()[1]
    cmd = [sys.executable, "-m", "servekit.tools.bench.selftest", "--serve-fd", str(sock.fileno())]
    proc = subprocess.Popen(cmd, pass_fds=(sock.fileno(),))
    sock.close()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            body = Path(tmp) / "body.jsonl"
            body.write_text('{"instances": [[5.1, 3.5, 1.4, 0.2]]}\n')
            spec = BenchSpec(
                url=f"http://127.0.0.1:{port}",
                model="trivial",
                levels=(float(args.concurrency),),
                duration_s=parse_duration(args.duration),
                body_file=str(body),
            )
            cpu = time.process_time()
            report = run_bench(spec)
            cpu = time.process_time() - cpu
    finally:
        proc.terminate()
        proc.wait()
    phase = report["phases"][0]
    lat = phase["latency_ms"] or {}
    per_request = cpu / max(phase["requests"], 1)
    sys.stdout.write(
        f"closed loop, {args.concurrency} connections, {phase['duration_s']:.1f}s: "
        f"{phase['throughput']['requests_per_s']:,.0f} requests/s, {phase['ok']:,} ok, errors {phase['errors'] or 0}, "
        f"p50 {lat.get('p50', 0):.3f} ms, p99 {lat.get('p99', 0):.3f} ms; "
        f"client CPU {per_request * 1e6:.1f} us/request "
        f"(one core saturates at ~{1 / max(per_request, 1e-9):,.0f} requests/s)\n"
    )


if __name__ == "__main__":
    main()
