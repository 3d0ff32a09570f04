"""servekit's drift monitor against Evidently on the same job (not a test): a baseline, then traffic of ``--rows``
rows x ``--features`` features over ``--hours`` hours judged in ``--window`` windows every ``--step``, end to end
(each tool a child process, from reading the files to the per-window verdicts), with wall time, peak RSS (``wait4``)
and the number of drifted features per window side by side.

Evidently has no windowing of its own, so its script does what a user would: read the traffic with pandas and run
``Report([DataDriftPreset()])`` (its defaults) on each window's rows against the baseline. The data are
``monitor_bench``'s: half numerical, half categorical features; in the second half of the time, two numerical
features shift their mean by 0.5 std, one its std by 1.5x, and two categorical features reverse their proportions.

    python benchmarks/monitor_vs_evidently.py --evidently /tmp/evvenv/bin/python --rows 250000,1000000
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from monitor_bench import measure, write_data  # type: ignore[import-not-found]

EVIDENTLY = """
import json, sys
import pandas as pd
from evidently import Report
from evidently.presets import DataDriftPreset
ref = pd.read_parquet(sys.argv[1])
cur = pd.read_parquet(sys.argv[2])
window, step = int(sys.argv[3]), int(sys.argv[4])
ts = (cur["ts"] - pd.Timestamp(0, tz="UTC")) // pd.Timedelta(seconds=1)  # epoch seconds
data = cur.drop(columns=["ts"])
first, last = int(ts.min()) // step * step, (int(ts.max()) // step + 1) * step
end = -(-(first + window) // step) * step
while end <= last:
    rows = data[(ts >= end - window) & (ts < end)]
    result = Report([DataDriftPreset()]).run(current_data=rows, reference_data=ref).dict()
    count = next(m for m in result["metrics"] if m["metric_name"].startswith("DriftedColumnsCount"))
    print(json.dumps({"end": end, "rows": len(rows), "drifted": int(count["value"]["count"])}))
    end += step
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default="1000000", help="comma-separated traffic sizes")
    ap.add_argument("--baseline-rows", type=int, default=100_000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--hours", type=int, default=24)
    ap.add_argument("--window", type=int, default=6, help="hours")
    ap.add_argument("--step", type=int, default=1, help="hours")
    ap.add_argument("--evidently", default=None, help="python of a virtualenv with evidently, pandas < 3, pyarrow")
    ap.add_argument("--lateness", default=None, help="servekit's --lateness (the traffic is in time order: 0s)")
    ap.add_argument("--window-values", default=None, help="servekit's --window-values (values kept per pane)")
    ap.add_argument("--dir", type=Path, default=None, help="work folder (default: a temporary one, removed)")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args()
    work = args.dir or Path(tempfile.mkdtemp(prefix="monitor-vs-evidently-"))
    work.mkdir(parents=True, exist_ok=True)
    servekit = [sys.executable, "-m", "servekit.cli.main", "monitor"]
    results: dict[str, Any] = {"features": args.features, "baseline_rows": args.baseline_rows, "runs": []}
    try:
        train = work / "train.parquet"
        write_data(train, args.baseline_rows, args.features, args.hours, 1, timestamps=False)
        base = work / "base"
        shutil.rmtree(base, ignore_errors=True)
        results["servekit_baseline"] = measure([*servekit, "baseline", "--data", str(train), "--out", str(base)])
        for rows in (int(r) for r in args.rows.split(",")):
            data = work / f"traffic-{rows}.parquet"
            write_data(data, rows, args.features, args.hours, 2, timestamps=True)
            out = work / f"out-{rows}"
            late = ["--lateness", args.lateness] if args.lateness else []
            late += ["--window-values", args.window_values] if args.window_values else []
            ours = measure([*servekit, "run", "--baseline", str(base), "--data", str(data), "--out", str(out),
                            "--timestamp-column", "ts", "--window", f"{args.window}h", "--step", f"{args.step}h",
                            "--consecutive", "1", *late])  # fmt: skip
            windows = json.loads((out / "metrics.json").read_text())["windows"]
            ours_counts = [sum(f["drifted"] for f in w["features"].values()) for w in windows]
            run: dict[str, Any] = {
                "rows": rows,
                "windows": len(windows),
                "servekit": {k: ours[k] for k in ("seconds", "peak_rss_mib")},
                "drifted_per_window": {"servekit": ours_counts},
            }
            results["runs"].append(run)
            print(f"{rows} rows x {args.features} features, {len(windows)} windows of {args.window} h every "
                  f"{args.step} h: servekit {ours['seconds']} s / {ours['peak_rss_mib']} MiB")  # fmt: skip
            print(f"  drifted features per window: servekit  {ours_counts}")
            if not args.evidently:
                continue
            theirs = measure([args.evidently, "-c", EVIDENTLY, str(train), str(data),
                              str(args.window * 3600), str(args.step * 3600)])  # fmt: skip
            their_counts = [
                json.loads(line)["drifted"] for line in theirs["stdout"].splitlines() if line.startswith("{")
            ]
            run["evidently"] = {k: theirs[k] for k in ("seconds", "peak_rss_mib")}
            run["drifted_per_window"]["evidently"] = their_counts
            print(f"  Evidently {theirs['seconds']} s / {theirs['peak_rss_mib']} MiB "
                  f"({theirs['seconds'] / ours['seconds']:.1f}x time, "
                  f"{theirs['peak_rss_mib'] / ours['peak_rss_mib']:.1f}x memory)")  # fmt: skip
            print(f"  drifted features per window: Evidently {their_counts}")
    finally:
        if args.dir is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
