"""servekit bench's load drivers against in-process servers: counts, the open loop's bound, timeouts, errors.

Timing is only checked one way (a schedule cannot finish early); nothing asserts how fast this machine is.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from servekit.tools.bench.loop import closed_loop, open_loop
from servekit.tools.bench.selftest import TrivialServer
from servekit.tools.bench.spec import BenchSpec, Target
from servekit.tools.bench.stats import PhaseStats, Samples
from servekit.tools.bench.workload import InputSpec, Workload, build_workload

IRIS = [InputSpec("X", "FP32", (-1, 4))]


class Silent(asyncio.Protocol):
    """Accepts connections and reads requests, never answers."""

    def data_received(self, data: bytes) -> None:
        pass


@asynccontextmanager
async def serving(protocol: type[asyncio.Protocol]) -> AsyncIterator[tuple[Target, Workload]]:
    server = await asyncio.get_running_loop().create_server(protocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    workload = build_workload(BenchSpec(url=f"http://127.0.0.1:{port}", model="m", rows=3), IRIS)
    async with server:
        yield Target("127.0.0.1", port, False), workload
        server.close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_closed_loop_sends_exactly_n() -> None:
    async def main() -> tuple[Samples, float]:
        async with serving(TrivialServer) as (target, workload):
            samples = Samples()
            elapsed = await closed_loop(
                target, workload, 4, samples, duration_s=None, requests=100, timeout_s=5, stop=asyncio.Event()
            )
            return samples, elapsed

    samples, elapsed = asyncio.run(main())
    assert samples.done == 100 and samples.statuses == {200: 100}
    phase = PhaseStats.from_samples(samples, loop="closed", duration_s=elapsed, concurrency=4).to_json()
    assert phase["ok"] == 100 and phase["throughput"]["rows_per_s"] == pytest.approx(
        3 * phase["throughput"]["ok_per_s"]
    )
    assert phase["server_ms"]["samples"] == 100  # the trivial server sends servekit's timing headers
    lat = phase["latency_ms"]
    assert 0 < lat["p50"] <= lat["p90"] <= lat["p95"] <= lat["p99"] <= lat["max"]


def test_closed_loop_for_a_duration() -> None:
    async def main() -> tuple[Samples, float]:
        async with serving(TrivialServer) as (target, workload):
            samples = Samples()
            elapsed = await closed_loop(
                target, workload, 2, samples, duration_s=0.3, requests=None, timeout_s=5, stop=asyncio.Event()
            )
            return samples, elapsed

    samples, elapsed = asyncio.run(main())
    assert elapsed >= 0.3 and samples.done > 0 and samples.failed == 0


def test_open_loop_keeps_its_schedule_count() -> None:
    async def main() -> tuple[Samples, float]:
        async with serving(TrivialServer) as (target, workload):
            samples = Samples()
            elapsed = await open_loop(
                target,
                workload,
                200.0,
                samples,
                duration_s=None,
                requests=40,
                max_outstanding=100,
                timeout_s=5,
                stop=asyncio.Event(),
            )
            return samples, elapsed

    samples, elapsed = asyncio.run(main())
    assert samples.done == 40 and samples.statuses == {200: 40} and samples.dropped == 0
    assert elapsed >= 39 / 200  # the last request is not due before then


def test_open_loop_bounds_outstanding_requests() -> None:
    """A server that never answers: max_outstanding go out and time out, every later one is dropped."""

    async def main() -> Samples:
        async with serving(Silent) as (target, workload):
            samples = Samples()
            await open_loop(
                target,
                workload,
                500.0,
                samples,
                duration_s=None,
                requests=20,
                max_outstanding=3,
                timeout_s=0.5,
                stop=asyncio.Event(),
            )
            return samples

    samples = asyncio.run(main())
    assert samples.timeouts == 3 and samples.dropped == 17 and samples.done == 3


def test_closed_loop_times_out_silent_server() -> None:
    async def main() -> Samples:
        async with serving(Silent) as (target, workload):
            samples = Samples()
            await closed_loop(
                target, workload, 2, samples, duration_s=None, requests=4, timeout_s=0.2, stop=asyncio.Event()
            )
            return samples

    samples = asyncio.run(main())
    assert samples.timeouts == 4 and samples.connection_errors == 0


def test_connection_refused_is_counted() -> None:
    target = Target("127.0.0.1", _closed_port(), False)
    workload = build_workload(BenchSpec(url=f"http://127.0.0.1:{target.port}", model="m"), IRIS)
    samples = Samples()
    asyncio.run(
        closed_loop(target, workload, 2, samples, duration_s=None, requests=6, timeout_s=2, stop=asyncio.Event())
    )
    assert samples.connection_errors == 6 and samples.done == 6


def test_stop_ends_a_long_phase_early() -> None:
    async def main() -> float:
        async with serving(TrivialServer) as (target, workload):
            stop = asyncio.Event()
            asyncio.get_running_loop().call_later(0.2, stop.set)
            return await open_loop(
                target,
                workload,
                50.0,
                Samples(),
                duration_s=60,
                requests=None,
                max_outstanding=10,
                timeout_s=5,
                stop=stop,
            )

    assert asyncio.run(main()) < 10
