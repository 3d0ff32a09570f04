"""Serverless endpoints on servekit up: a cold start against an instance endpoint's first request, in one run.

    python benchmarks/serverless_bench.py [--rounds 3]

One handler model (a JSON list in, each value tripled) on two endpoints of one ``servekit up``
(``--serverless-idle-s 1``): an instance endpoint (ml.m5.large, one instance) and a serverless one
(MemorySizeInMB 1024, MaxConcurrency 4). Measured from the client with boto3: the instance endpoint's first
request once it is InService, the serverless endpoint's first request (a cold start: an instance process starts
and loads the model), its next request (warm), and again after it has scaled to zero. Median of --rounds cold
starts. Only loopback is used.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import textwrap
import time
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


def timed(rt: Any, endpoint: str) -> float:
    t0 = time.perf_counter()
    rt.invoke_endpoint(EndpointName=endpoint, Body=b"[1, 2]", ContentType="application/json")["Body"].read()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        code = root / "triple" / "1" / "code"
        code.mkdir(parents=True)
        (code / "inference.py").write_text(textwrap.dedent(HANDLER))
        up = UpProcess(root / "home", "--serverless-idle-s", "1")
        up.start()
        try:
            sm, rt = up.sm(), up.rt()
            sm.create_model(ModelName="t", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(root / "triple")})
            wait = {"Delay": 1, "MaxAttempts": 120}
            sm.create_endpoint_config(
                EndpointConfigName="inst",
                ProductionVariants=[
                    {"VariantName": "A", "ModelName": "t", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
                ],
            )
            sm.create_endpoint_config(
                EndpointConfigName="sl",
                ProductionVariants=[
                    {
                        "VariantName": "A",
                        "ModelName": "t",
                        "ServerlessConfig": {"MemorySizeInMB": 1024, "MaxConcurrency": 4},
                    }
                ],
            )
            t0 = time.perf_counter()
            sm.create_endpoint(EndpointName="inst", EndpointConfigName="inst")
            sm.get_waiter("endpoint_in_service").wait(EndpointName="inst", WaiterConfig=wait)
            inst_create = time.perf_counter() - t0
            inst_first = timed(rt, "inst")
            inst_warm = statistics.median(timed(rt, "inst") for _ in range(20))
            sm.create_endpoint(EndpointName="sl", EndpointConfigName="sl")
            sm.get_waiter("endpoint_in_service").wait(EndpointName="sl", WaiterConfig=wait)
            colds, warms = [], []
            for _ in range(args.rounds):
                colds.append(timed(rt, "sl"))
                warms.append(statistics.median(timed(rt, "sl") for _ in range(20)))
                deadline = time.monotonic() + 60  # until it has scaled back to zero
                while time.monotonic() < deadline:
                    v = sm.describe_endpoint(EndpointName="sl")["ProductionVariants"][0]
                    if v["CurrentInstanceCount"] == 0:
                        break
                    time.sleep(0.2)
        finally:
            up.stop()
    cold, warm = statistics.median(colds) * 1000, statistics.median(warms) * 1000
    print(
        f"instance endpoint: CreateEndpoint to InService {inst_create * 1000:.0f} ms; first request "
        f"{inst_first * 1000:.1f} ms; warm {inst_warm * 1000:.2f} ms"
    )
    print(f"serverless endpoint: cold start (first request, median of {args.rounds}) {cold:.0f} ms; warm {warm:.2f} ms")
    print(
        f"cold start / instance endpoint's first request: {cold / (inst_first * 1000):.1f}x; "
        f"warm serverless / warm instance: {warm / (inst_warm * 1000):.2f}"
    )


if __name__ == "__main__":
    main()
