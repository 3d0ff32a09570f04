#!/usr/bin/env python3
"""Batch transform throughput: ``python benchmarks/transform_bench.py`` (never part of ``make test``).

For each benchmark model (tiny, mlp) on the same JSON Lines input (1M records by default, split into
``--files`` files so ``--instance-count`` instances have objects to share), in one session:

(a) the limit: a hand-written single-process loop (orjson per line → numpy batches of 1,024 → onnxruntime with
    one intra-op thread → orjson lines, written to a file), times the number of cores used by (c);
(b) the naive way: one ``Servable.predict`` per record, run on a sample and extrapolated to the full input;
(c) ``servekit transform run`` end to end as a subprocess (``--split-type Line``, MultiRecord, 6 MiB payloads,
    ``--instance-count 2``): wall time from launch to exit, so process start and model loading count;
(e) the hand-written loop end to end, as (c) is measured: ``transform_hand_loop.py`` launched as one script per
    core used by (c), each on its share of the files, wall time from launch until the last exits (Python start,
    imports and session creation included).
Python bytecode: where the environment sets ``PYTHONDONTWRITEBYTECODE`` (this machine's sessions do), every
start of (c) would compile servekit's modules from source while (e)'s numpy and onnxruntime load installed .pyc
files, which no pip-installed servekit does; so (c) and (e) run with bytecode caching on, into a
``PYTHONPYCACHEPREFIX`` under the work directory (the source tree is never written), after one warm-up run of
(c) that fills it. ``--no-bytecode-cache`` keeps the environment as it is.
(a), (c) and (e) run interleaved, ``--repeat`` rounds; each round's (c)/(e) is reported, so a ratio is never
taken across moments of a shared machine's load. (c)'s own summary gives the job's time from its start to its
end; the rest of (c)'s wall time is the CLI's start (interpreter, imports, command tree) before the job begins.

Peak memory is the largest sum of PSS over (c)'s process tree (sampled every 20 ms from /proc); (c) runs again
on a quarter of the input (a quarter of the files, each as large) to show that memory does not grow with input
size. (a)'s output is compared with (c)'s byte for byte. Writes ``benchmarks/TRANSFORM_RESULTS.md`` and
``benchmarks/transform_results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from models import BUILDERS, INPUT_WIDTH  # noqa: E402
from transform_hand_loop import limit_loop  # noqa: E402


def write_inputs(folder: Path, width: int, records: int, files: int, seed: int = 0) -> int:
    """``files`` JSON Lines files of ``width`` floats per record; returns the total bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    per_file = records // files
    total = 0
    for f in range(files):
        n = per_file + (1 if f < records % files else 0)
        with (folder / f"part-{f:03d}.jsonl").open("wb") as out:
            for start in range(0, n, 10_000):
                rows = np.round(
                    np.random.default_rng(rng.randrange(1 << 30)).normal(size=(min(10_000, n - start), width)), 4
                )
                out.write(b"".join(orjson.dumps(r) + b"\n" for r in rows.tolist()))
        total += (folder / f"part-{f:03d}.jsonl").stat().st_size
    return total


def _limit_share(args: tuple[Path, Path, Path, list[Path]]) -> tuple[float, int]:
    return limit_loop(*args)


def parallel_limit(model_dir: Path, inputs: Path, out_dir: Path, procs: int) -> tuple[float, int]:
    """(a'): the same loop in ``procs`` processes at once, each on its share of the files (measured, not scaled)."""
    import multiprocessing as mp

    files = sorted(inputs.iterdir())
    shares = [(model_dir, inputs, out_dir, files[i::procs]) for i in range(procs)]
    start = time.perf_counter()
    with mp.get_context("fork").Pool(procs) as pool:
        done = pool.map(_limit_share, shares)
    return time.perf_counter() - start, sum(n for _, n in done)


# The environment of (c) and (e); main() turns bytecode caching on unless --no-bytecode-cache.
CHILD_ENV: dict[str, str] = dict(os.environ)


def hand_processes(model_dir: Path, inputs: Path, out_dir: Path, procs: int) -> float:
    """(e): wall seconds for ``procs`` hand-loop scripts started at once, each on its share of the files."""
    files = sorted(inputs.iterdir())
    script = HERE / "transform_hand_loop.py"
    start = time.perf_counter()
    running = [
        subprocess.Popen(
            [sys.executable, str(script), str(model_dir), str(out_dir), *map(str, files[i::procs])], env=CHILD_ENV
        )
        for i in range(procs)
    ]
    codes = [p.wait() for p in running]
    elapsed = time.perf_counter() - start
    if any(codes):
        raise SystemExit(f"the hand loop failed: exit codes {codes}")
    return elapsed


def job_seconds(summary: str) -> float:
    """The job's own elapsed time from ``servekit transform run``'s summary ("records: ...; 1.2s (...)")."""
    m = re.search(r"records: .*; ([\d.]+)s \(", summary)
    return float(m.group(1)) if m else float("nan")


def naive_loop(model_dir: Path, inputs: Path, sample: int) -> tuple[float, int]:
    """(b): one servable.predict per record, on the first ``sample`` records."""
    from servekit.config.models import RuntimeOptions
    from servekit.serving.runtime.registry import RuntimeRegistry

    servable = RuntimeRegistry().load(model_dir, options=RuntimeOptions(intra_op_threads=1, inter_op_threads=1))
    sig = servable.signatures["serving_default"]
    name = sig.inputs[0].name
    n = 0
    sink = bytearray()
    start = time.perf_counter()
    with sorted(inputs.iterdir())[0].open("rb") as f:
        for line in f:
            x = np.array([orjson.loads(line)], dtype=np.float32)
            out = servable.predict(sig.name, {name: x})
            sink += orjson.dumps({k: v[:1].tolist()[0] for k, v in out.items()}) + b"\n"
            n += 1
            if n == sample:
                break
    return time.perf_counter() - start, n


class TreeRss:
    """Largest sum of memory (PSS) over a process and its descendants, sampled from /proc."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._interval = interval

    def __enter__(self) -> TreeRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @staticmethod
    def _children(pid: int) -> list[int]:
        out = []
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                text = Path(f"/proc/{pid}/task/{task}/children").read_text()
                out += [int(c) for c in text.split()]
        except OSError:
            pass
        return out

    @staticmethod
    def _rss(pid: int) -> int:
        """Proportional set size: pages shared by forked processes are split among them, not counted twice."""
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            pass
        return 0

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            seen, todo, total = set(), [self.pid], 0
            while todo:
                p = todo.pop()
                if p in seen:
                    continue
                seen.add(p)
                total += self._rss(p)
                todo += self._children(p)
            self.peak = max(self.peak, total)


def servekit_cmd(name: str, model_dir: Path, inputs: Path, out: Path, home: Path, instances: int) -> list[str]:
    script = Path(sys.executable).parent / "servekit"
    exe = [str(script)] if script.exists() else [sys.executable, "-m", "servekit.cli.main"]
    return [
        *exe,
        "transform",
        "run",
        "--name",
        name,
        "--model",
        str(model_dir),
        "--input",
        str(inputs),
        "--output-path",
        str(out),
        "--split-type",
        "Line",
        "--instance-count",
        str(instances),
        "--home",
        str(home),
        "--quiet",
    ]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_servekit(cmd: list[str]) -> tuple[float, int, str, float]:
    """Wall seconds, peak PSS of the process tree, output, and CPU seconds of the whole tree."""
    cpu = _children_cpu()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=CHILD_ENV)
    with TreeRss(proc.pid) as rss:
        text = proc.communicate()[0].decode()
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"servekit transform failed ({proc.returncode}):\n{text}")
    return elapsed, rss.peak, text, _children_cpu() - cpu


def same_outputs(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir())
    return names == sorted(p.name for p in b.iterdir()) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names
    )


def bench_model(model: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    model_dir = BUILDERS[model](work / "models" / model / "1")
    inputs = work / f"in-{model}"
    small = work / f"in-{model}-small"
    size = write_inputs(inputs, INPUT_WIDTH[model], args.records, args.files)
    small_files = max(args.instances, args.files // 4)
    small_records = args.records * small_files // args.files
    write_inputs(small, INPUT_WIDTH[model], small_records, small_files, seed=1)
    print(f"[{model}] input: {args.records:,} records in {args.files} files, {size / 1e6:.0f} MB", flush=True)
    cores = args.instances

    home = work / "home"
    # One run before the clock: fills the bytecode cache and the page cache for what (c) imports.
    warm = f"warm-{model}-{int(time.time())}"
    run_servekit(servekit_cmd(warm, model_dir, small, work / f"out-warm-{model}", home, 1))
    a_runs, c_runs, e_runs = [], [], []
    for rep in range(args.repeat):  # interleaved, best of each: the machine may be shared
        cpu, load = time.process_time(), os.getloadavg()[0]
        a_s, a_n = limit_loop(model_dir, inputs, work / f"out-a-{model}")
        a_runs.append((a_s, time.process_time() - cpu))
        print(f"[{model}] (a) one process {a_n / a_s:,.0f} rec/s ({a_s:.1f}s; load avg before {load:.2f})", flush=True)
        stamp = f"{model}-{rep}-{int(time.time())}"
        cmd = servekit_cmd(f"bench-{stamp}", model_dir, inputs, work / f"out-c-{model}-{rep}", home, args.instances)
        load = os.getloadavg()[0]
        c_runs.append((*run_servekit(cmd), cmd))
        c_job = job_seconds(c_runs[-1][2])
        print(
            f"[{model}] (c) servekit {args.records / c_runs[-1][0]:,.0f} rec/s ({c_runs[-1][0]:.2f}s, of which the job"
            f" {c_job:.2f}s; CPU {c_runs[-1][3]:.1f}s; load avg before {load:.2f})",
            flush=True,
        )
        load = os.getloadavg()[0]
        e_s = hand_processes(model_dir, inputs, work / f"out-e-{model}", cores)
        e_runs.append(e_s)
        print(
            f"[{model}] (e) {cores} hand-loop scripts {args.records / e_s:,.0f} rec/s ({e_s:.2f}s; load avg before"
            f" {load:.2f}); this round's (c)/(e) {e_s / c_runs[-1][0]:.2f}",
            flush=True,
        )
    a_s, a_cpu = min(a_runs)
    a_rate = a_n / a_s * cores
    c_s, c_peak, c_text, c_cpu, cmd = min(c_runs, key=lambda r: r[0])
    c_rate = args.records / c_s
    e_rate = args.records / min(e_runs)
    round_ratios = [e / c[0] for c, e in zip(c_runs, e_runs, strict=True)]
    p_s, p_n = parallel_limit(model_dir, inputs, work / f"out-p-{model}", cores)
    p_rate = p_n / p_s
    print(f"[{model}] (a') {cores} limit loops at once, measured: {p_rate:,.0f} rec/s", flush=True)

    b_s, b_n = naive_loop(model_dir, inputs, args.naive_sample)
    b_rate = b_n / b_s
    print(f"[{model}] (b) naive {b_rate:,.0f} rec/s on {b_n:,} records, extrapolated", flush=True)

    small_cmd = servekit_cmd(
        f"bench-small-{model}-{int(time.time())}", model_dir, small, work / f"out-c-small-{model}", home, args.instances
    )
    s_s, s_peak, _, _ = run_servekit(small_cmd)
    identical = same_outputs(work / f"out-a-{model}", work / f"out-c-{model}-0")
    print(
        f"[{model}] best (c) {c_rate:,.0f} rec/s ({c_s:.1f}s), peak memory {c_peak / 2**20:.0f} MiB "
        f"({small_records:,} records: {s_peak / 2**20:.0f} MiB); (c)/(a) {c_rate / a_rate:.2f}, "
        f"(c)/(a') {c_rate / p_rate:.2f}, (c)/(b) {c_rate / b_rate:.1f}x; CPU us/record (a) "
        f"{a_cpu / a_n * 1e6:.2f} (c) {c_cpu / args.records * 1e6:.2f}; outputs of (a) and (c) identical: {identical};"
        f" (c)/(e) by round {', '.join(f'{r:.2f}' for r in round_ratios)}",
        flush=True,
    )
    return {
        "model": model,
        "records": args.records,
        "files": args.files,
        "input_bytes": size,
        "a_one_process_s": a_s,
        "a_records_per_s": a_rate,
        "a_cpu_us_per_record": a_cpu / a_n * 1e6,
        "a_parallel_records_per_s": p_rate,
        "c_over_a_parallel": c_rate / p_rate,
        "c_cpu_us_per_record": c_cpu / args.records * 1e6,
        "c_all_runs_s": [r[0] for r in c_runs],
        "c_job_s": job_seconds(c_text),
        "c_all_job_s": [job_seconds(r[2]) for r in c_runs],
        "e_all_runs_s": e_runs,
        "e_records_per_s": e_rate,
        "c_over_e_by_round": round_ratios,
        "c_over_e_best": c_rate / e_rate,
        "a_all_runs_s": [r[0] for r in a_runs],
        "b_sample": b_n,
        "b_records_per_s": b_rate,
        "b_extrapolated_s": args.records / b_rate,
        "c_s": c_s,
        "c_records_per_s": c_rate,
        "c_peak_pss_bytes": c_peak,
        "c_small_records": small_records,
        "c_small_s": s_s,
        "c_small_peak_pss_bytes": s_peak,
        "c_over_a": c_rate / a_rate,
        "c_over_b": c_rate / b_rate,
        "outputs_identical": identical,
        "command": " ".join(cmd),
        "summary": c_text.strip(),
    }


def render(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    lines = [
        "# Batch transform benchmark",
        "",
        f"`{meta['command']}` on {meta['cpu']} ({meta['cores']} cores), Python {meta['python']}.",
        "",
        "| model | input | (a) limit rec/s | (a') measured rec/s | (b) naive rec/s | (c) servekit rec/s | (c) job s"
        " / wall s | (e) hand scripts rec/s | (c)/(a) | (c)/(a') | (c)/(e) by round | (c)/(b) | CPU us/rec (a) / (c)"
        " | (c) peak PSS | peak PSS, 1/4 input | (a)=(c) bytes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['model']} | {r['records']:,} rec, {r['files']} files, {r['input_bytes'] / 1e6:.0f} MB "
            f"| {r['a_records_per_s']:,.0f} | {r['a_parallel_records_per_s']:,.0f} | {r['b_records_per_s']:,.0f} "
            f"| {r['c_records_per_s']:,.0f} | {r['c_job_s']:.2f} / {r['c_s']:.2f} | {r['e_records_per_s']:,.0f} "
            f"| {r['c_over_a']:.2f} | {r['c_over_a_parallel']:.2f} "
            f"| {', '.join(f'{x:.2f}' for x in r['c_over_e_by_round'])} "
            f"| {r['c_over_b']:.1f}x "
            f"| {r['a_cpu_us_per_record']:.2f} / {r['c_cpu_us_per_record']:.2f} "
            f"| {r['c_peak_pss_bytes'] / 2**20:.0f} MiB "
            f"| {r['c_small_peak_pss_bytes'] / 2**20:.0f} MiB | {r['outputs_identical']} |"
        )
    lines += [
        "",
        "(a) one process measured on the whole input, multiplied by the cores (c) uses; (a') the same loop run in "
        "that many processes at once, measured (what this machine really gives them); (b) measured on "
        f"{results[0]['b_sample']:,} records and extrapolated; (c) wall time of the command below, process start "
        "and model loading included (the job's own time first: the rest is the CLI starting); (e) the hand loop as "
        "one script per core, started as (c) is, wall time to the last exit; (a), (c) and (e) are the best of "
        "interleaved runs, and (c)/(e) is given for each round. CPU us/rec: CPU time (user + system, every "
        "process) per record. Targets: (c) >= 0.9 x (a) (issue 16) and >= 10 x (b).",
        "",
    ]
    for r in results:
        lines += [f"(c) for {r['model']}:", "", "```", r["command"], r["summary"], "```", ""]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=8, help="input files (objects are what instances share)")
    ap.add_argument("--instances", type=int, default=2)
    ap.add_argument("--models", default="tiny,mlp")
    ap.add_argument("--naive-sample", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=2, help="runs of (a) and (c), interleaved; the best counts")
    ap.add_argument("--workdir", type=Path, default=None, help="keep inputs and outputs here (default: a temp dir)")
    ap.add_argument("--no-write", action="store_true", help="do not write the results files")
    ap.add_argument(
        "--no-bytecode-cache", action="store_true", help="run (c) and (e) in this environment as it is (see above)"
    )
    args = ap.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="servekit-transform-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    if not args.no_bytecode_cache:
        CHILD_ENV.pop("PYTHONDONTWRITEBYTECODE", None)
        CHILD_ENV["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
    try:
        results = [bench_model(m, args, work) for m in args.models.split(",")]
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    cpu = next(
        (ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines() if "model name" in ln),
        platform.processor(),
    )
    meta = {
        "command": "python benchmarks/transform_bench.py " + " ".join(sys.argv[1:]),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
    }
    print(render(results, meta))
    if not args.no_write:
        (HERE / "transform_results.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
        (HERE / "TRANSFORM_RESULTS.md").write_text(render(results, meta))


if __name__ == "__main__":
    main()
