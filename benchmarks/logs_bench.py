"""CloudWatch Logs shipper throughput: a job writing ``--rate`` lines/s (default 50,000) for ``--seconds``, shipped
into a stream of a fresh servekit home (SQLite, or ``--database-url``) by :class:`servekit.services.logs.shipper.LogShipper`
as ``servekit up`` runs it (a pass every 0.25 s). Reports lines/s stored, the lag at the end, whether every line
arrived exactly once, and the shipper's CPU (this process's: the writer is another process).

    python benchmarks/logs_bench.py --rate 50000 --seconds 10
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from servekit.services.logs.retention import RetentionLimits
from servekit.services.logs.shipper import TRANSFORM_GROUP, LogShipper
from servekit.services.database import StateDB

WRITER = """
import sys, time
rate, seconds, path = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
line = " INFO worker-3 processed record batch=17 latency_ms=4.2 status=ok padding=" + "x" * 20 + "\\n"
n, t0 = 0, time.monotonic()
with open(path, "a", buffering=1 << 20) as f:
    while n < rate * seconds:
        due = int((time.monotonic() - t0) * rate) + 1
        while n < min(due, rate * seconds):
            f.write(f"{n:010d}" + line)
            n += 1
        f.flush()
        time.sleep(0.005)
print(n)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=50_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home, out = Path(tmp) / "home", Path(tmp) / "job.log"
        out.touch()
        db = StateDB.open(home, database_url=args.database_url)
        shipper = LogShipper(db.logs, retention=RetentionLimits(max_bytes=None, max_age_days=None))
        shipper.register(TRANSFORM_GROUP, "job/i-1", out)
        expected = int(args.rate * args.seconds)
        cpu0, wall0 = time.process_time(), time.monotonic()
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(args.rate), str(args.seconds), str(out)])
        while writer.poll() is None:
            if not shipper.ship_once():
                time.sleep(shipper.interval_s)  # the loop's own cadence
        written_at = time.monotonic()
        while shipper.ship_once(final=True):
            pass
        wall, cpu = time.monotonic() - wall0, time.process_time() - cpu0
        lag = time.monotonic() - written_at
        stream = db.logs.stream(TRANSFORM_GROUP, "job/i-1")
        assert stream is not None
        stored = db.logs.count()
        numbers = [int(e.message[:10]) for e in db.logs.read(stream.seq, limit=expected + 10)]
        exact = numbers == list(range(expected))
        db.close()
    print(
        json.dumps(
            {
                "lines": expected,
                "stored": stored,
                "every_line_once_in_order": exact,
                "wall_s_writer_start_to_all_stored": round(wall, 2),
                "lines_per_s": round(stored / wall),
                "lag_after_writer_s": round(lag, 3),
                "shipper_cpu_s": round(cpu, 2),
                "shipper_cpu_share_of_one_core": round(cpu / wall, 3),
                "database": "postgresql" if args.database_url else "sqlite",
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
