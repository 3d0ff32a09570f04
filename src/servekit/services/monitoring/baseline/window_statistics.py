"""The statistics of one analysis window, for a data-quality execution without a baseline.

SageMaker accepts a data-quality schedule with no baseline statistics or constraints; its executions then compute the
window's statistics and check nothing. servekit does the same: the window's captured rows (``[since, until)``) are
summarised as a baseline would be (:func:`~servekit.services.monitoring.baseline.build.build_from`, the same types
and summaries as ``servekit monitor baseline``) and written as SageMaker's ``statistics.json``, with ``window.json``
(``{"rows", "since", "until"}``) for the control plane. No constraints, no violations.

``python -m servekit.services.monitoring.baseline.window_statistics --data DIR --out DIR --since T --until T``; exit 0
also for a window without rows (``rows`` 0: the control plane says there was no data), 1 with one line when the data
cannot be read.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa  # type: ignore[import-untyped]

from servekit.services.monitoring.baseline import statistics_constraints
from servekit.services.monitoring.baseline.build import build_from
from servekit.services.monitoring.baseline.store import dump, write_atomic
from servekit.services.monitoring.config import BaselineConfig
from servekit.services.monitoring.stream.sources import SourceError, SourceStats, UnreadableFile, read


def window_tables(data: str, since: float, until: float) -> Iterator[pa.Table]:
    """The rows of the capture (or data) under ``data`` whose time is in ``[since, until)``."""
    for batch in read(data, since=since, until=until):
        if batch.timestamps is None:
            continue  # no time, no window: like monitor run, such rows are not the window's
        times = batch.timestamps
        keep = (times >= since) & (times < until)
        if keep.any():
            yield batch.table.filter(pa.array(keep)) if not keep.all() else batch.table


def write(data: str, out: Path, since: float, until: float) -> int:
    """``statistics.json`` and ``window.json`` in ``out``; the window's rows (0: nothing written but window.json)."""
    out.mkdir(parents=True, exist_ok=True)
    seen = 0

    def tables(stats: SourceStats) -> Iterator[pa.Table]:
        nonlocal seen
        for table in window_tables(data, since, until):
            stats.rows += table.num_rows
            seen += table.num_rows
            yield table

    rows = 0
    try:
        baseline = build_from(tables, BaselineConfig(), what=f"the window of {data}")
    except SourceError:
        if seen:
            raise
    else:  # a window without rows has no statistics: the control plane says the job had no data
        write_atomic(out / "statistics.json", dump(statistics_constraints.statistics(baseline)))
        rows = baseline.rows
    write_atomic(out / "window.json", dump({"rows": rows, "since": _iso(since), "until": _iso(until)}))
    return rows


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="window_statistics", description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--data", required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--since", required=True, type=_time)
    parser.add_argument("--until", required=True, type=_time)
    args = parser.parse_args(argv)
    try:
        rows = write(args.data, args.out, args.since, args.until)
    except (SourceError, UnreadableFile, OSError) as exc:
        sys.stderr.write(f"servekit monitor: the window's data cannot be read: {exc}\n")
        return 1
    sys.stdout.write(f"servekit monitor: statistics of {rows} rows written to {args.out / 'statistics.json'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
