#!/usr/bin/env python3
"""HTTP servers and stacks side by side: the bare ASGI app and servekit under each, interleaved, medians.

``python benchmarks/http_stack_bench.py [--rounds 3] [--duration 5]`` measures, for each target:
- c=1 latency over one kept-alive connection (``--requests`` sequential requests from Python's http.client:
  median and p99 ms) — the Nagle check: a response waiting on the client's delayed ACK shows as ~40 ms;
- wrk req/s at c=1 and c=64 (one thread, closed loop, one row of the tiny model per request).

Targets: the bare Starlette app (benchmarks/baselines/bare_app.py) and servekit's app on uvicorn with asyncio+h11
and with uvloop+httptools, on granian and on hypercorn when they are installed (``--servers-venv``, default
benchmarks/.venvs/servers: ``python -m venv --system-site-packages benchmarks/.venvs/servers &&
benchmarks/.venvs/servers/bin/pip install granian hypercorn``). servekit on uvicorn is ``servekit serve --loop
--http``; on the others it is the same ASGI app (benchmarks/baselines/servekit_asgi.py) without serve's
connection guard. Each round starts every target in turn (the order rotates by round); ratios are taken within a
round and the table gives their median, so a noisy machine moves both sides of a ratio together. Writes
``benchmarks/HTTP_STACK_RESULTS.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from models import tiny  # noqa: E402
from run import body, free_port, machine, server, wrk  # noqa: E402

BARE = "bare"


def latency_c1(port: int, path: str, payload: bytes, n: int) -> dict[str, float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Content-Type": "application/json"}
    times = []
    for i in range(n + 50):
        t0 = time.perf_counter()
        conn.request("POST", path, body=payload, headers=headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"status {resp.status}")
        if i >= 50:  # the first requests warm the connection and the server
            times.append((time.perf_counter() - t0) * 1e3)
    conn.close()
    times.sort()
    return {"lat_p50_ms": statistics.median(times), "lat_p99_ms": times[int(len(times) * 0.99) - 1]}


def targets(model: Path, venv: Path, work: Path) -> list[tuple[str, str, list[str], dict[str, str], Path]]:
    """(label, app kind, command, env, cwd)."""
    py = sys.executable
    uv = [py, "-m", "uvicorn", "baselines.bare_app:app", "--log-level", "warning", "--no-access-log"]
    serve = [py, "-m", "servekit.cli.main", "serve", "--model_name", "tiny", "--model_base_path", str(model)]
    serve += ["--log_level", "warning", "--file_system_poll_wait_seconds", "0"]
    sk_env = {"SERVEKIT_BENCH_MODEL": str(model), "SERVEKIT_BENCH_NAME": "tiny"}
    out: list[tuple[str, str, list[str], dict[str, str], Path]] = [
        ("uvicorn asyncio+h11", BARE, [*uv, "--loop", "asyncio", "--http", "h11"], {}, HERE),
        ("uvicorn uvloop+httptools", BARE, [*uv, "--loop", "uvloop", "--http", "httptools"], {}, HERE),
        ("uvicorn asyncio+h11", "servekit", [*serve, "--loop", "asyncio", "--http", "h11"], {}, HERE),
        ("uvicorn uvloop+httptools", "servekit", [*serve, "--loop", "uvloop", "--http", "httptools"], {}, HERE),
    ]
    granian, hypercorn = venv / "bin" / "granian", venv / "bin" / "hypercorn"
    if granian.exists():
        g = [str(granian), "--interface", "asgi", "--no-ws", "--log-level", "warning", "--loop", "uvloop"]
        out += [
            ("granian asgi", BARE, [*g, "baselines.bare_app:app"], {}, HERE),
            ("granian asgi", "servekit", [*g, "baselines.servekit_asgi:app"], sk_env, HERE),
        ]
    if hypercorn.exists():
        h = [str(hypercorn), "-k", "uvloop", "--log-level", "warning"]
        out += [
            ("hypercorn uvloop", BARE, [*h, "baselines.bare_app:app"], {}, HERE),
            ("hypercorn uvloop", "servekit", [*h, "baselines.servekit_asgi:app"], sk_env, HERE),
        ]
    return out


def with_port(kind: str, label: str, cmd: list[str], port: int) -> list[str]:
    if kind == "servekit" and label.startswith("uvicorn"):
        return [*cmd, "--host", "127.0.0.1", "--rest_api_port", str(port)]
    if label.startswith("uvicorn"):
        return [*cmd, "--app-dir", str(HERE), "--port", str(port)]
    if label.startswith("granian"):
        return [*cmd[:-1], "--host", "127.0.0.1", "--port", str(port), "--working-dir", str(HERE), cmd[-1]]
    return [*cmd[:-1], "--bind", f"127.0.0.1:{port}", cmd[-1]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    parser.add_argument("--requests", type=int, default=2000, help="sequential requests for the c=1 latency")
    parser.add_argument("--servers-venv", type=Path, default=HERE / ".venvs" / "servers")
    parser.add_argument("--only", default="", help="comma-separated substrings: run only matching targets")
    parser.add_argument("--out", type=Path, default=HERE / "HTTP_STACK_RESULTS.md")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="servekit-http-bench-"))
    model = tiny(work / "tiny" / "1").parent
    payload = body("tiny")
    path = "/v1/models/tiny:predict"
    all_targets = targets(model, args.servers_venv, work)
    if args.only:
        keys = [k.strip() for k in args.only.split(",")]
        all_targets = [t for t in all_targets if any(k in f"{t[1]} {t[0]}" for k in keys)]
    rounds: list[dict[str, dict[str, float]]] = []
    for r in range(args.rounds):
        order = all_targets[r % len(all_targets) :] + all_targets[: r % len(all_targets)]
        got: dict[str, dict[str, float]] = {}
        for label, kind, cmd, env, cwd in order:
            port = free_port()
            name = f"{kind} / {label}"
            full = with_port(kind, label, cmd, port)
            ready = "/v2/health/ready" if kind == "servekit" else path
            with server(full, port, ready, env={**env, "PYTHONPATH": str(cwd)}, log=work / "server.log"):
                res = latency_c1(port, path, payload.encode(), args.requests)
                for c in (1, 64):
                    w = wrk(f"http://127.0.0.1:{port}{path}", payload, c, args.duration)
                    res[f"rps_c{c}"] = w["rps"]
                    res[f"p99_c{c}_ms"] = w["p99_ms"]
                    res[f"non2xx_c{c}"] = w["non2xx"]
            got[name] = res
            print(
                f"round {r + 1} {name:40s} c=1 p50 {res['lat_p50_ms']:.3f} ms p99 {res['lat_p99_ms']:.3f} ms | "
                f"wrk c=1 {res['rps_c1']:,.0f} c=64 {res['rps_c64']:,.0f} req/s",
                flush=True,
            )
        rounds.append(got)
    write(args, rounds)


def write(args: argparse.Namespace, rounds: list[dict[str, dict[str, float]]]) -> None:
    ref = f"{BARE} / uvicorn uvloop+httptools"
    names = list(rounds[0])
    names.sort(key=lambda n: (not n.startswith(BARE), n))

    def med(name: str, key: str) -> float:
        return statistics.median(r[name][key] for r in rounds)

    def ratio(name: str, key: str, den: str = ref) -> float:
        return statistics.median(r[name][key] / r[den][key] for r in rounds if den in r)

    lines = [
        "# HTTP servers and stacks, bare app and servekit",
        "",
        f"`python benchmarks/http_stack_bench.py --rounds {args.rounds} --duration {args.duration:g} --requests "
        f"{args.requests}` on {machine()['date']}: {machine()['cpu']}, {machine()['cores']} cores. Medians of "
        f"{args.rounds} interleaved rounds; ratios are taken within a round (against the bare app on uvicorn "
        "uvloop+httptools, and for servekit against the bare app on the same server) and then their median.",
        "",
        "| target | c=1 p50 ms | c=1 p99 ms | wrk c=1 req/s | wrk c=64 req/s | c=64 p99 ms | c=1 vs ref | c=64 vs ref "
        "| c=64 vs bare, same server |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in names:
        kind, label = n.split(" / ", 1)
        same = f"{BARE} / {label}"
        vs_same = f"{ratio(n, 'rps_c64', same):.2f}" if kind != BARE and same in rounds[0] else ""
        lines.append(
            f"| {n} | {med(n, 'lat_p50_ms'):.3f} | {med(n, 'lat_p99_ms'):.3f} | {med(n, 'rps_c1'):,.0f} "
            f"| {med(n, 'rps_c64'):,.0f} | {med(n, 'p99_c64_ms'):.2f} | {ratio(n, 'rps_c1'):.2f} "
            f"| {ratio(n, 'rps_c64'):.2f} | {vs_same} |"
        )
    args.out.write_text("\n".join(lines) + "\n")
    args.out.with_suffix(".json").write_text(json.dumps({"rounds": rounds}, indent=2))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
