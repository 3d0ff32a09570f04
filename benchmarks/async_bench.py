"""Asynchronous inference on servekit up: throughput of InvokeEndpointAsync against InvokeEndpoint of the same
model, in one run.

    python benchmarks/async_bench.py [--requests 200] [--clients 8]

One endpoint config per mode for one handler model (a JSON list in, each value tripled), one instance each. Sync:
--requests InvokeEndpoint calls from --clients threads. Async: the same number of request bodies uploaded to the
plane's S3 first (not timed), then InvokeEndpointAsync for each from --clients threads, timed until the last answer
exists in S3 (ListObjectsV2 polled every 50 ms). Both answers per second; async pays for the S3 read and write of
each request and the durable queue. Only loopback is used.
"""

from __future__ import annotations

import argparse
import tempfile
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from servekit.testing.hosting import UpProcess

BUCKET = "sagemaker-us-east-1-000000000000"
HANDLER = """
import json

def model_fn(model_dir):
    return 3.0

def transform_fn(factor, body, content_type, accept):
    return json.dumps([x * factor for x in json.loads(body)]), "application/json"
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        code = root / "triple" / "1" / "code"
        code.mkdir(parents=True)
        (code / "inference.py").write_text(textwrap.dedent(HANDLER))
        up = UpProcess(root / "home")
        up.start()
        try:
            sm, s3 = up.sm(), up.client("s3")
            sm.create_model(ModelName="t", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(root / "triple")})
            variant = {"VariantName": "A", "ModelName": "t", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
            sm.create_endpoint_config(EndpointConfigName="sync", ProductionVariants=[variant])
            out = {"S3OutputPath": f"s3://{BUCKET}/bench/out"}
            sm.create_endpoint_config(
                EndpointConfigName="async",
                ProductionVariants=[variant],
                AsyncInferenceConfig={"OutputConfig": out, "ClientConfig": {"MaxConcurrentInvocationsPerInstance": 8}},
            )
            for name in ("sync", "async"):
                sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
                sm.get_waiter("endpoint_in_service").wait(
                    EndpointName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
                )
            for i in range(args.requests):
                s3.put_object(Bucket=BUCKET, Key=f"bench/in/{i}.json", Body=b"[1, 2, 3]")
            local = __import__("threading").local()

            def rt() -> object:
                if not hasattr(local, "rt"):
                    local.rt = up.rt()
                return local.rt

            def sync_call(i: int) -> None:
                rt().invoke_endpoint(EndpointName="sync", Body=b"[1, 2, 3]", ContentType="application/json")[
                    "Body"
                ].read()  # type: ignore[attr-defined]

            def async_call(i: int) -> None:
                rt().invoke_endpoint_async(  # type: ignore[attr-defined]
                    EndpointName="async",
                    InputLocation=f"s3://{BUCKET}/bench/in/{i}.json",
                    ContentType="application/json",
                )

            with ThreadPoolExecutor(args.clients) as pool:
                list(pool.map(sync_call, range(20)))  # warm-up
                t0 = time.perf_counter()
                list(pool.map(sync_call, range(args.requests)))
                sync_s = time.perf_counter() - t0
                t0 = time.perf_counter()
                list(pool.map(async_call, range(args.requests)))
                accepted_s = time.perf_counter() - t0
            while True:
                listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="bench/out/", MaxKeys=10000).get("KeyCount", 0)
                if listed >= args.requests:
                    break
                time.sleep(0.05)
            async_s = time.perf_counter() - t0
        finally:
            up.stop()
    print(f"{args.requests} requests from {args.clients} client threads, one instance each:")
    print(f"  InvokeEndpoint:      {args.requests / sync_s:.0f} answers/s")
    accepted, answered = args.requests / accepted_s, args.requests / async_s
    print(f"  InvokeEndpointAsync: {accepted:.0f} accepted/s, {answered:.0f} answers/s in S3")
    print(f"  async / sync answers per second: {sync_s / async_s:.2f}")


if __name__ == "__main__":
    main()
