"""Scheduling overhead of a SageMaker pipeline on servekit up, side by side with the same jobs started by hand, in
one run (issue 28's goal: at most 0.5 s per step).

    python benchmarks/pipeline_overhead_bench.py [--steps 5] [--rounds 3]

A chain of --steps processing jobs (each a one-line script; each step DependsOn the one before) runs two ways
against one ``servekit up``:
- **by hand**: CreateProcessingJob, DescribeProcessingJob every 0.1 s until Completed, then the next job;
- **as a pipeline** (``"Version": "2020-12-01"``): StartPipelineExecution, DescribePipelineExecution every 0.1 s
  until Succeeded.
Reported per round (alternating which goes first) and as medians: both wall times, the overhead per step
``(pipeline - by hand) / steps``, and from the execution's own records the two gaps the pipeline adds per step:
*start* (the step's StartTime until its job's CreationTime: arguments evaluated, cache looked up, job created) and
*hand-off* (a job's ProcessingEndTime until the next step's StartTime: the job's end noticed, the next one
scheduled). Only loopback is used.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import boto3

from servekit.aws import Credentials
from servekit.testing.hosting import UpProcess

BUCKET = "sagemaker-us-east-1-000000000000"
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
ROLE = "arn:aws:iam::000000000000:role/bench"
SCRIPT = "print('step ran')\n"
POLL_S = 0.1


def job_request(name: str | None) -> dict[str, Any]:
    request: dict[str, Any] = {
        "RoleArn": ROLE,
        "AppSpecification": {"ImageUri": IMAGE, "ContainerEntrypoint": ["python3", "/opt/ml/processing/code/s.py"]},
        "ProcessingResources": {
            "ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.large", "VolumeSizeInGB": 10}
        },
        "ProcessingInputs": [
            {
                "InputName": "code",
                "S3Input": {
                    "S3Uri": f"s3://{BUCKET}/bench/s.py",
                    "LocalPath": "/opt/ml/processing/code",
                    "S3DataType": "S3Prefix",
                    "S3InputMode": "File",
                },
            }
        ],
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }
    if name is not None:
        request["ProcessingJobName"] = name
    return request


def by_hand(sm: Any, steps: int, tag: str) -> float:
    t0 = time.perf_counter()
    for i in range(steps):
        name = f"hand-{tag}-{i}"
        sm.create_processing_job(**job_request(name))
        while sm.describe_processing_job(ProcessingJobName=name)["ProcessingJobStatus"] != "Completed":
            time.sleep(POLL_S)
    return time.perf_counter() - t0


def as_pipeline(sm: Any, steps: int, tag: str) -> tuple[float, list[float], list[float]]:
    chain = [
        {
            "Name": f"S{i}",
            "Type": "Processing",
            "Arguments": job_request(None),
            **({"DependsOn": [f"S{i - 1}"]} if i else {}),
        }
        for i in range(steps)
    ]
    name = f"bench-{tag}"
    doc = {"Version": "2020-12-01", "Parameters": [], "Steps": chain}
    sm.create_pipeline(PipelineName=name, PipelineDefinition=json.dumps(doc), RoleArn=ROLE)
    t0 = time.perf_counter()
    arn = sm.start_pipeline_execution(PipelineName=name, ClientRequestToken=f"{name}".ljust(32, "0"))[
        "PipelineExecutionArn"
    ]
    while True:
        status = sm.describe_pipeline_execution(PipelineExecutionArn=arn)["PipelineExecutionStatus"]
        if status != "Executing":
            break
        time.sleep(POLL_S)
    wall = time.perf_counter() - t0
    if status != "Succeeded":
        raise SystemExit(f"the pipeline ended {status}")
    listed = sm.list_pipeline_execution_steps(PipelineExecutionArn=arn, SortOrder="Ascending")
    rows = {s["StepName"]: s for s in listed["PipelineExecutionSteps"]}
    starts, handoffs = [], []
    for i in range(steps):
        row = rows[f"S{i}"]
        job = sm.describe_processing_job(ProcessingJobName=row["Metadata"]["ProcessingJob"]["Arn"].rsplit("/", 1)[-1])
        starts.append((job["CreationTime"] - row["StartTime"]).total_seconds())
        if i + 1 < steps:
            handoffs.append((rows[f"S{i + 1}"]["StartTime"] - job["ProcessingEndTime"]).total_seconds())
    return wall, starts, handoffs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        up = UpProcess(Path(tmp) / "home")
        up.start()
        try:
            key = Credentials.load_or_create(up.home).admin
            kw = {
                "endpoint_url": up.url,
                "region_name": "us-east-1",
                "aws_access_key_id": key.access_key_id,
                "aws_secret_access_key": key.secret_access_key,
            }
            sm, s3 = boto3.client("sagemaker", **kw), boto3.client("s3", **kw)
            s3.put_object(Bucket=BUCKET, Key="bench/s.py", Body=SCRIPT.encode())
            hand_walls, pipe_walls, all_starts, all_handoffs = [], [], [], []
            by_hand(sm, 1, "warm")  # the first job pays for imports
            for r in range(args.rounds):
                order = ("hand", "pipe") if r % 2 == 0 else ("pipe", "hand")
                for which in order:
                    if which == "hand":
                        hand_walls.append(by_hand(sm, args.steps, str(r)))
                    else:
                        wall, starts, handoffs = as_pipeline(sm, args.steps, str(r))
                        pipe_walls.append(wall)
                        all_starts += starts
                        all_handoffs += handoffs
                per_step = (pipe_walls[-1] - hand_walls[-1]) / args.steps
                print(
                    f"round {r + 1}: by hand {hand_walls[-1]:.2f} s, pipeline {pipe_walls[-1]:.2f} s, "
                    f"overhead {per_step:+.3f} s/step"
                )
        finally:
            up.stop()
    hand, pipe = statistics.median(hand_walls), statistics.median(pipe_walls)
    print(f"\n{args.steps} chained processing steps, median of {args.rounds} rounds:")
    print(f"  by hand   {hand:.2f} s ({hand / args.steps:.3f} s/step)")
    print(f"  pipeline  {pipe:.2f} s ({pipe / args.steps:.3f} s/step)  ratio {pipe / hand:.2f}")
    print(f"  overhead  {(pipe - hand) / args.steps:+.3f} s/step (goal <= 0.5)")
    print(f"  start     median {statistics.median(all_starts) * 1000:.0f} ms (step started -> job created)")
    if all_handoffs:
        print(f"  hand-off  median {statistics.median(all_handoffs) * 1000:.0f} ms (job ended -> next step started)")


if __name__ == "__main__":
    main()
