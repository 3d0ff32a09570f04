"""The load drivers: a closed loop of N back-to-back clients, and an open loop at a fixed request rate.

Closed loop: each client owns one keep-alive connection (opened before the clock starts) and sends its next
request as soon as the previous response is in, so the server sees at most N requests at a time and the
offered load adapts to its speed. Latency is send-to-response.

Open loop: request k is due at ``start + k / rate`` whether or not earlier ones were answered, which is how
independent users arrive. Latency is measured from the *due* time, so a client or server falling behind
shows up as latency instead of being hidden (coordinated omission). At most ``max_outstanding`` requests are
in flight (one connection each, reused); one that falls due while that many are outstanding is dropped and
counted, so an overloaded server makes the run report drops instead of growing an unbounded backlog.

Both stop at the phase's duration or request count, whichever comes first, or when ``stop`` is set
(Ctrl-C); requests already sent are waited for (at most ``timeout_s`` each) and counted.
"""

from __future__ import annotations

import asyncio
import math
from time import perf_counter

from servekit.tools.bench.client import Connection, ProtocolError
from servekit.tools.bench.spec import Target
from servekit.tools.bench.stats import Samples
from servekit.tools.bench.workload import Workload

ERROR_BACKOFF_S = 0.01  # after a connection error, so a refused port is counted, not spun on
MAX_SLEEP_S = 0.1  # the open loop's longest sleep, so a stop request is seen promptly at low rates


class Watchdog:
    """Aborts requests past their deadline. One periodic check for all connections costs less than a timer
    per request (``asyncio.timeout`` was ~15% of the client's time per request when profiled)."""

    def __init__(self, conns: list[Connection], timeout_s: float) -> None:
        self.conns = conns  # may grow while running (the open loop opens connections on demand)
        self.period = min(max(timeout_s / 10, 0.01), 0.5)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            now = perf_counter()
            for conn in self.conns:
                if conn.deadline < now:
                    conn.deadline = math.inf
                    conn.abort()


def _failed(samples: Samples, conn: Connection, exc: BaseException) -> None:
    if conn.timed_out or isinstance(exc, TimeoutError):
        samples.timeouts += 1
    else:
        samples.connection_errors += 1


async def _stop_watching(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def closed_loop(
    target: Target,
    workload: Workload,
    concurrency: int,
    samples: Samples,
    *,
    duration_s: float | None,
    requests: int | None,
    timeout_s: float,
    stop: asyncio.Event,
) -> float:
    """Run ``concurrency`` clients; returns the seconds from the first send to the last response."""
    conns = [Connection(target, timeout_s) for _ in range(concurrency)]
    # Connect before the clock starts; a failure here is retried, and counted, by the client's first request.
    await asyncio.gather(*(c.open() for c in conns), return_exceptions=True)
    reqs, rows, make = workload.requests, workload.rows, workload.make
    n = len(reqs)
    remaining = requests if requests is not None else -1  # -1: no request limit
    sent = 0
    watchdog = asyncio.create_task(Watchdog(conns, timeout_s).run())
    start = perf_counter()
    deadline = start + duration_s if duration_s is not None else math.inf

    async def client(conn: Connection) -> None:
        nonlocal remaining, sent
        while remaining != 0 and not stop.is_set():
            t0 = perf_counter()
            if t0 >= deadline:
                return
            remaining -= 1
            k = sent % n
            sent += 1
            conn.deadline = t0 + timeout_s
            try:
                resp = await conn.request(reqs[k] if make is None else make(k))
            except (OSError, ProtocolError) as exc:
                conn.deadline = math.inf
                _failed(samples, conn, exc)
                await asyncio.sleep(ERROR_BACKOFF_S)
                continue
            conn.deadline = math.inf
            samples.response(perf_counter() - t0, resp, rows[k])

    try:
        await asyncio.gather(*(client(c) for c in conns))
        return perf_counter() - start
    finally:
        await _stop_watching(watchdog)
        await asyncio.gather(*(c.wait_closed() for c in conns))


async def open_loop(
    target: Target,
    workload: Workload,
    rate: float,
    samples: Samples,
    *,
    duration_s: float | None,
    requests: int | None,
    max_outstanding: int,
    timeout_s: float,
    stop: asyncio.Event,
) -> float:
    """Send at ``rate`` requests/s; returns the seconds from the first due time to the last response."""
    reqs, rows, make = workload.requests, workload.rows, workload.make
    n = len(reqs)
    idle: list[Connection] = []
    every: list[Connection] = []
    tasks: set[asyncio.Task[None]] = set()
    inflight = 0

    async def one(k: int, due: float) -> None:
        nonlocal inflight
        if idle:
            conn = idle.pop()
        else:
            conn = Connection(target, timeout_s)
            every.append(conn)
        conn.deadline = perf_counter() + timeout_s
        try:
            resp = await conn.request(reqs[k] if make is None else make(k))
        except (OSError, ProtocolError) as exc:
            _failed(samples, conn, exc)
        else:
            samples.response(perf_counter() - due, resp, rows[k])
        finally:
            conn.deadline = math.inf
            inflight -= 1
        idle.append(conn)  # a connection the request closed reopens on its next use

    loop = asyncio.get_running_loop()
    interval = 1.0 / rate
    limit = requests if requests is not None else math.inf
    watchdog = asyncio.create_task(Watchdog(every, timeout_s).run())
    start = perf_counter()
    end = start + duration_s if duration_s is not None else math.inf
    k = 0
    try:
        while k < limit and not stop.is_set():
            due = start + k * interval
            if due >= end:
                break
            delay = due - perf_counter()
            # Yield even when behind schedule (sleep(0)), so sent requests progress while we catch up.
            await asyncio.sleep(min(max(delay, 0.0), MAX_SLEEP_S))
            if delay > MAX_SLEEP_S:
                continue
            if inflight >= max_outstanding:
                samples.dropped += 1
            else:
                inflight += 1
                task = loop.create_task(one(k % n, due))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            k += 1
        if tasks:
            await asyncio.wait(tasks)
        return perf_counter() - start
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await _stop_watching(watchdog)
        await asyncio.gather(*(c.wait_closed() for c in every))
