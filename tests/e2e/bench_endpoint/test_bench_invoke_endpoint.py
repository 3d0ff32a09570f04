"""``servekit bench --endpoint-name`` against a real ``servekit up`` (signed InvokeEndpoint with the target-model
header, bodies from a ``--payload`` function), and the knee report over ``--phases`` against a server whose latency
bends at a known rate."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from servekit.aws import Credentials
from servekit.testing.bent import BentServer
from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e
PAYLOAD = """
import uuid

def body():
    return [1.0, 2.0] if uuid.uuid4() else None
"""


@pytest.fixture
def up(tmp_path: Path) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "servekit.cli.main", "bench", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def test_bench_invokes_a_multi_model_endpoint_signed_with_fresh_bodies(up: UpProcess, tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    scaling_model(prefix, "m2", 2.0)
    sm = up.sm()
    sm.create_model(
        ModelName="mm", PrimaryContainer={"Image": "servekit", "Mode": "MultiModel", "ModelDataUrl": f"{prefix}/"}
    )
    variant = {"VariantName": "A", "ModelName": "mm", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
    sm.create_endpoint_config(EndpointConfigName="mm-cfg", ProductionVariants=[variant])
    sm.create_endpoint(EndpointName="mm-ep", EndpointConfigName="mm-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="mm-ep", WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    (tmp_path / "payload.py").write_text(PAYLOAD)
    out = tmp_path / "report.json"
    run = bench(
        "--endpoint-name", "mm-ep", "--target-model", "m2/1", "--url", up.url, "--home", str(up.home),
        "--payload", f"{tmp_path / 'payload.py'}:body", "--concurrency", "4", "--requests", "200",
        "--json", str(out), "--quiet",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr + up.log.read_text()[-2000:]
    report = orjson.loads(out.read_bytes())
    phase = report["phases"][0]
    assert phase["requests"] == 200 and phase["ok"] == 200, phase["errors"]
    assert report["target"]["endpoint_name"] == "mm-ep" and report["target"]["payload_bodies_per_s"] > 0
    assert "bodies/s alone" in run.stdout

    # A wrong key: every call is refused, counted by its status.
    key = Credentials.load(up.home).admin.access_key_id
    env = {"AWS_ACCESS_KEY_ID": key, "AWS_SECRET_ACCESS_KEY": "wrong", "PATH": "/usr/bin:/bin"}
    run = bench(
        "--endpoint-name", "mm-ep", "--target-model", "m2/1", "--url", up.url, "--payload",
        f"{tmp_path / 'payload.py'}:body", "--requests", "20", "--json", str(out), "--quiet", env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert orjson.loads(out.read_bytes())["phases"][0]["errors"] == {"403": 20}


def test_knee_report_finds_the_rate_where_latency_bends(tmp_path: Path) -> None:
    (tmp_path / "payload.py").write_text(PAYLOAD)
    out = tmp_path / "report.json"
    with BentServer(bend_rate=60, fast_ms=1, slow_ms=40) as server:
        run = bench(
            "--url", server.url, "--protocol", "sagemaker", "--model", "any", "--payload",
            f"{tmp_path / 'payload.py'}:body", "--loop", "open", "--phases", "20,40,80,160", "--phase_duration",
            "2s", "--slo-ms", "20", "--json", str(out), "--quiet",
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = orjson.loads(out.read_bytes())
    knee = report["knee"]
    # What the run measured depends on this machine's speed (a loaded one answers slowly at every rate); what the
    # report says of it does not: the knee is the first level whose p95 passes 2x the lowest level's, from the
    # phases it reports (tests/unit/tools/bench/test_bench_knee.py checks the rule on fixed numbers).
    assert len(report["phases"]) == 4
    levels = sorted((p["ok"] / p["duration_s"], p["latency_ms"]["p95"]) for p in report["phases"] if p["ok"])
    assert knee["baseline_ms"] == levels[0][1] and knee["factor"] == 2
    over = [(rate, ms) for rate, ms in levels if ms > 2 * levels[0][1]]
    if over:
        assert knee["knee_rate"] == pytest.approx(over[0][0], rel=1e-3), knee  # the phase's duration is rounded
        assert knee["knee_latency_ms"] == over[0][1], knee
    else:
        assert knee["knee_rate"] is None, knee
    assert "knee (p95 > 2x" in run.stdout
