"""A ``servekit up`` killed with SIGKILL cannot stop its instances: they notice on their own and exit within 10 s
instead of running on as orphans of PID 1, and a plane restarted on the same home brings the endpoint back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from servekit.testing.hosting import UpProcess, scaling_model

pytestmark = pytest.mark.e2e
FAST = {"Delay": 1, "MaxAttempts": 120}


def _running(pid: int) -> bool:
    """Whether ``pid`` is still a live process (a zombie nobody has reaped yet has exited: it does not count)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _instance_pids(home: Path) -> list[int]:
    return [int(p.read_text()) for p in (home / "instances").glob("*.pid")]


def test_instances_exit_within_10s_of_their_plane_being_killed_and_a_restart_brings_them_back(
    up: UpProcess, tmp_path: Path
) -> None:
    sm = up.sm()
    model = scaling_model(tmp_path, "orphan-m", 2.0)
    sm.create_model(ModelName="orphan-m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(model)})
    variant = {"VariantName": "A", "ModelName": "orphan-m", "InitialInstanceCount": 2, "InstanceType": "ml.t2.medium"}
    sm.create_endpoint_config(EndpointConfigName="orphan-cfg", ProductionVariants=[variant])
    sm.create_endpoint(EndpointName="orphan", EndpointConfigName="orphan-cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="orphan", WaiterConfig=FAST)
    pids = _instance_pids(up.home)
    assert len(pids) == 2 and all(_running(p) for p in pids), pids

    up.kill()  # SIGKILL: the plane stops nothing; returns once it is gone
    killed = time.monotonic()
    try:
        while left := [p for p in pids if _running(p)]:
            assert time.monotonic() - killed < 10, f"instances {left} still running 10 s after their plane was killed"
            time.sleep(0.1)  # polling other processes' state, with the deadline above
    finally:  # on failure, leave no orphans behind for the next tests
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)

    up.start()  # returns once /ping answers: the endpoint serves again from then on
    assert up.sm().describe_endpoint(EndpointName="orphan")["EndpointStatus"] == "InService"
    r = up.rt().invoke_endpoint(EndpointName="orphan", Body=json.dumps([1.5]), ContentType="application/json")
    assert json.loads(r["Body"].read())["out"] == [3.0]
    new = _instance_pids(up.home)
    assert len(new) == 2 and not set(new) & set(pids) and all(_running(p) for p in new), (pids, new)
