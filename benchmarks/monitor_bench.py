"""Drift-monitor benchmark (not a test): runtime and peak memory of ``servekit monitor`` on generated data.

Generates a baseline of ``--baseline-rows`` rows and traffic of each ``--rows`` size (half numerical, half
categorical features; timestamps spread over ``--hours`` hours; the second half of the time with drift on a
few features) as Parquet, then runs ``servekit monitor baseline`` and ``servekit monitor run`` as child
processes and reads each one's wall time and peak RSS (``wait4``). Several ``--rows`` sizes show whether
memory stays flat as rows grow.

    python benchmarks/monitor_bench.py --rows 250000,1000000 --baseline-rows 100000 --features 20

``--evidently PYTHON`` also runs Evidently's default data-drift report (``Report([DataDriftPreset()])``, one
comparison of the whole traffic file against the baseline) with that interpreter, e.g. a virtualenv made by
``python -m venv benchmarks/.venvs/evidently && benchmarks/.venvs/evidently/bin/pip install evidently pyarrow``,
next to servekit on one window spanning the same data (``--window`` = the whole time span).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

T0 = 1_795_000_000 - 1_795_000_000 % 86400
CHUNK = 100_000


def _columns(rng: np.random.Generator, n: int, features: int, drift: bool) -> dict[str, Any]:
    half = features // 2
    cols: dict[str, Any] = {}
    for i in range(half):
        shift = 0.5 if drift and i < 2 else 0.0
        cols[f"num_{i}"] = rng.normal(i + shift, 1.0 + (0.5 if drift and i == 2 else 0.0), n)
    cats = np.array([f"v{j}" for j in range(8)])
    base_p = np.linspace(1, 2, 8) / np.linspace(1, 2, 8).sum()
    drift_p = base_p[::-1]
    for i in range(features - half):
        p = drift_p if drift and i < 2 else base_p
        cols[f"cat_{i}"] = pa.array(cats[rng.choice(8, n, p=p)])
    return cols


def write_data(path: Path, rows: int, features: int, hours: int, seed: int, timestamps: bool) -> None:
    """Rows in time order; with ``timestamps``, rows in the second half of the time span carry drift."""
    rng = np.random.default_rng(seed)
    writer: pq.ParquetWriter | None = None
    for start in range(0, rows, CHUNK):
        n = min(CHUNK, rows - start)
        ts = T0 + np.arange(start, start + n) * (hours * 3600 / rows)
        calm = int((ts < T0 + hours * 1800).sum()) if timestamps else n
        parts = [pa.table(_columns(rng, calm, features, drift=False))]
        if n > calm:
            parts.append(pa.table(_columns(rng, n - calm, features, drift=True)))
        table = pa.concat_tables(parts)
        if timestamps:
            table = table.add_column(0, "ts", pa.array((ts * 1e6).astype("int64"), pa.timestamp("us", tz="UTC")))
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
    assert writer is not None
    writer.close()


EVIDENTLY = """
import sys, pandas as pd
from evidently import Report
from evidently.presets import DataDriftPreset
ref = pd.read_parquet(sys.argv[1])
cur = pd.read_parquet(sys.argv[2]).drop(columns=["ts"])
result = Report([DataDriftPreset()]).run(current_data=cur, reference_data=ref)
count = next(m for m in result.dict()["metrics"] if m["metric_name"].startswith("DriftedColumnsCount"))
print(f"evidently: {count['value']['count']:.0f} drifted columns")
"""


def measure(cmd: list[str]) -> dict[str, Any]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    out = proc.stdout.read().decode() if proc.stdout else ""
    err = proc.stderr.read().decode() if proc.stderr else ""
    code = os.waitstatus_to_exitcode(status)
    if code not in (0, 3):
        raise SystemExit(f"{' '.join(cmd)} failed ({code}):\n{out}\n{err}")
    return {"seconds": round(wall, 2), "peak_rss_mib": round(usage.ru_maxrss / 1024, 1), "stdout": out.strip()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1000000", help="comma-separated traffic sizes")
    ap.add_argument("--baseline-rows", type=int, default=100_000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--window", default="6h")
    ap.add_argument("--step", default="1h")
    ap.add_argument("--dir", type=Path, default=None, help="work folder (default: a temporary one, removed)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    ap.add_argument("--evidently", default=None, help="python of a virtualenv with evidently: compare with it")
    args = ap.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="monitor-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    servekit = [sys.executable, "-m", "servekit.cli.main", "monitor"]
    results: dict[str, Any] = {"baseline_rows": args.baseline_rows, "features": args.features, "runs": []}
    try:
        train = work / "train.parquet"
        write_data(train, args.baseline_rows, args.features, args.hours, 1, timestamps=False)
        base = work / "base"
        shutil.rmtree(base, ignore_errors=True)
        results["baseline"] = measure([*servekit, "baseline", "--data", str(train), "--out", str(base)])
        print(f"baseline {args.baseline_rows} rows: {results['baseline']['seconds']} s, "
              f"peak RSS {results['baseline']['peak_rss_mib']} MiB")  # fmt: skip
        for rows in (int(r) for r in args.rows.split(",")):
            data = work / f"traffic-{rows}.parquet"
            write_data(data, rows, args.features, args.hours, 2, timestamps=True)
            out = work / f"out-{rows}"
            cmd = [*servekit, "run", "--baseline", str(base), "--data", str(data), "--out", str(out),
                   "--timestamp-column", "ts", "--window", args.window, "--step", args.step]  # fmt: skip
            r = measure(cmd)
            r["rows"] = rows
            r["rows_per_second"] = round(rows / r["seconds"])
            results["runs"].append(r)
            summary = r["stdout"].splitlines()[0]
            print(f"run {rows} rows x {args.features} features: {r['seconds']} s ({r['rows_per_second']} rows/s), "
                  f"peak RSS {r['peak_rss_mib']} MiB; {summary}")  # fmt: skip
            if args.evidently:
                one = measure([*cmd[:-4], "--window", f"{args.hours}h", "--no-report"])
                evi = measure([args.evidently, "-c", EVIDENTLY, str(train), str(data)])
                r["one_window"], r["evidently"] = one, evi
                print(
                    f"  one {args.hours}h window: servekit {one['seconds']} s / {one['peak_rss_mib']} MiB; "
                    f"evidently {evi['seconds']} s / {evi['peak_rss_mib']} MiB "
                    f"({evi['seconds'] / one['seconds']:.1f}x time, "
                    f"{evi['peak_rss_mib'] / one['peak_rss_mib']:.1f}x memory)"
                )
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
