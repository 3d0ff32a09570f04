"""Locust's own ceiling here against `servekit bench`, on the same endpoint, in one run (issue 32).

    python benchmarks/locust_bench.py [--users 32] [--seconds 15]

A handler model (a JSON list in, each value tripled) is deployed on ``servekit up`` (one instance) and served by
``servekit serve`` on its own. Four load generators, each a process of its own, each closed-loop with --users
clients for --seconds:
- Locust ``SageMakerEndpointUser`` -> InvokeEndpoint on servekit up (SigV4-signed per request);
- Locust ``FastHttpUser`` -> ``servekit serve``'s ``/invocations`` (no signing: Locust's plainest user);
- ``servekit bench --endpoint-name`` -> the same InvokeEndpoint;
- ``servekit bench`` -> the same ``/invocations``.
For each: answers per second and the generator's own CPU seconds per second (user + system of its process), so
requests/s per core of the generator = answers/s / cores used. Locust (gevent) runs on one core. Requires the
servekit[locust] extra. Only loopback is used.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from servekit.aws import Credentials
from servekit.backends.local import free_port
from servekit.testing.hosting import UpProcess

HANDLER = """
import json

def model_fn(model_dir):
    return 3.0

def transform_fn(factor, body, content_type, accept):
    return json.dumps([x * factor for x in json.loads(body)]), "application/json"
"""
LOCUSTFILE = """
from locust import FastHttpUser, task
from servekit.tools.locust import SageMakerEndpointUser

class Endpoint(SageMakerEndpointUser):
    endpoint_name = "bench"

    @task
    def call(self):
        self.invoke([1.0, 2.0, 3.0])

class Container(FastHttpUser):
    @task
    def call(self):
        self.client.post("/invocations", data=b"[1.0, 2.0, 3.0]", headers={"Content-Type": "application/json"})
"""


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """The command's wall seconds and its CPU seconds."""
    cpu0, t0 = children_cpu(), time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    if done.returncode not in (0, 1):  # locust exits 1 when any request failed: checked from its stats
        raise SystemExit(f"{cmd[:4]} failed: {done.stderr[-2000:]}")
    return time.perf_counter() - t0, children_cpu() - cpu0


def locust(work: Path, env: dict[str, str], user: str, host: str | None, users: int, seconds: int) -> dict[str, float]:
    args = [sys.executable, "-m", "locust", "--headless", "-f", "locustfile.py", "--only-summary", user]
    args += [
        "-u",
        str(users),
        "-r",
        str(users),
        "--run-time",
        f"{seconds}s",
        "--json-file",
        "out",
        "--stop-timeout",
        "5",
    ]
    if host:
        args += ["--host", host]
    _, cpu = run(args, env, work)
    entries = json.loads((work / "out.json").read_text())
    n = sum(e["num_requests"] for e in entries)
    failed = sum(e["num_failures"] for e in entries)
    return {"rps": n / seconds, "cpu_per_s": cpu / seconds, "failed": failed}


def bench(work: Path, env: dict[str, str], target: list[str], users: int, seconds: int) -> dict[str, float]:
    report = work / "bench.json"
    (work / "payload.py").write_text("def body():\n    return b'[1.0, 2.0, 3.0]'\n")
    args = [sys.executable, "-m", "servekit.cli.main", "bench", *target, "--concurrency", str(users)]
    args += ["--duration", f"{seconds}s", "--json", str(report), "--quiet", "--payload", f"{work / 'payload.py'}:body"]
    _, cpu = run(args, env, work)
    phase = json.loads(report.read_text())["phases"][0]
    return {
        "rps": phase["ok"] / phase["duration_s"],
        "cpu_per_s": cpu / seconds,
        "failed": phase["requests"] - phase["ok"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=32)
    parser.add_argument("--seconds", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        code = root / "triple" / "1" / "code"
        code.mkdir(parents=True)
        (code / "inference.py").write_text(textwrap.dedent(HANDLER))
        (root / "locustfile.py").write_text(LOCUSTFILE)
        up = UpProcess(root / "home")
        up.start()
        port = free_port()
        serve = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "servekit.cli.main",
                "serve",
                "--model_base_path",
                str(root / "triple"),
                "--model_name",
                "triple",
                "--rest_api_port",
                str(port),
                "--port",
                str(free_port()),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            sm = up.sm()
            sm.create_model(
                ModelName="bench", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(root / "triple")}
            )
            variant = {
                "VariantName": "A",
                "ModelName": "bench",
                "InitialInstanceCount": 1,
                "InstanceType": "ml.m5.large",
            }
            sm.create_endpoint_config(EndpointConfigName="bench", ProductionVariants=[variant])
            sm.create_endpoint(EndpointName="bench", EndpointConfigName="bench")
            sm.get_waiter("endpoint_in_service").wait(
                EndpointName="bench", WaiterConfig={"Delay": 1, "MaxAttempts": 120}
            )
            key = Credentials.load_or_create(up.home).admin
            env = {
                **os.environ,
                "AWS_ENDPOINT_URL": up.url,
                "AWS_ACCESS_KEY_ID": key.access_key_id,
                "AWS_SECRET_ACCESS_KEY": key.secret_access_key,
                "AWS_DEFAULT_REGION": "us-east-1",
                "SERVEKIT_HOME": str(up.home),
            }
            direct = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while serve.poll() is None and time.monotonic() < deadline:
                try:
                    import urllib.request

                    with urllib.request.urlopen(f"{direct}/ping", timeout=2):
                        break
                except OSError:
                    time.sleep(0.2)
            rows = {
                "locust SageMakerEndpointUser -> InvokeEndpoint": locust(
                    root, env, "Endpoint", None, args.users, args.seconds
                ),
                "servekit bench --endpoint-name -> InvokeEndpoint": bench(
                    root,
                    env,
                    ["--endpoint-name", "bench", "--url", up.url, "--home", str(up.home)],
                    args.users,
                    args.seconds,
                ),
                "locust FastHttpUser -> serve /invocations": locust(
                    root, env, "Container", direct, args.users, args.seconds
                ),
                "servekit bench -> serve /invocations": bench(
                    root,
                    env,
                    ["--url", direct, "--protocol", "sagemaker", "--model", "triple"],
                    args.users,
                    args.seconds,
                ),
            }
        finally:
            serve.terminate()
            serve.wait(30)
            up.stop()
    print(f"{args.users} closed-loop clients, {args.seconds} s each:")
    for name, r in rows.items():
        per_core = r["rps"] / r["cpu_per_s"] if r["cpu_per_s"] else float("nan")
        print(
            f"  {name:52s} {r['rps']:7.0f} answers/s  generator CPU {r['cpu_per_s']:.2f} cores"
            f"  -> {per_core:6.0f} req/s per generator core  failed {int(r['failed'])}"
        )


if __name__ == "__main__":
    main()
