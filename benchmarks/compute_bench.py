#!/usr/bin/env python3
"""Compute-bound serving against in-process onnxruntime (issue 16, goal 3), interleaved rounds, medians.

``python benchmarks/compute_bench.py [--rounds 3] [--duration 8]`` measures:
(a) 32-row requests to the mlp model (64 -> 512 x 3 -> 10) at c=16 through ``servekit serve`` with batching,
    in rows/s, against onnxruntime in this process at batch 32 (and at the batch size that formed) with the same
    session options servekit uses (default intra-op threads, spinning off);
(b) one-row requests to the heavy model (512 -> 1536 x 3 -> 10) at c=64 with batching (max 64 rows,
    ``--heavy-timeout-us``), rows/s against in-process at the batch size that formed, and p99 against
    2 x the batch timeout + one 64-row batch's compute time.
Batch sizes formed come from the server's own metrics (``servekit_batch_size``). ``--profile DIR`` also records a
py-spy profile (speedscope JSON, ``--idle --threads``) of the server during the last round of each scenario.
Writes ``benchmarks/COMPUTE_RESULTS.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from models import INPUT_NAME, INPUT_WIDTH, heavy, mlp  # noqa: E402
from run import batching_file, free_port, machine, servekit_cmd, server, wrk  # noqa: E402


def inprocess(model: Path, name: str, batch: int, seconds: float, spinning: bool = False) -> float:
    """Rows/s of one onnxruntime session at ``batch`` rows, with servekit's session options."""
    so = ort.SessionOptions()
    so.log_severity_level = 3
    spin = "1" if spinning else "0"
    so.add_session_config_entry("session.intra_op.allow_spinning", spin)
    so.add_session_config_entry("session.inter_op.allow_spinning", spin)
    sess = ort.InferenceSession(str(model / "1" / "model.onnx"), so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((batch, INPUT_WIDTH[name])).astype(np.float32)
    feed = {INPUT_NAME[name]: x}
    for _ in range(5):
        sess.run(None, feed)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        sess.run(None, feed)
        n += 1
    return n * batch / (time.perf_counter() - t0)


def payload(name: str, rows: int) -> str:
    x = np.random.default_rng(1).standard_normal((rows, INPUT_WIDTH[name]))
    return json.dumps({"instances": [[round(float(v), 4) for v in row] for row in x]})


def batch_stats(port: int, model: str) -> dict[str, float]:
    text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    out: dict[str, float] = {}
    for metric in ("servekit_batch_size_sum", "servekit_batch_size_count"):
        m = re.search(rf'^{metric}{{[^}}]*model="{model}"[^}}]*}} ([\d.e+]+)', text, re.MULTILINE)
        out[metric] = float(m.group(1)) if m else 0.0
    for reason in ("full", "idle", "timeout", "target"):
        m = re.search(rf'^servekit_batches_total{{[^}}]*reason="{reason}"[^}}]*}} ([\d.e+]+)', text, re.MULTILINE)
        out[f"batches_{reason}"] = float(m.group(1)) if m else 0.0
    return out


def scenario(
    label: str,
    cmd: list[str],
    port: int,
    name: str,
    body: str,
    rows: int,
    conns: int,
    seconds: float,
    log: Path,
    profile: Path | None,
) -> dict[str, float]:
    with server(cmd, port, "/v2/health/ready", log=log) as proc:
        url = f"http://127.0.0.1:{port}/v1/models/{name}:predict"
        wrk(url, body, conns, 1)  # warm: threads, allocator, the cost model
        before = batch_stats(port, name)
        spy = None
        if profile is not None and shutil.which("py-spy"):
            out = profile / f"{label.replace(' ', '_')}.speedscope.json"
            spy = subprocess.Popen(
                ["py-spy", "record", "--pid", str(proc.pid), "--duration", str(max(1, int(seconds) - 1)),
                 "--format", "speedscope", "--idle", "--threads", "--rate", "200", "-o", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
        res = wrk(url, body, conns, seconds)
        if spy is not None:
            spy.wait(timeout=60)
        after = batch_stats(port, name)
    batches = after["servekit_batch_size_count"] - before["servekit_batch_size_count"]
    mean_batch = (after["servekit_batch_size_sum"] - before["servekit_batch_size_sum"]) / batches if batches else 0.0
    reasons = {k: after[k] - before[k] for k in after if k.startswith("batches_")}
    return {
        "rps": res["rps"],
        "rows_s": res["rps"] * rows,
        "p50_ms": res["p50_ms"],
        "p99_ms": res["p99_ms"],
        "non2xx": res["non2xx"],
        "mean_batch_rows": mean_batch,
        **reasons,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=8.0)
    parser.add_argument("--inprocess-seconds", type=float, default=2.0)
    parser.add_argument("--heavy-timeout-us", type=int, default=2000)
    parser.add_argument("--mlp-batch-threads", type=int, default=1)
    parser.add_argument("--heavy-batch-threads", type=int, default=1)
    parser.add_argument("--only", default="", help="mlp or heavy")
    parser.add_argument("--extra", default="", help="extra serve flags, space-separated")
    parser.add_argument("--profile", type=Path, default=None, help="folder for py-spy profiles of the last round")
    parser.add_argument("--out", type=Path, default=HERE / "COMPUTE_RESULTS.json")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="servekit-compute-bench-"))
    models = {"mlp": mlp(work / "mlp" / "1").parent, "heavy": heavy(work / "heavy" / "1").parent}
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    extra = args.extra.split() if args.extra else []
    plan = [
        ("mlp 32-row c=16", "mlp", 32, 16, batching_file(work / "b_mlp", 64, 1000, args.mlp_batch_threads)),
        (
            "heavy 1-row c=64",
            "heavy",
            1,
            64,
            batching_file(work / "b_heavy", 64, args.heavy_timeout_us, args.heavy_batch_threads),
        ),
    ]
    if args.only:
        plan = [p for p in plan if p[1] == args.only]
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        got: dict[str, Any] = {}
        for label, name, rows, conns, bfile in plan:
            port = free_port()
            cmd = servekit_cmd(models[name], name, port, "--batching_parameters_file", str(bfile), *extra)
            res = scenario(
                label,
                cmd,
                port,
                name,
                payload(name, rows),
                rows,
                conns,
                args.duration,
                work / "server.log",
                args.profile if r == args.rounds - 1 else None,
            )
            formed = max(1, round(res["mean_batch_rows"]))
            res["inproc_at_request_rows"] = inprocess(models[name], name, rows, args.inprocess_seconds)
            res["inproc_at_formed"] = inprocess(models[name], name, formed, args.inprocess_seconds)
            res["inproc_64"] = inprocess(models[name], name, 64, args.inprocess_seconds)
            got[label] = res
            print(
                f"round {r + 1} {label}: {res['rps']:,.0f} req/s = {res['rows_s']:,.0f} rows/s, p99 {res['p99_ms']:.1f}"
                f" ms, mean batch {res['mean_batch_rows']:.1f} rows; in-process {res['inproc_at_request_rows']:,.0f}"
                f" rows/s at {rows}, {res['inproc_at_formed']:,.0f} at {formed}, {res['inproc_64']:,.0f} at 64",
                flush=True,
            )
        rounds.append(got)
    summary = {}
    for label, name, _, _, _ in plan:
        vals = [r[label] for r in rounds]

        def med(key: str, vals: list[dict[str, float]] = vals) -> float:
            return statistics.median(v[key] for v in vals)

        entry = {
            "rows_s": med("rows_s"),
            "p99_ms": med("p99_ms"),
            "mean_batch_rows": med("mean_batch_rows"),
            "ratio_vs_inproc_request_rows": statistics.median(v["rows_s"] / v["inproc_at_request_rows"] for v in vals),
            "ratio_vs_inproc_formed": statistics.median(v["rows_s"] / v["inproc_at_formed"] for v in vals),
        }
        if name == "heavy":
            entry["p99_bound_ms"] = statistics.median(
                2 * args.heavy_timeout_us / 1e3 + 64 / v["inproc_64"] * 1e3 for v in vals
            )
        summary[label] = entry
        print(f"| {label} | " + " | ".join(f"{k} {v:,.3f}" for k, v in entry.items()) + " |")
    args.out.write_text(
        json.dumps({"machine": machine(), "args": vars(args), "rounds": rounds, "summary": summary}, default=str)
    )


if __name__ == "__main__":
    main()
