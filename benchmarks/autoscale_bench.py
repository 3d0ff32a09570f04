#!/usr/bin/env python3
"""Autoscaling: how long from sustained overload to the first new instance serving, and how many requests fail
while a variant scales in under load (goal: 0).

    python benchmarks/autoscale_bench.py [--resolution 1] [--rounds 3] [--out benchmarks/AUTOSCALE_RESULTS.md]

Starts `servekit up --metrics-resolution-s R` on a temporary home, deploys a tiny handler model as a one-instance
endpoint with boto3 and a target-tracking policy (target 600 invocations per minute per instance, Min 1, Max 3,
cooldowns 5 s), then, per round:

1. **Scale-out**: two threads send InvokeEndpoint as fast as they can. Timed from the first request: the scaler's
   decision (the activity's StartTime), the endpoint reporting a new instance healthy, and the first request
   served by a new instance (its own Prometheus request count, polled every 50 ms). Each round starts after
   4 quiet periods, so the overload starts from no data.
2. **Scale-in under load, by the autoscaler**: the load falls to one paced thread (about 4 requests a second);
   the scaler brings the variant back to 1 instance; every failed request is counted.
3. **Scale-in under heavy load, forced**: UpdateEndpointWeightsAndCapacities 3 -> 1 while four threads send as
   fast as they can (the same fleet path the scaler uses); every failed request is counted.

With R-second metrics the target-tracking alarm needs 3 periods above target (3R s) and the scaler ticks every
min(10, R) s, so the decision time scales with R; the instance start does not. Loopback only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from botocore.config import Config

from servekit.aws import client as servekit_client
from servekit.testing.hosting import UpProcess, scaling_model

RID = "endpoint/bench/variant/AllTraffic"
KEY = {
    "ServiceNamespace": "sagemaker",
    "ResourceId": RID,
    "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
}


def client(up: UpProcess, service: str) -> Any:
    config = Config(retries={"total_max_attempts": 1}, read_timeout=30, max_pool_connections=16)
    return servekit_client(up.home, service, up.url, config=config)


class Load:
    def __init__(self, up: UpProcess, threads: int, pause_s: float = 0.0) -> None:
        self.clients = [client(up, "sagemaker-runtime") for _ in range(threads)]
        self.pause_s = pause_s
        self.ok = 0
        self.failures: list[str] = []
        self.started = 0.0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(c,), daemon=True) for c in self.clients]
        self._lock = threading.Lock()

    def _run(self, rt: Any) -> None:
        while not self._stop.is_set():
            try:
                r = rt.invoke_endpoint(EndpointName="bench", Body=b"[2.0]", ContentType="application/json")
                r["Body"].read()
                with self._lock:
                    self.ok += 1
            except Exception as exc:
                with self._lock:
                    self.failures.append(f"{type(exc).__name__}: {exc}")
            if self.pause_s:
                self._stop.wait(self.pause_s)

    def __enter__(self) -> Load:
        self.started = time.time()
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)


def instance_ports(home: Path) -> dict[str, int]:
    out = {}
    for pid_file in (home / "instances").glob("*.pid"):
        try:
            args = [a.decode() for a in Path(f"/proc/{pid_file.read_text().strip()}/cmdline").read_bytes().split(b"\0")]
        except (OSError, ValueError):
            continue
        if "--rest_api_port" in args:
            out[pid_file.stem] = int(args[args.index("--rest_api_port") + 1])
    return out


def served(port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/monitoring/prometheus/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return 0.0
    pattern = r'^:tensorflow:serving:request_count\{[^}]*status="OK"[^}]*\} (\S+)$'
    return sum(float(m) for m in re.findall(pattern, text, re.MULTILINE))


def poll(check: Any, timeout_s: float, every_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(every_s)
    raise TimeoutError("condition not met")


def variant(sm: Any) -> dict[str, Any]:
    desc = sm.describe_endpoint(EndpointName="bench")
    [v] = desc["ProductionVariants"]
    return {**v, "EndpointStatus": desc["EndpointStatus"]}


def one_round(up: UpProcess, sm: Any, aas: Any, resolution: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    before = set(instance_ports(up.home))
    seen_activities = {a["ActivityId"] for a in aas.describe_scaling_activities(**KEY)["ScalingActivities"]}
    time.sleep(4 * resolution + 1)  # quiet periods first, so the overload starts from no data (benchmark timing)
    with Load(up, 2) as heavy:
        t0 = heavy.started
        t_healthy = t_served = None
        deadline = time.monotonic() + 120
        while (t_healthy is None or t_served is None) and time.monotonic() < deadline:
            ports = instance_ports(up.home)
            if t_served is None and any(served(port) > 0 for i, port in ports.items() if i not in before):
                t_served = time.time()
            if t_healthy is None and variant(sm)["CurrentInstanceCount"] >= 2:
                t_healthy = time.time()
            time.sleep(0.05)
        if t_healthy is None or t_served is None:
            raise TimeoutError("no new instance served within 120 s")
        acts = [a for a in aas.describe_scaling_activities(**KEY)["ScalingActivities"]
                if a["ActivityId"] not in seen_activities and "Setting desired" in a["Description"]]  # fmt: skip
        decided = min(a["StartTime"].timestamp() for a in acts)
        poll(lambda: variant(sm)["CurrentInstanceCount"] == 3 and variant(sm)["EndpointStatus"] == "InService", 120)
    result.update(
        decision_s=decided - t0,
        new_instance_healthy_s=t_healthy - t0,
        first_served_by_new_s=t_served - t0,
        scale_out_requests=heavy.ok,
        scale_out_failed=len(heavy.failures),
    )
    with Load(up, 1, pause_s=0.25) as light:
        poll(lambda: variant(sm)["CurrentInstanceCount"] == 1 and variant(sm)["EndpointStatus"] == "InService", 180,
             every_s=0.2)  # fmt: skip
        n = light.ok
        poll(lambda: light.ok > n + 3, 30)
    result.update(auto_scale_in_requests=light.ok, auto_scale_in_failed=len(light.failures))
    result["auto_scale_in_errors"] = light.failures[:3]

    # forced 3 -> 1 under heavy load: suspend dynamic scaling so the scaler does not fight it
    aas.register_scalable_target(SuspendedState={"DynamicScalingInSuspended": True, "DynamicScalingOutSuspended": True,
                                                 "ScheduledScalingSuspended": False}, **KEY)  # fmt: skip
    sm.update_endpoint_weights_and_capacities(
        EndpointName="bench", DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic", "DesiredInstanceCount": 3}]
    )
    poll(lambda: variant(sm)["CurrentInstanceCount"] == 3 and variant(sm)["EndpointStatus"] == "InService", 120)
    with Load(up, 4) as heavy:
        poll(lambda: heavy.ok > 200, 60)
        sm.update_endpoint_weights_and_capacities(
            EndpointName="bench",
            DesiredWeightsAndCapacities=[{"VariantName": "AllTraffic", "DesiredInstanceCount": 1}],
        )
        poll(lambda: variant(sm)["CurrentInstanceCount"] == 1 and variant(sm)["EndpointStatus"] == "InService", 120)
        n = heavy.ok
        poll(lambda: heavy.ok > n + 50, 30)
    result.update(forced_scale_in_requests=heavy.ok, forced_scale_in_failed=len(heavy.failures))
    result["forced_scale_in_errors"] = heavy.failures[:3]
    aas.register_scalable_target(SuspendedState={"DynamicScalingInSuspended": False,
                                                 "DynamicScalingOutSuspended": False,
                                                 "ScheduledScalingSuspended": False}, **KEY)  # fmt: skip
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--resolution", type=int, default=1, help="servekit up --metrics-resolution-s")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="append a markdown section here")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        up = UpProcess(Path(tmp) / "home", "--metrics-resolution-s", str(args.resolution), "--log-level", "warning")
        up.start()
        try:
            sm, aas = client(up, "sagemaker"), client(up, "application-autoscaling")
            model = str(scaling_model(Path(tmp), "triple", 3.0))
            sm.create_model(ModelName="bench-m", PrimaryContainer={"Image": "servekit", "ModelDataUrl": model})
            sm.create_endpoint_config(EndpointConfigName="bench-c", ProductionVariants=[{
                "VariantName": "AllTraffic", "ModelName": "bench-m", "InitialInstanceCount": 1,
                "InstanceType": "ml.t2.medium", "InitialVariantWeight": 1.0,
            }])  # fmt: skip
            sm.create_endpoint(EndpointName="bench", EndpointConfigName="bench-c")
            sm.get_waiter("endpoint_in_service").wait(EndpointName="bench", WaiterConfig={"Delay": 1})
            aas.register_scalable_target(MinCapacity=1, MaxCapacity=3, **KEY)
            aas.put_scaling_policy(PolicyName="ipi", PolicyType="TargetTrackingScaling", **KEY,
                                   TargetTrackingScalingPolicyConfiguration={
                "TargetValue": 600.0, "ScaleOutCooldown": 5, "ScaleInCooldown": 5,
                "PredefinedMetricSpecification": {"PredefinedMetricType": "SageMakerVariantInvocationsPerInstance"},
            })  # fmt: skip
            rounds = []
            for i in range(args.rounds):
                r = one_round(up, sm, aas, args.resolution)
                print(f"round {i + 1}: {json.dumps(r)}", flush=True)
                rounds.append(r)
        finally:
            up.stop()

    def col(key: str) -> list[Any]:
        return [r[key] for r in rounds]

    lines = [
        f"| metric (resolution {args.resolution} s) | "
        + " | ".join(f"round {i + 1}" for i in range(len(rounds)))
        + " |",
        "|---|" + "---|" * len(rounds),
    ]
    for key, fmt in [
        ("decision_s", "{:.1f} s"),
        ("new_instance_healthy_s", "{:.1f} s"),
        ("first_served_by_new_s", "{:.1f} s"),
        ("scale_out_failed", "{} of " + "{}"),
        ("auto_scale_in_failed", "{} of {}"),
        ("forced_scale_in_failed", "{} of {}"),
    ]:
        if key.endswith("_failed"):
            total = key.replace("_failed", "_requests")
            cells = [f"{r[key]} of {r[total]}" for r in rounds]
        else:
            cells = [fmt.format(v) for v in col(key)]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)
    errors = [e for r in rounds for e in r["auto_scale_in_errors"] + r["forced_scale_in_errors"]]
    if errors:
        print("first errors:", *errors, sep="\n  ")
    if args.out:
        with args.out.open("a") as f:
            f.write(f"\n`python benchmarks/autoscale_bench.py --resolution {args.resolution} --rounds {args.rounds}`"
                    f"\n\n{table}\n")  # fmt: skip
            if errors:
                f.write("\nFirst errors:\n\n" + "\n".join(f"- `{e[:300]}`" for e in errors) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
