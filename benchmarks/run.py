#!/usr/bin/env python3
"""The benchmark suite in one command: ``python benchmarks/run.py`` (``make bench``).

Measures, in one session on this machine, side by side:
- the limit: in-process onnxruntime rows/s at batch sizes 1..256 for each model;
- the HTTP ceiling: a bare Starlette endpoint that parses the JSON body and returns a constant;
- the naive way: FastAPI + one onnxruntime call per request (needs the ``bench`` extra);
- servekit serve: tiny without and with batching at concurrency 1 and 64, heavy with batching at 64, and
  tiny with ``--workers 2`` versus 1 with the load generator pinned to one core;
- peer servers serving the same tiny model.onnx: Seldon MLServer, TorchServe, BentoML and Ray Serve, each from
  its own venv under benchmarks/.venvs/ (see benchmarks/peers/). By default only the peers whose venv is already
  installed run (the others are skipped with the command that installs them); ``--peers a,b`` names peers and
  installs their venvs on first use, ``--peers none`` measures none;
- ``--tiny-only``: just what the peer comparison needs (bare app, servekit tiny, the peers), for a short run;
- ``--head-to-head torchserve:batching``: instead of the suite, servekit tiny batching and one peer variant up at
  once, measured in alternation for ``--rounds`` rounds, so each ratio compares runs seconds apart.
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
AFTER_PEERS = "servekit tiny batching, again after the peers"


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
    results["command"] = "python benchmarks/run.py " + " ".join(sys.argv[1:])
    runs = results["runs"]
    logs = work / "logs"
    logs.mkdir()

    for name in ("tiny",) if args.tiny_only else ("tiny", "mlp", "heavy"):
        results["inprocess"][name] = inprocess(models[name], name, args.inprocess_seconds)
        print(f"in-process {name}: " + ", ".join(f"{b}:{r:,.0f}" for b, r in results["inprocess"][name].items()))

    def load(
        label: str, url: str, name: str, conns: tuple[int, ...], pin: str | None = None, payload: str | None = None
    ) -> None:
        for c in conns:
            load_before = os.getloadavg()[0]
            r = wrk(url, payload or body(name), c, args.duration, pin)
            r["load1"] = load_before  # the machine may be shared: the 1-minute load average before the run
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
    if have_fastapi and not args.tiny_only:
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
    if args.tiny_only:
        scenarios = [sc for sc in scenarios if sc[0] in ("servekit tiny", "servekit tiny batching")]
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
        # The peers run minutes after servekit did; measuring servekit again shows how far the load moved.
        port = free_port()
        cmd = servekit_cmd(models["tiny"], "tiny", port, "--batching_parameters_file", str(batch_tiny))
        with server(cmd, port, "/v2/health/ready", log=logs / "servekit_after_peers.log"):
            load(AFTER_PEERS, f"http://127.0.0.1:{port}/v1/models/tiny:predict", "tiny", (1, 64))
    shutil.rmtree(work / "models", ignore_errors=True)
    return results


def head_to_head(args: argparse.Namespace) -> dict[str, Any]:
    """servekit tiny batching and one peer variant, both serving at once, measured in alternation for
    ``--rounds`` rounds at c=64 (and c=1): each round's ratio compares runs seconds apart, so a shared machine's
    changing load moves both sides alike."""
    from peers import load as load_peer

    name, _, variant = args.head_to_head.partition(":")
    work = Path(tempfile.mkdtemp(prefix="servekit-h2h-"))
    models = build_all(work / "models")
    logs = work / "logs"
    logs.mkdir()
    mod = load_peer(name)
    python = mod.install(logs / f"{name}-install.log")
    if variant not in mod.VARIANTS:
        sys.exit(f"{name} has the variants {mod.VARIANTS}, not {variant!r}")
    peer_label = f"{name} tiny{' ' + variant if variant else ''}"
    row = json.loads(body("tiny"))["instances"][0]
    prepared = mod.prepare(python, models["tiny"] / "1" / "model.onnx", work / name, variant)
    batch_tiny = batching_file(work / "batch_tiny.config", 64, 1000, 2)
    port = free_port()
    cmd = servekit_cmd(models["tiny"], "tiny", port, "--batching_parameters_file", str(batch_tiny))
    rounds: list[dict[str, Any]] = []
    with (
        server(cmd, port, "/v2/health/ready", log=logs / "servekit.log"),
        mod.serve(python, prepared, logs / "peer.log") as peer_url,
    ):
        targets = [
            ("servekit tiny batching", f"http://127.0.0.1:{port}/v1/models/tiny:predict", body("tiny")),
            (peer_label, peer_url, mod.payload(row)),
        ]
        for _label, url, payload in targets:  # warm both up outside the clock: a JVM peer speeds up for ~20 s
            wrk(url, payload, 64, args.warmup)
        for i in range(args.rounds):
            for c in (64, 1):
                got = {}
                for label, url, payload in targets if i % 2 == 0 else targets[::-1]:
                    load1 = os.getloadavg()[0]
                    got[label] = wrk(url, payload, c, args.duration) | {"load1": load1}
                ratio = got["servekit tiny batching"]["rps"] / got[peer_label]["rps"]
                rounds.append({"round": i + 1, "c": c, "runs": got, "ratio": ratio})
                print(
                    f"round {i + 1} c={c}: servekit {got['servekit tiny batching']['rps']:,.0f} req/s, {peer_label} "
                    f"{got[peer_label]['rps']:,.0f} req/s: {ratio:.2f}x (load {load1:.2f})",
                    flush=True,
                )
    shutil.rmtree(work, ignore_errors=True)
    return {
        "machine": machine(),
        "peer": peer_label,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "rounds": rounds,
    }


def write_head_to_head(res: dict[str, Any], path: Path) -> None:
    m = res["machine"]
    lines = [
        f"# Head to head: servekit tiny batching vs {res['peer']}, interleaved",
        "",
        f"`python benchmarks/run.py --head-to-head {sys.argv[sys.argv.index('--head-to-head') + 1]} --rounds "
        f"{len({r['round'] for r in res['rounds']})} --duration {res['duration_s']:g} --warmup {res['warmup_s']:g}`"
        f" on {m['date']}: {m['cpu']},"
        f" {m['cores']} cores. Both servers up at once; wrk runs alternate between them (the order flips each"
        " round), so each ratio compares runs seconds apart.",
        "",
        "| round | c | servekit req/s | p99 ms | peer req/s | p99 ms | servekit / peer | load avg before |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["rounds"]:
        sk, peer = r["runs"]["servekit tiny batching"], r["runs"][res["peer"]]
        lines.append(
            f"| {r['round']} | {r['c']} | {sk['rps']:,.0f} | {sk['p99_ms']:.1f} | {peer['rps']:,.0f} "
            f"| {peer['p99_ms']:.1f} | {r['ratio']:.2f} | {sk['load1']:.2f} |"
        )
    path.write_text("\n".join(lines) + "\n")


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
        0.8,  # issue 16, goal 2
    )
    row(
        "tiny c=1 batching vs bare Starlette c=1",
        rps("servekit tiny batching c=1"),
        rps("bare starlette (ceiling) c=1"),
        0.5,  # issue 16, goal 2
    )
    best_heavy = max(inproc["heavy"].values()) if "heavy" in inproc else None
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
            2.0,  # issue 16, goal 2
        )
        if AFTER_PEERS + " c=64" in runs:
            row(
                "servekit tiny c=64 measured again after the peers vs best peer",
                rps(AFTER_PEERS + " c=64"),
                rps(best) if best else None,
                2.0,
            )
    heavy = runs.get("servekit heavy batching c=64")
    if heavy and "heavy" in inproc:
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
        f"Written by `{res.get('command', 'python benchmarks/run.py')}` on {m['date']}: {m['cpu']}, {m['cores']} cores,"
        f" Python {m['python']},"
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
        "| server | req/s | p50 ms | p90 ms | p99 ms | non-2xx | load avg before |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *[
            f"| {k} | {v['rps']:,.0f} | {v['p50_ms']:.2f} | {v['p90_ms']:.2f} | {v['p99_ms']:.2f} | {v['non2xx']:.0f} "
            f"| {v.get('load1', float('nan')):.2f} |"
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


def choose_peers(arg: str) -> list[str]:
    """The peers to measure; with ``installed``, says which are skipped and how to install them."""
    from peers import PEERS, installed

    if arg == "none":
        return []
    if arg != "installed":
        return [p.strip() for p in arg.split(",") if p.strip()]
    chosen = [p for p in PEERS if installed(p)]
    for p in PEERS:
        if p not in chosen:
            print(
                f"peer {p} skipped: its venv benchmarks/.venvs/{p} is not installed (`python benchmarks/run.py"
                f" --peers {p}` installs it on first use)",
                flush=True,
            )
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per wrk run")
    parser.add_argument("--inprocess-seconds", type=float, default=1.0, help="seconds per in-process batch size")
    parser.add_argument("--heavy-timeout-us", type=int, default=2000, help="batch timeout for the heavy model")
    parser.add_argument("--out", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument(
        "--peers",
        default="installed",
        help="comma-separated peer servers to measure (mlserver, torchserve, bentoml, rayserve), each installed into"
        " benchmarks/.venvs/<peer> on first use; 'installed' (the default): those already installed; 'none'",
    )
    parser.add_argument(
        "--tiny-only", action="store_true", help="only the bare app, servekit tiny (c=1, 64) and the peers"
    )
    parser.add_argument(
        "--head-to-head",
        default="",
        metavar="PEER[:VARIANT]",
        help="instead of the suite: servekit tiny batching and this peer variant (e.g. torchserve:batching), "
        "measured in alternation for --rounds rounds; writes the table to --out",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds of --head-to-head")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds of c=64 load on each before --head-to-head")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed: apt-get install wrk")
    if args.head_to_head:
        out = args.out if args.out != HERE / "RESULTS.md" else HERE / "HEAD_TO_HEAD.md"
        write_head_to_head(head_to_head(args), out)
        print(f"wrote {out}")
        return
    args.peers = choose_peers(args.peers)
    res = run(args)
    write_markdown(res, args.out)
    (args.out.parent / "results.json").write_text(json.dumps(res, indent=2, default=str))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
