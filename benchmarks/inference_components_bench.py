"""Inference components on servekit up: what routing by InferenceComponentName costs, and a copy's start, in one run.

    python benchmarks/inference_components_bench.py [--requests 300]

One handler model (a JSON list in, each value tripled) served two ways by one ``servekit up``: a plain endpoint
(ml.m5.xlarge, one instance) and an IC-based endpoint (ml.m5.xlarge, no model) hosting it as an inference
component (1 core, 1024 MB, one copy). Measured from the client with boto3, interleaved so both see the same
machine: the median and p90 of --requests sequential InvokeEndpoint calls each (the component's with
InferenceComponentName), and the ratio against the plain endpoint; then the time from UpdateInferenceComponent
(CopyCount 1 -> 2) to CurrentCopyCount 2 against CreateEndpoint to InService of the plain endpoint (both start one
instance process). Only loopback is used.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from servekit.testing.hosting import UpProcess

HANDLER = """
import json

def model_fn(model_dir):
    return 3.0

def transform_fn(factor, body, content_type, accept):
    return json.dumps([x * factor for x in json.loads(body)]), "application/json"
"""


def timed(call: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def until(check: Callable[[], bool], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("not within the deadline")
        time.sleep(0.05)  # polling another process's state


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        code = root / "triple" / "1" / "code"
        code.mkdir(parents=True)
        (code / "inference.py").write_text(textwrap.dedent(HANDLER))
        up = UpProcess(root / "home")
        up.start()
        try:
            sm, rt = up.sm(), up.rt()
            sm.create_model(ModelName="t", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(root / "triple")})
            wait = {"Delay": 1, "MaxAttempts": 120}
            variant = {"VariantName": "A", "InitialInstanceCount": 1, "InstanceType": "ml.m5.xlarge"}
            sm.create_endpoint_config(EndpointConfigName="plain", ProductionVariants=[{**variant, "ModelName": "t"}])
            sm.create_endpoint_config(EndpointConfigName="ic", ProductionVariants=[variant])
            t0 = time.perf_counter()
            sm.create_endpoint(EndpointName="plain", EndpointConfigName="plain")
            until(lambda: sm.describe_endpoint(EndpointName="plain")["EndpointStatus"] == "InService")
            plain_start = time.perf_counter() - t0
            sm.create_endpoint(EndpointName="ic", EndpointConfigName="ic")
            sm.get_waiter("endpoint_in_service").wait(EndpointName="ic", WaiterConfig=wait)
            need = {"NumberOfCpuCoresRequired": 1, "MinMemoryRequiredInMb": 1024}
            sm.create_inference_component(
                InferenceComponentName="c",
                EndpointName="ic",
                Specification={"ModelName": "t", "ComputeResourceRequirements": need},
                RuntimeConfig={"CopyCount": 1},
            )

            def copies() -> int:
                return int(
                    sm.describe_inference_component(InferenceComponentName="c")["RuntimeConfig"]["CurrentCopyCount"]
                )

            until(lambda: copies() == 1)

            def plain() -> None:
                rt.invoke_endpoint(EndpointName="plain", Body=b"[1, 2]", ContentType="application/json")["Body"].read()

            def component() -> None:
                rt.invoke_endpoint(
                    EndpointName="ic", InferenceComponentName="c", Body=b"[1, 2]", ContentType="application/json"
                )["Body"].read()

            for _ in range(20):  # warm both paths (connections, the model's first call)
                plain()
                component()
            plain_s, component_s = [], []
            for _ in range(args.requests):
                plain_s.append(timed(plain))
                component_s.append(timed(component))
            t0 = time.perf_counter()
            sm.update_inference_component(InferenceComponentName="c", RuntimeConfig={"CopyCount": 2})
            until(lambda: copies() == 2)
            copy_start = time.perf_counter() - t0
        finally:
            up.stop()

    def p(values: list[float], q: float) -> float:
        return sorted(values)[int(q * (len(values) - 1))] * 1000

    pm, cm = statistics.median(plain_s) * 1000, statistics.median(component_s) * 1000
    print(f"plain endpoint InvokeEndpoint: median {pm:.2f} ms, p90 {p(plain_s, 0.9):.2f} ms ({args.requests} requests)")
    print(f"inference component InvokeEndpoint: median {cm:.2f} ms, p90 {p(component_s, 0.9):.2f} ms")
    print(f"component / plain (median): {cm / pm:.3f}")
    print(
        f"one more copy (UpdateInferenceComponent to CurrentCopyCount 2): {copy_start * 1000:.0f} ms; plain "
        f"CreateEndpoint to InService: {plain_start * 1000:.0f} ms; ratio {copy_start / plain_start:.2f}"
    )


if __name__ == "__main__":
    main()
