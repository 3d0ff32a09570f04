#!/usr/bin/env python3
"""Gateway overhead: one-row requests through `servekit up`'s InvokeEndpoint versus straight to the instance that
serves them, in the same run (issue 10's targets: >= 0.8x the direct throughput at c=64, <= +0.5 ms p50 at c=1).

    python benchmarks/gateway_bench.py [--duration 10] [--out benchmarks/GATEWAY_RESULTS.md]

Starts `servekit up` on a temporary home, deploys the benchmark's tiny ONNX model as a one-instance endpoint with
boto3, finds the instance's port from its log, and drives both with wrk (closed loop, one thread). The gateway
request is SigV4-signed once with botocore and replayed (a signature stays valid for 15 minutes). Loopback only.
``--rounds`` repeats the direct/gateway pairs (each round is its own same-run ratio); ``--profile DIR`` then runs
one more gateway pass at c=64 with py-spy recording the plane process (DIR/plane.txt, collapsed stacks), outside
the measured passes. The results are appended to ``--out`` as a dated section, with the load average around them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials as BotoCredentials

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from models import build_all  # noqa: E402
from run import _ms, free_port, machine  # noqa: E402

from servekit.aws import Credentials  # noqa: E402
from servekit.aws import client as servekit_client  # noqa: E402

ROW = json.dumps([[5.1, 3.5, 1.4, 0.2]])


def wrk(url: str, body: str, headers: dict[str, str], connections: int, seconds: float) -> dict[str, float]:
    lines = ['wrk.method = "POST"', f"wrk.body = {json.dumps(body)}"]
    lines += [f"wrk.headers[{json.dumps(k)}] = {json.dumps(v)}" for k, v in headers.items()]
    script = Path(tempfile.mkstemp(suffix=".lua")[1])
    script.write_text("\n".join(lines) + "\n")
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency", "-s", str(script), url]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    script.unlink()
    res: dict[str, float] = {"rps": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))}  # type: ignore[union-attr]
    for pct in ("50", "99"):
        m = re.search(rf"^\s+{pct}(?:\.000)?%\s+(\S+)", text, re.MULTILINE)
        res[f"p{pct}_ms"] = _ms(m.group(1)) if m else float("nan")
    m = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", text)
    res["non2xx"] = float(m.group(1)) if m else 0.0
    return res


def signed_headers(home: Path, url: str, body: str) -> dict[str, str]:
    key = Credentials.load_or_create(home).first("admin")
    request = AWSRequest("POST", url, data=body.encode(), headers={"Content-Type": "application/json"})
    SigV4Auth(BotoCredentials(key.access_key_id, key.secret_access_key), "sagemaker", "us-east-1").add_auth(request)
    return {k: v for k, v in request.headers.items() if k.lower() != "host"}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=HERE / "GATEWAY_RESULTS.md")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--profile", type=Path, default=None, help="record the plane with py-spy into this folder")
    ap.add_argument("--profile-connections", type=int, default=64, help="wrk's connections while profiling")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="servekit-gw-bench-"))
    model_dir = build_all(tmp / "models")["tiny"]
    home, port = tmp / "home", free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp / "up.log").open("wb")
    up = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servekit.cli.main",
            "up",
            "--home",
            str(home),
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if requests.get(f"{url}/ping", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        sm = servekit_client(home, "sagemaker", url)
        sm.create_model(ModelName="tiny", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(model_dir)})
        sm.create_endpoint_config(
            EndpointConfigName="tiny",
            ProductionVariants=[
                {"VariantName": "A", "ModelName": "tiny", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
            ],
        )
        sm.create_endpoint(EndpointName="tiny", EndpointConfigName="tiny")
        sm.get_waiter("endpoint_in_service").wait(EndpointName="tiny", WaiterConfig={"Delay": 1, "MaxAttempts": 120})
        (instance_log,) = list((home / "instances").glob("*.log"))
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", instance_log.read_text())
        assert m is not None, "instance port not found in its log"
        direct = f"{m.group(1)}/invocations"
        gateway = f"{url}/endpoints/tiny/invocations"
        rows = []
        load_before = Path("/proc/loadavg").read_text().split()[:3]
        signed = signed_headers(home, gateway, ROW)
        instance_pid = pid_listening(int(direct.rsplit(":", 1)[1].split("/")[0]))
        for _ in range(args.rounds):
            for c in (1, 64):
                before = cpu_s(instance_pid)
                d = wrk(direct, ROW, {"Content-Type": "application/json"}, c, args.duration)
                d["instance_cpu_us"] = (cpu_s(instance_pid) - before) * 1e6 / (d["rps"] * round(args.duration))
                before, before_up = cpu_s(instance_pid), cpu_s(up.pid)
                g = wrk(gateway, ROW, signed, c, args.duration)
                g["instance_cpu_us"] = (cpu_s(instance_pid) - before) * 1e6 / (g["rps"] * round(args.duration))
                g["plane_cpu_us"] = (cpu_s(up.pid) - before_up) * 1e6 / (g["rps"] * round(args.duration))
                rows.append((c, d, g))
                print(json.dumps({"c": c, "direct": d, "gateway": g}), flush=True)
        load_after = Path("/proc/loadavg").read_text().split()[:3]
        if args.profile is not None:
            profile(args.profile, up.pid, gateway, signed, args.duration, args.profile_connections)
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        try:
            up.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
        log.close()
    m1 = machine()
    text = [
        "",
        f"## Run of {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"`python benchmarks/gateway_bench.py --duration {args.duration:g} --rounds {args.rounds}`: {m1['cpu']}, "
        f"{m1['cores']} cores, load average {' '.join(load_before)} before, {' '.join(load_after)} after. wrk, "
        "one thread, closed loop, one row per request, tiny ONNX model, one ml.m5.large instance; the gateway "
        "request is SigV4-signed (verified on every request).",
        "",
        "| round | target | c | req/s | p50 ms | p99 ms | non-2xx | instance CPU us/req | plane CPU us/req |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n, (c, d, g) in enumerate(rows):
        for name, r in (("direct", d), ("gateway", g)):
            plane = f"{r['plane_cpu_us']:.0f}" if "plane_cpu_us" in r else "-"
            text.append(
                f"| {n // 2 + 1} | {name} | {c} | {r['rps']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
                f"| {r['non2xx']:.0f} | {r['instance_cpu_us']:.0f} | {plane} |"
            )
    text.append("")
    for n in range(0, len(rows), 2):
        c1, c64 = rows[n], rows[n + 1]
        ratio = c64[2]["rps"] / c64[1]["rps"]
        extra = c1[2]["p50_ms"] - c1[1]["p50_ms"]
        text.append(
            f"- round {n // 2 + 1}: c=64 gateway / direct **{ratio:.2f}x** (target >= 0.8x: "
            f"{'met' if ratio >= 0.8 else 'missed'}); c=1 p50 gateway - direct **{extra:+.2f} ms** "
            f"(target <= +0.3 ms: {'met' if extra <= 0.3 else 'missed'})"
        )
    with args.out.open("a") as f:
        f.write("\n".join(text) + "\n")
    print(f"wrote {args.out}")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (its own threads, not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pid_listening(port: int) -> int:
    """The process serving the instance's port (its command line names it)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--rest_api_port" in argv and argv[argv.index(b"--rest_api_port") + 1] == str(port).encode():
                return int(proc.name)
    raise RuntimeError(f"no process serves port {port}")


def profile(folder: Path, pid: int, url: str, headers: dict[str, str], seconds: float, connections: int = 64) -> None:
    """One more gateway pass (c=64 unless told) with py-spy sampling the plane (collapsed stacks in
    folder/plane.txt)."""
    spy = shutil.which("py-spy")
    if spy is None:
        print("py-spy is not installed: no profile", flush=True)
        return
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "plane.txt"
    rec = subprocess.Popen(
        [spy, "record", "--pid", str(pid), "--rate", "200", "--nonblocking", "--format", "raw", "--output", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        got = wrk(url, ROW, headers, connections, seconds)
    finally:
        rec.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
        rec.wait(30)
    print(f"profile of the plane at c={connections} ({got['rps']:,.0f} req/s while sampled): {out}", flush=True)
    requests_seen = got["rps"] * round(seconds)
    for name, samples in breakdown(out):  # 200 samples a second: a sample is 5 ms of the plane's CPU
        print(f"  {name}: {samples} samples, {samples * 5e3 / requests_seen:.0f} us a request", flush=True)


# Where the plane's CPU goes, by the most specific component in each sampled stack (first match wins).
CATEGORIES = (
    ("SigV4 verification", ("aws/sigv4.py", "aws/credentials.py")),
    ("forwarding client", ("aiohttp/", "gateway/upstream.py")),
    ("metrics bookkeeping", ("edge/metrics.py", "prometheus_client", "cloudwatch/")),
    ("request parse + validation", ("aws/validate.py", "RestJsonProtocol.parse", "RestJsonProtocol.match")),
    ("response building", ("aws/serialize.py", "RestJsonProtocol.response")),
    ("routing", ("gateway/routing.py", "Gateway.choose")),
    ("gateway (invoke, attempts)", ("gateway/service.py",)),
    ("AWS front (route, decode)", ("aws/front.py", "aws/protocol.py")),
    ("socket writes to the client", ("httptools_impl.py:524", "httptools_impl.py:544")),
    ("servekit's HTTP/1.1 fast path (InvokeEndpoint without ASGI)", ("launch/plane_http.py",)),
    ("uvicorn HTTP + ASGI glue", ("uvicorn/protocols", "edge/plane.py")),
    ("event loop", ("uvicorn/_compat.py", "asyncio/")),
)


def breakdown(path: Path) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for line in path.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        name = next((name for name, marks in CATEGORIES if any(m in stack for m in marks)), "other")
        counts[name] = counts.get(name, 0) + int(n)
    return sorted(counts.items(), key=lambda kv: -kv[1])


if __name__ == "__main__":
    main()
