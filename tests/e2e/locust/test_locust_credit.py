"""The credit-scoring locustfile of docs/load-testing.md, run headless by the real ``locust`` command: against a
multi-model endpoint on ``servekit up`` (signed InvokeEndpoint, the target-model header) with the keys
``servekit env`` exports, and against ``servekit serve``'s ``/invocations``; every request counted (Locust's count
equals the endpoint's own invocation counter), none failed; a wrong secret shows as failures with their code. A
``StepLoadShape`` with a latency SLO against a server whose latency bends at a known rate reports that knee and the
highest rate under it."""

from __future__ import annotations

import csv
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from servekit.aws import Credentials
from servekit.backends.local import free_port
from servekit.testing.bent import BentServer
from servekit.testing.hosting import UpProcess

# Locust runs in its own processes only: importing it here would patch this process's standard library (gevent).
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.locust,
    pytest.mark.skipif(
        importlib.util.find_spec("locust") is None, reason="the servekit[locust] extra (make test-locust)"
    ),
]

DOC = Path(__file__).resolve().parents[3] / "docs" / "load-testing.md"  # the README's reference, moved there
LOCUST = [sys.executable, "-m", "locust"]
HANDLER = textwrap.dedent(
    """
    import hashlib, json, uuid
    from datetime import datetime

    def model_fn(model_dir):
        return open(f"{model_dir}/region.txt").read()

    def transform_fn(region, data, content_type, accept):
        r = json.loads(data)
        uuid.UUID(r["request_id"])
        datetime.fromisoformat(r["timestamp"])
        if hashlib.sha256(r["user"].encode()).hexdigest() != r["user_id_hash"]:
            raise ValueError("user_id_hash does not match")
        score = 1.0 / (1.0 + r["debt_ratio"] * 3 + r["open_accounts"] / 20)
        return json.dumps({"request_id": r["request_id"], "region": region, "score": score}), accept
    """
)


def block(marker: str) -> str:
    text = DOC.read_text()
    match = re.search(re.escape(f"<!-- {marker} -->") + r"\n```python\n(.*?)\n```\n", text, re.DOTALL)
    assert match, f"docs/load-testing.md must hold a ```python block right after <!-- {marker} -->"
    return match.group(1) + "\n"


@pytest.fixture
def work(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / "credit_payload.py").write_text(block("locust-payload"))
    (work / "locustfile.py").write_text(block("locust-example"))
    return work


def credit_model(root: Path, region: str) -> Path:
    (root / "code").mkdir(parents=True)
    (root / "code" / "inference.py").write_text(HANDLER)
    (root / "region.txt").write_text(region)
    return root


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def run_locust(work: Path, env: dict[str, str], *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    cmd = [*LOCUST, "--headless", "-f", "locustfile.py", "--only-summary", "--csv", "out", "--json-file", "out", *args]
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)


def stats(work: Path) -> dict[str, dict[str, int]]:
    """Locust's final statistics (``--json-file``: written once the run ended, where ``--csv``'s files are the last
    periodic write), per name and "Aggregated"."""
    entries = orjson.loads((work / "out.json").read_bytes())
    rows = {e["name"]: {"requests": e["num_requests"], "failures": e["num_failures"]} for e in entries}
    rows["Aggregated"] = {k: sum(r[k] for r in rows.values()) for k in ("requests", "failures")}
    return rows


def failures(work: Path) -> list[dict[str, str]]:
    with open(work / "out_failures.csv") as f:
        return list(csv.DictReader(f))


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SAGEMAKER_"))}
    env.update(PYTHONUNBUFFERED="1", **extra)
    return env


def endpoint_invocations(up: UpProcess, endpoint: str) -> float:
    with urllib.request.urlopen(f"{up.url}/metrics", timeout=10) as r:
        text = r.read().decode()
    pattern = re.compile(r"^servekit_endpoint_invocations_total\{([^}]*)\} (\S+)$", re.MULTILINE)
    return sum(float(v) for labels, v in pattern.findall(text) if f'endpoint="{endpoint}"' in labels)


def test_readme_locustfile_against_a_multi_model_endpoint(up: UpProcess, work: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    credit_model(prefix / "credit-eu", "eu")
    credit_model(prefix / "credit-us", "us")
    sm = up.sm()
    sm.create_model(
        ModelName="credit-m",
        PrimaryContainer={"Image": "servekit", "Mode": "MultiModel", "ModelDataUrl": str(prefix) + "/"},
    )
    sm.create_endpoint_config(
        EndpointConfigName="credit-cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": "credit-m", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
        ],
    )
    sm.create_endpoint(EndpointName="credit-scoring", EndpointConfigName="credit-cfg")
    sm.get_waiter("endpoint_in_service").wait(
        EndpointName="credit-scoring", WaiterConfig={"Delay": 1, "MaxAttempts": 120}
    )
    before = endpoint_invocations(up, "credit-scoring")

    # The page's lines: eval "$(servekit env)", then locust headless with the endpoint user.
    env = clean_env(SERVEKIT_HOME=str(up.home), SERVEKIT=f"{sys.executable} -m servekit.cli.main")
    args = "CreditEndpointUser -u 6 -r 6 --run-time 6s --stop-timeout 10"
    locust = f"{shlex.join(LOCUST)} --headless -f locustfile.py --only-summary --csv out --json-file out {args}"
    shell = f'eval "$($SERVEKIT env)" && exec {locust}'
    run = subprocess.run(["bash", "-c", shell], cwd=work, env=env, capture_output=True, text=True, timeout=90)
    assert run.returncode == 0, run.stderr[-3000:] + up.log.read_text()[-2000:]
    rows = stats(work)
    total = rows["Aggregated"]
    assert total["failures"] == 0, failures(work)
    assert set(rows) == {
        "Aggregated",
        "InvokeEndpoint credit-scoring [model=credit-eu]",
        "InvokeEndpoint credit-scoring [model=credit-us]",
    }
    counted = total["requests"]
    assert counted >= 6 * 5 * 3  # 6 users at 5/s for ~6 s (at least half of the nominal 180)
    assert endpoint_invocations(up, "credit-scoring") - before == counted, run.stderr[
        -2500:
    ]  # every request reached the endpoint

    # A wrong secret: every call fails, and the failures carry the status and SageMaker's code.
    wrong = clean_env(
        AWS_ENDPOINT_URL=up.url,
        AWS_ACCESS_KEY_ID=Credentials.load(up.home).admin.access_key_id,
        AWS_SECRET_ACCESS_KEY="not-the-secret",
        AWS_DEFAULT_REGION="us-east-1",
    )
    run = run_locust(
        work, wrong, "CreditEndpointUser", "-u", "2", "-r", "2", "--run-time", "3s", "--stop-timeout", "10"
    )
    assert run.returncode == 1, run.stderr[-2000:]  # Locust exits 1 when requests failed
    total = stats(work)["Aggregated"]
    assert total["requests"] > 0 and total["failures"] == total["requests"], (total, run.stderr[:3000])
    errors = {row["Error"] for row in failures(work)}
    assert errors and all("403 InvalidSignatureException: The request signature" in e for e in errors), errors


def test_readme_locustfile_against_servekit_serve_invocations(work: Path, tmp_path: Path, server_factory: Any) -> None:
    base = tmp_path / "models" / "credit"
    credit_model(base / "1", "eu")
    sm_port = free_port()
    srv = server_factory("--model_name", "credit", "--model_base_path", str(base), "--sagemaker_port", str(sm_port))
    srv.wait_ready()
    run = run_locust(
        work,
        clean_env(),
        "CreditContainerUser",
        "--host",
        f"http://127.0.0.1:{sm_port}",
        "-u",
        "6",
        "-r",
        "6",
        "--run-time",
        "5s",
    )
    assert run.returncode == 0, run.stderr[-3000:] + srv.log()[-2000:]
    rows = stats(work)
    assert set(rows) == {"Aggregated", "invocations"}
    assert rows["Aggregated"]["failures"] == 0, failures(work)
    assert rows["Aggregated"]["requests"] >= 6 * 5 * 5 // 2


STEPPED = textwrap.dedent(
    """
    from locust import constant_throughput, task

    from servekit.locust import SageMakerContainerUser, StepLoadShape


    class Caller(SageMakerContainerUser):
        wait_time = constant_throughput(10)

        @task
        def call(self) -> None:
            self.invocations({"x": 1})


    class Steps(StepLoadShape):
        levels = (20, 40, 80, 160)
        step_s = 4
        per_user_rate = 10
        settle_s = 1.5
        slo_ms = 20
    """
)


def test_step_shape_reports_the_knee_of_a_server_that_bends_at_a_known_rate(tmp_path: Path) -> None:
    (tmp_path / "locustfile.py").write_text(STEPPED)
    report = tmp_path / "knee.json"
    with BentServer(bend_rate=60, fast_ms=1, slow_ms=40) as server:
        started = time.monotonic()
        run = run_locust(tmp_path, clean_env(SERVEKIT_LOCUST_KNEE_JSON=str(report)), "--host", server.url)
        assert run.returncode == 0, run.stderr[-3000:]
    assert time.monotonic() - started < 60
    knee = orjson.loads(report.read_bytes())
    rates = [p["rate"] for p in knee["points"]]
    assert len(rates) == 4 and all(abs(r - lv) < lv * 0.25 for r, lv in zip(rates, (20, 40, 80, 160), strict=True)), (
        knee
    )
    assert knee["baseline_ms"] < 10
    # latency bends between 40/s and 80/s: the knee is the 80/s step, the last one under the SLO the 40/s one
    assert 60 < knee["knee_rate"] < 100 and knee["knee_latency_ms"] >= 30
    assert 30 < knee["last_good_rate"] < 50 and knee["max_rate_under_slo"] == knee["last_good_rate"]
    assert "knee at" in run.stderr
