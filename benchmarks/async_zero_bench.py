"""Asynchronous inference from zero instances on servekit up: how long one request takes to be answered in S3 when
its variant is at zero (the step policy on HasBacklogWithoutCapacity must bring an instance first) against the
same request on the variant at one instance, in one run.

    python benchmarks/async_zero_bench.py [--rounds 3]

One asynchronous endpoint of a handler model (a JSON list in, each value tripled) registered with Application Auto
Scaling at MinCapacity 0, MaxCapacity 1, with AWS's documented step policy (+1 on HasBacklogWithoutCapacity >= 1,
Cooldown 0) and its alarm (Period 1 s, 2 of 2 periods: servekit up runs with --metrics-resolution-s 1, so the
alarm's wait is 60 times shorter than AWS's minimum). Warm: --rounds requests, one at a time, on the variant at one
instance. From zero: each round sets the variant to 0 instances (UpdateEndpointWeightsAndCapacities), then times one
InvokeEndpointAsync until its answer exists in S3 (polled every 50 ms). The difference is the alarm's detection plus
an instance's start. Only loopback is used.
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

BUCKET = "sagemaker-us-east-1-000000000000"
HANDLER = """
import json

def model_fn(model_dir):
    return 3.0

def transform_fn(factor, body, content_type, accept):
    return json.dumps([x * factor for x in json.loads(body)]), "application/json"
"""
KEY = {
    "ServiceNamespace": "sagemaker",
    "ResourceId": "endpoint/zero/variant/A",
    "ScalableDimension": "sagemaker:variant:DesiredInstanceCount",
}


def wait(check: Any, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        code = root / "triple" / "1" / "code"
        code.mkdir(parents=True)
        (code / "inference.py").write_text(textwrap.dedent(HANDLER))
        up = UpProcess(root / "home", "--metrics-resolution-s", "1")
        up.start()
        try:
            sm, s3, rt = up.sm(), up.client("s3"), up.rt()
            aas, cw = up.client("application-autoscaling"), up.client("cloudwatch")
            sm.create_model(ModelName="t", PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(root / "triple")})
            variant = {"VariantName": "A", "ModelName": "t", "InitialInstanceCount": 1, "InstanceType": "ml.m5.large"}
            sm.create_endpoint_config(
                EndpointConfigName="zero",
                ProductionVariants=[variant],
                AsyncInferenceConfig={"OutputConfig": {"S3OutputPath": f"s3://{BUCKET}/zero/out"}},
            )
            sm.create_endpoint(EndpointName="zero", EndpointConfigName="zero")
            sm.get_waiter("endpoint_in_service").wait(
                EndpointName="zero", WaiterConfig={"Delay": 1, "MaxAttempts": 120}
            )
            aas.register_scalable_target(MinCapacity=0, MaxCapacity=1, **KEY)
            step = aas.put_scaling_policy(
                PolicyName="from-zero", PolicyType="StepScaling", **KEY,
                StepScalingPolicyConfiguration={
                    "AdjustmentType": "ChangeInCapacity", "Cooldown": 0,
                    "StepAdjustments": [{"MetricIntervalLowerBound": 0, "ScalingAdjustment": 1}],
                },
            )  # fmt: skip
            cw.put_metric_alarm(
                AlarmName="zero-backlog", MetricName="HasBacklogWithoutCapacity", Namespace="AWS/SageMaker",
                Statistic="Average", Period=1, EvaluationPeriods=2, DatapointsToAlarm=2, Threshold=1,
                ComparisonOperator="GreaterThanOrEqualToThreshold", TreatMissingData="missing",
                Dimensions=[{"Name": "EndpointName", "Value": "zero"}], AlarmActions=[step["PolicyARN"]],
            )  # fmt: skip
            s3.put_object(Bucket=BUCKET, Key="zero/in.json", Body=b"[1, 2, 3]")

            def instances() -> tuple[str, int]:
                d = sm.describe_endpoint(EndpointName="zero")
                return str(d["EndpointStatus"]), int(d["ProductionVariants"][0]["CurrentInstanceCount"])

            def one() -> float:
                t0 = time.perf_counter()
                answer = rt.invoke_endpoint_async(
                    EndpointName="zero", InputLocation=f"s3://{BUCKET}/zero/in.json", ContentType="application/json"
                )
                key = answer["OutputLocation"].split("/", 3)[3]
                wait(lambda: s3.list_objects_v2(Bucket=BUCKET, Prefix=key).get("KeyCount", 0) > 0)
                return time.perf_counter() - t0

            one()  # warm-up
            warm = [one() for _ in range(args.rounds)]
            cold = []
            for _ in range(args.rounds):
                sm.update_endpoint_weights_and_capacities(
                    EndpointName="zero", DesiredWeightsAndCapacities=[{"VariantName": "A", "DesiredInstanceCount": 0}]
                )
                wait(lambda: instances() == ("InService", 0))
                time.sleep(3)  # let the alarm see the idle (0) datapoints again before the next request
                cold.append(one())
                wait(lambda: instances() == ("InService", 1))
        finally:
            up.stop()
    w, c = statistics.median(warm), statistics.median(cold)
    print(f"one asynchronous request answered in S3, median of {args.rounds} (1-s metrics, alarm 2 x 1 s):")
    print(f"  variant at 1 instance: {w * 1000:.0f} ms  {[round(x * 1000) for x in warm]}")
    print(f"  variant at 0 instances: {c * 1000:.0f} ms  {[round(x * 1000) for x in cold]}")
    print(f"  from zero / warm: {c / w:.1f}")


if __name__ == "__main__":
    main()
