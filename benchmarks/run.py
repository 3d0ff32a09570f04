#!/usr/bin/env python3
"""The benchmark suite in one command: ``python benchmarks/run.py`` (``make bench``).

Measures, in one session on this machine, side by side:
- the limit: in-process onnxruntime rows/s at batch sizes 1..256 for each model;
- the HTTP ceiling: a bare Starlette endpoint that parses the JSON body and returns a constant;
- the naive way: FastAPI + one onnxruntime call per request (needs the ``bench`` extra);
- servekit serve: tiny without and with batching at concurrency 1 and 64, heavy with batching at 64, and
  tiny with ``--workers 2`` versus 1 with the load generator pinned to one core;
- optional peer servers, off by default: ``--peers mlserver,torchserve`` serves the same tiny model.onnx with
  Seldon MLServer and TorchServe, each from its own venv under benchmarks/.venvs/ (see benchmarks/peers/).
Load comes from wrk (one row per request, closed loop). Writes ``benchmarks/RESULTS.md`` and
``benchmarks/results.json``. Never part of ``make test``: timings belong here, not in pass/fail tests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import requests

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from models import INPUT_NAME, INPUT_WIDTH, build_all  # noqa: E402

BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def machine() -> dict[str, Any]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "onnxruntime": ort.__version__,
        "platform": platform.platform(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def inprocess(model_dir: Path, name: str, seconds: float) -> dict[int, float]:
    """Rows/s of a bare onnxruntime session at each batch size (the physical limit)."""
    session = ort.InferenceSession(str(model_dir / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    out = {}
    for batch in BATCH_SIZES:
        x = rng.standard_normal((batch, INPUT_WIDTH[name])).astype(np.float32)
        feed = {INPUT_NAME[name]: x}
        for _ in range(3):
            session.run(None, feed)
        n, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            session.run(None, feed)
            n += 1
        out[batch] = n * batch / (time.perf_counter() - started)
    return out


def body(name: str) -> str:
    row = [round(float(v), 4) for v in np.random.default_rng(1).standard_normal(INPUT_WIDTH[name])]
    return json.dumps({"instances": [row]})


@contextlib.contextmanager
def server(
    cmd: list[str], port: int, ready_path: str, env: dict[str, str] | None = None, log: Path | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    out = log.open("wb") if log else subprocess.DEVNULL
    proc = subprocess.Popen(
        cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}; see {log}")
            with contextlib.suppress(requests.RequestException):
                method = requests.post if ready_path.endswith(":predict") else requests.get
                r = method(f"http://127.0.0.1:{port}{ready_path}", data=body("tiny"), timeout=2)
                if r.status_code == 200:
                    break
            time.sleep(0.2)
        else:
            raise RuntimeError(f"{cmd} not ready")
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if log and not isinstance(out, int):
            out.close()


_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    return float(m.group(1)) * _UNITS[m.group(2)] if m else float("nan")


def wrk(url: str, payload: str, connections: int, seconds: float, pin: str | None = None) -> dict[str, float]:
    """Closed-loop load with wrk; returns req/s, latency percentiles (ms) and non-2xx count."""
    script = Path(tempfile.mkstemp(suffix=".lua")[1])
    script.write_text(
        f'wrk.method = "POST"\nwrk.body = {json.dumps(payload)}\nwrk.headers["Content-Type"] = "application/json"\n'
    )
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency", "-s", str(script), url]
    if pin is not None:
        cmd = ["taskset", "-c", pin, *cmd]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    script.unlink()
    res: dict[str, float] = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))}  # type: ignore[union-attr]
    for pct in ("50", "90", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+(\S+)", text, re.MULTILINE)
        res[f"p{pct}_ms"] = _ms(m.group(1)) if m else float("nan")
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    res["non2xx"] = float(m.group(1)) if m else 0.0
    m = re.search(r"Socket errors:.*", text)
    res["socket_errors"] = m.group(0) if m else ""  # type: ignore[assignment]
    return res


def servekit_cmd(model_dir: Path, name: str, port: int, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "servekit.cli.main",
        "serve",
        "--host",
        "127.0.0.1",
        "--rest_api_port",
        str(port),
        "--model_name",
        name,
        "--model_base_path",
        str(model_dir),
        "--log_level",
        "warning",
        *extra,
    ]


def batching_file(path: Path, max_batch: int, timeout_us: int, threads: int) -> Path:
    path.write_text(
        f"max_batch_size {{ value: {max_batch} }}\n"
        f"batch_timeout_micros {{ value: {timeout_us} }}\n"
        f"max_enqueued_batches {{ value: 64 }}\n"
        f"num_batch_threads {{ value: {threads} }}\n"
    )
    return path


def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="servekit-bench-"))
    models = build_all(work / "models")
    results: dict[str, Any] = {"machine": machine(), "duration_s": args.duration, "runs": {}, "inprocess": {}}
    runs = results["runs"]
    logs = work / "logs"
    logs.mkdir()

    for name in ("tiny", "mlp", "heavy"):
        results["inprocess"][name] = inprocess(models[name], name, args.inprocess_seconds)
        print(f"in-process {name}: " + ", ".join(f"{b}:{r:,.0f}" for b, r in results["inprocess"][name].items()))

    def load(
        label: str, url: str, name: str, conns: tuple[int, ...], pin: str | None = None, payload: str | None = None
    ) -> None:
        for c in conns:
            r = wrk(url, payload or body(name), c, args.duration, pin)
            runs[f"{label} c={c}"] = r
            print(
                f"{label:40s} c={c:<3d} {r['rps']:>10,.0f} req/s  p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms"
                f"  non-2xx {r['non2xx']:.0f}"
            )

    port = free_port()
    with server(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "baselines.bare_app:app",
            "--app-dir",
            str(HERE),
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        port,
        "/v1/models/tiny:predict",
        log=logs / "bare.log",
    ):
        load("bare starlette (ceiling)", f"http://127.0.0.1:{port}/v1/models/tiny:predict", "tiny", (1, 64))

    try:
        import fastapi  # noqa: F401

        have_fastapi = True
    except ImportError:
        have_fastapi = False
        print("fastapi not installed: skipping the naive baseline (pip install -e '.[bench]')")
    if have_fastapi:
        for workers in (1, 2):
            port = free_port()
            with server(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "baselines.naive_app:app",
                    "--app-dir",
                    str(HERE),
                    "--port",
                    str(port),
                    "--log-level",
                    "warning",
                    "--no-access-log",
                    "--workers",
                    str(workers),
                ],
                port,
                "/v1/models/tiny:predict",
                env={"NAIVE_MODEL": str(models["tiny"] / "1" / "model.onnx")},
                log=logs / f"naive{workers}.log",
            ):
                load(
                    f"naive fastapi+ort ({workers} worker)",
                    f"http://127.0.0.1:{port}/v1/models/tiny:predict",
                    "tiny",
                    (64,),
                )

    batch_tiny = batching_file(work / "batch_tiny.config", 64, 1000, 2)
    batch_heavy = batching_file(work / "batch_heavy.config", 64, args.heavy_timeout_us, 1)
    scenarios: list[tuple[str, str, tuple[str, ...], tuple[int, ...], str | None]] = [
        ("servekit tiny", "tiny", (), (1, 64), None),
        ("servekit tiny batching", "tiny", ("--batching_parameters_file", str(batch_tiny)), (1, 64), None),
        ("servekit heavy batching", "heavy", ("--batching_parameters_file", str(batch_heavy)), (64,), None),
        ("servekit heavy", "heavy", (), (64,), None),
        (
            "servekit tiny batching 1 worker, wrk on core 1",
            "tiny",
            ("--batching_parameters_file", str(batch_tiny)),
            (64,),
            "1",
        ),
        (
            "servekit tiny batching 2 workers, wrk on core 1",
            "tiny",
            ("--batching_parameters_file", str(batch_tiny), "--workers", "2"),
            (64,),
            "1",
        ),
    ]
    for label, name, extra, conns, pin in scenarios:
        port = free_port()
        cmd = servekit_cmd(models[name], name, port, *extra)
        with server(cmd, port, "/v2/health/ready", log=logs / f"{label.replace(' ', '_')}.log"):
            load(label, f"http://127.0.0.1:{port}/v1/models/{name}:predict", name, conns, pin)
    results["heavy_batch_timeout_us"] = args.heavy_timeout_us
    if args.peers:
        from peers import run_peer

        def measure(label: str, url: str, payload: str) -> list[str]:
            load(label, url, "tiny", (1, 64), payload=payload)
            return [f"{label} c={c}" for c in (1, 64)]

        row = json.loads(body("tiny"))["instances"][0]
        onnx_file = models["tiny"] / "1" / "model.onnx"
        results["peers"] = {p: run_peer(p, onnx_file, row, work / "peers", logs, measure) for p in args.peers}
    shutil.rmtree(work / "models", ignore_errors=True)
    return results


def ratios(res: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(what, measured, target, met) rows for the issue's targets."""
    runs, inproc = res["runs"], res["inprocess"]
    rows = []

    def rps(key: str) -> float | None:
        return runs[key]["rps"] if key in runs else None

    def row(what: str, num: float | None, den: float | None, target: float) -> None:
        if num is None or den is None or den == 0:
            rows.append((what, "n/a", f">= {target:.0%}", "not measured"))
            return
        r = num / den
        rows.append((what, f"{r:.0%} ({num:,.0f} / {den:,.0f})", f">= {target:.0%}", "yes" if r >= target else "no"))

    row(
        "tiny c=64 vs bare Starlette c=64",
        rps("servekit tiny batching c=64"),
        rps("bare starlette (ceiling) c=64"),
        0.6,
    )
    row(
        "tiny c=1 batching vs bare Starlette c=1",
        rps("servekit tiny batching c=1"),
        rps("bare starlette (ceiling) c=1"),
        0.3,
    )
    best_heavy = max(inproc["heavy"].values())
    row("heavy c=64 batching vs best in-process rows/s", rps("servekit heavy batching c=64"), best_heavy, 0.8)
    row(
        "workers 2 vs 1 (tiny, wrk on core 1)",
        rps("servekit tiny batching 2 workers, wrk on core 1 c=64"),
        rps("servekit tiny batching 1 worker, wrk on core 1 c=64"),
        1.6,
    )
    if "naive fastapi+ort (1 worker) c=64" in runs:
        row(
            "tiny c=64 vs naive FastAPI (1 worker)",
            rps("servekit tiny batching c=64"),
            rps("naive fastapi+ort (1 worker) c=64"),
            1.0,
        )
    if res.get("peers"):
        peer_runs = [k for info in res["peers"].values() for k in info["runs"] if k.endswith(" c=64")]
        best = max(peer_runs, key=lambda k: runs[k]["rps"], default=None)
        row(
            f"servekit tiny c=64 vs best peer ({best.removesuffix(' c=64') if best else 'no peer ran'})",
            rps("servekit tiny batching c=64"),
            rps(best) if best else None,
            1.0,
        )
    heavy = runs.get("servekit heavy batching c=64")
    if heavy:
        batch_cost_ms = 64 / max(inproc["heavy"][64], 1e-9) * 1e3
        bound = 2 * res["heavy_batch_timeout_us"] / 1e3 + batch_cost_ms
        rows.append(
            (
                "heavy p99 vs 2 x timeout + one batch (64 rows)",
                f"{heavy['p99_ms']:.1f} ms",
                f"<= {bound:.1f} ms",
                "yes" if heavy["p99_ms"] <= bound else "no",
            )
        )
    return rows


def write_markdown(res: dict[str, Any], path: Path) -> None:
    m = res["machine"]
    lines = [
        "# servekit benchmark results",
        "",
        f"Written by `python benchmarks/run.py` on {m['date']}: {m['cpu']}, {m['cores']} cores, Python {m['python']},"
        f" onnxruntime {m['onnxruntime']}. Load: wrk, one thread, closed loop, one row per request,"
        f" {res['duration_s']} s per run, on the same machine as the server unless pinned.",
        "",
        "## Targets (ratios against baselines measured in the same run)",
        "",
        "| what | measured | target | met |",
        "|---|---|---|---|",
        *[f"| {a} | {b} | {c} | {d} |" for a, b, c, d in ratios(res)],
        "",
        "## HTTP runs",
        "",
        "| server | req/s | p50 ms | p90 ms | p99 ms | non-2xx |",
        "|---|---:|---:|---:|---:|---:|",
        *[
            f"| {k} | {v['rps']:,.0f} | {v['p50_ms']:.2f} | {v['p90_ms']:.2f} | {v['p99_ms']:.2f} | {v['non2xx']:.0f} |"
            for k, v in res["runs"].items()
        ],
        "",
        "## In-process onnxruntime (rows/s by batch size)",
        "",
        "| model | " + " | ".join(str(b) for b in BATCH_SIZES) + " |",
        "|---|" + "---:|" * len(BATCH_SIZES),
        *[
            f"| {name} | " + " | ".join(f"{r:,.0f}" for r in sweep.values()) + " |"
            for name, sweep in res["inprocess"].items()
        ],
        "",
    ]
    if res.get("peers"):
        lines += [
            "## Peer servers (`--peers`, same tiny model.onnx, same wrk settings)",
            "",
            "| peer | versions | setup | status |",
            "|---|---|---|---|",
            *[
                f"| {name} | {', '.join(f'{k} {v}' for k, v in info['versions'].items()) or 'n/a'} | {info['setup']}"
                f" | {' '.join(info['status'].split()).replace('|', '/')[:800]} |"
                for name, info in res["peers"].items()
            ],
            "",
        ]
    path.write_text("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    parser.add_argument("--inprocess-seconds", type=float, default=1.0, help="seconds per in-process batch size")
    parser.add_argument("--heavy-timeout-us", type=int, default=2000, help="batch timeout for the heavy model")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument(
        "--peers",
        type=lambda s: [p.strip() for p in s.split(",") if p.strip()],
        default=[],
        help="comma-separated peer servers to measure too (mlserver, torchserve); off by default, installs each"
        " into benchmarks/.venvs/<peer> on first use",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install wrk")
    res = run(args)
    write_markdown(res, args.out)
    (args.out.parent / "results.json").write_text(json.dumps(res, indent=2, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
