#!/usr/bin/env python3
"""The state database's operations on SQLite (the home's file) and on PostgreSQL (``--database-url``), in one run:
what moving the state to a server costs the control plane per operation.

    python benchmarks/state_backends_bench.py --database-url postgresql://user@127.0.0.1:5432/db [--n 500]

Operations, each timed per call (median and p99 of ``--n`` calls, after 20 warm-up calls):
- ``get_endpoint``: DescribeEndpoint's read (one indexed SELECT);
- ``transition``: a compare-and-set status change with its history row (a write transaction under the lock);
- ``metrics.add``: one metric bucket flushed (read, merge, write under the lock);
- ``routes.version``: a gateway replica's poll (one ``MAX(version)``).
The PostgreSQL database must be empty or this script's own (it creates and drops nothing but what the state's
migrations create). Timings belong here, never in tests.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from servekit.services.database import StateDB
from servekit.gateway.store import GatewayRoutes
from servekit.services.cloudwatch.metric_store import MinuteRow


def timed(fn: Callable[[int], object], n: int) -> tuple[float, float]:
    for i in range(20):
        fn(-1 - i)
    samples: list[float] = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - t0)
    samples.sort()
    return statistics.median(samples) * 1e3, samples[min(len(samples) - 1, int(len(samples) * 0.99))] * 1e3


def measure(db: StateDB, n: int) -> dict[str, tuple[float, float]]:
    name = f"bench-{time.time_ns()}"
    db.hosting.create_endpoint(name, "arn:bench", "cfg", "A", [])
    statuses = ("A", "B")
    routes = GatewayRoutes(db.conn)

    def flip(i: int) -> None:
        db.hosting.transition(name, statuses[(i + 1) % 2], expected=statuses[i % 2])

    def flush(i: int) -> None:
        db.metrics.add([MinuteRow("bench", "Invocations", (("EndpointName", name),), 60 * (i % 5), 1, 1, 1, 1, {0: 1})])

    state = {"i": 0}

    def flip_in_order(_: int) -> None:
        flip(state["i"])
        state["i"] += 1

    return {
        "get_endpoint": timed(lambda i: db.hosting.get_endpoint(name), n),
        "transition": timed(flip_in_order, n),
        "metrics.add": timed(flush, n),
        "routes.version": timed(lambda i: routes.version(), n),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--n", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as home:
        with StateDB.open(Path(home)) as db:
            sqlite = measure(db, args.n)
        with StateDB.open(Path(home), database_url=args.database_url) as db:
            postgres = measure(db, args.n)
    print(f"n={args.n} per operation; milliseconds per call")
    print(f"{'operation':<16} {'SQLite p50':>11} {'p99':>8} {'PostgreSQL p50':>15} {'p99':>8} {'p50 ratio':>10}")
    for op, (p50, p99) in sqlite.items():
        q50, q99 = postgres[op]
        print(f"{op:<16} {p50:>11.3f} {p99:>8.3f} {q50:>15.3f} {q99:>8.3f} {q50 / p50:>9.1f}x")


if __name__ == "__main__":
    main()
