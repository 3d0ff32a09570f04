"""Training-job overhead on servekit up, side by side with running the same script directly, in one run.

    python benchmarks/jobs_bench.py [--rounds 5] [--channel-mb 1024] [--gloo-mb 4 --gloo-iters 50]

Start overhead: CreateTrainingJob's call until the script's first line (the script prints time.time()), against
``python script.py`` started by hand until its first line. End overhead: the script's last line until
DescribeTrainingJob first says Completed (polled every 20 ms). Channel set-up: a job on a --channel-mb channel in
the plane's S3 against one on a 1 KB channel (hard links: the difference should not grow with the size). With
torch installed, a 2-host PyTorch job all-reducing a --gloo-mb float32 tensor --gloo-iters times over gloo, against
the same two processes started by hand with the same rendezvous environment (the loop's time, and spawn -> end).
Median of --rounds. Only loopback is used.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import boto3

from servekit.aws import Credentials
from servekit.testing.hosting import UpProcess

BUCKET = "sagemaker-us-east-1-000000000000"
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
SCRIPT = "import time\nprint('first', time.time(), flush=True)\nprint('last', time.time(), flush=True)\n"
PYTORCH = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.1-cpu-py310"
GLOO = """
import os, sys, time
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(int(os.environ["GLOO_MB"]) * 2**18)
dist.all_reduce(t)  # warm the connections
dist.barrier()
t0 = time.perf_counter()
for _ in range(int(os.environ["GLOO_ITERS"])):
    dist.all_reduce(t)
if dist.get_rank() == 0:
    print("allreduce_s", time.perf_counter() - t0, flush=True)
dist.destroy_process_group()
"""


def tar_gz(name: str, text: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(text.encode())
        tar.addfile(info, io.BytesIO(text.encode()))
    return buf.getvalue()


def job(name: str, channel: str) -> dict[str, Any]:
    return {
        "TrainingJobName": name,
        "RoleArn": "arn:aws:iam::000000000000:role/bench",
        "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
        "HyperParameters": {
            "sagemaker_program": json.dumps("train.py"),
            "sagemaker_submit_directory": json.dumps(f"s3://{BUCKET}/bench/source/sourcedir.tar.gz"),
        },
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/{channel}"}},
            }
        ],
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/bench/out"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }


def timed_job(sm: Any, logs_dir: Path, name: str, channel: str) -> tuple[float, float]:
    t0 = time.time()
    sm.create_training_job(**job(name, channel))
    while True:
        status = sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"]
        if status != "InProgress":
            done = time.time()
            break
        time.sleep(0.02)  # polling another process's progress
    if status != "Completed":
        raise RuntimeError(f"{name} ended {status}")
    text = (logs_dir / name / "algo-1.log").read_text().split()
    first, last = float(text[text.index("first") + 1]), float(text[text.index("last") + 1])
    return first - t0, done - last


def direct(script: Path) -> float:
    t0 = time.time()
    out = subprocess.run([sys.executable, "-u", str(script)], capture_output=True, text=True, check=True).stdout
    return float(out.split()[1]) - t0


def gloo_by_hand(script: Path, env: dict[str, str]) -> tuple[float, float]:
    """The same two processes started here: (all-reduce loop seconds, spawn -> both ended)."""
    from servekit.backends.local import free_port

    base = {**os.environ, **env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": "2"}
    base["GLOO_SOCKET_IFNAME"] = "lo"
    t0 = time.time()
    procs = [
        subprocess.Popen(
            [sys.executable, "-u", str(script)], env={**base, "RANK": str(r)}, stdout=subprocess.PIPE, text=True
        )
        for r in range(2)
    ]
    outs = [p.communicate()[0] for p in procs]
    wall = time.time() - t0
    words = outs[0].split()
    return float(words[words.index("allreduce_s") + 1]), wall


def gloo_job(sm: Any, logs_dir: Path, name: str, env: dict[str, str]) -> tuple[float, float]:
    request = job(name, "small")
    request["AlgorithmSpecification"]["TrainingImage"] = PYTORCH
    request["HyperParameters"]["sagemaker_submit_directory"] = json.dumps(f"s3://{BUCKET}/gloo/source/sourcedir.tar.gz")
    request["ResourceConfig"]["InstanceCount"] = 2
    request["Environment"] = env
    t0 = time.time()
    sm.create_training_job(**request)
    while (status := sm.describe_training_job(TrainingJobName=name)["TrainingJobStatus"]) == "InProgress":
        time.sleep(0.02)  # polling another process's progress
    wall = time.time() - t0
    if status != "Completed":
        raise RuntimeError(f"{name} ended {status}")
    words = (logs_dir / name / "algo-1.log").read_text().split()
    return float(words[words.index("allreduce_s") + 1]), wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--channel-mb", type=int, default=1024)
    ap.add_argument("--gloo-mb", type=int, default=4, help="all-reduced tensor size (0: skip the gloo part)")
    ap.add_argument("--gloo-iters", type=int, default=50)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jobs-bench-"))
    script = work / "train.py"
    script.write_text(SCRIPT)
    up = UpProcess(work / "home")
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
        s3.put_object(Bucket=BUCKET, Key="bench/source/sourcedir.tar.gz", Body=tar_gz("train.py", SCRIPT))
        s3.put_object(Bucket=BUCKET, Key="small/x.csv", Body=b"x" * 1024)
        big = work / "big.bin"
        with big.open("wb") as f:
            for _ in range(args.channel_mb):
                f.write(os.urandom(2**20))
        s3.upload_file(str(big), BUCKET, "big/data.bin")
        big.unlink()
        starts, ends, small_total, big_total, directs = [], [], [], [], []
        for i in range(args.rounds):
            directs.append(direct(script))
            t0 = time.time()
            start, end = timed_job(sm, up.home / "training", f"small-{i}", "small")
            small_total.append(time.time() - t0)
            starts.append(start)
            ends.append(end)
            t0 = time.time()
            timed_job(sm, up.home / "training", f"big-{i}", "big")
            big_total.append(time.time() - t0)
        gloo_hand, gloo_jobs = [], []
        if args.gloo_mb:
            gloo_script = work / "gloo.py"
            gloo_script.write_text(GLOO)
            s3.put_object(Bucket=BUCKET, Key="gloo/source/sourcedir.tar.gz", Body=tar_gz("train.py", GLOO))
            env = {"GLOO_MB": str(args.gloo_mb), "GLOO_ITERS": str(args.gloo_iters)}
            for i in range(args.rounds):
                gloo_hand.append(gloo_by_hand(gloo_script, env))
                gloo_jobs.append(gloo_job(sm, up.home / "training", f"gloo-{i}", env))
        med = statistics.median
        print(f"jobs bench: {os.cpu_count()} CPUs, median of {args.rounds}")
        print(f"  script started by hand, spawn -> first line:      {med(directs) * 1000:8.1f} ms")
        print(f"  training job, CreateTrainingJob -> first line:    {med(starts) * 1000:8.1f} ms")
        print(f"  training job, last line -> Describe says Completed: {med(ends) * 1000:8.1f} ms")
        print(f"  whole job, 1 KB channel:                          {med(small_total) * 1000:8.1f} ms")
        print(f"  whole job, {args.channel_mb} MB channel (hard links):          {med(big_total) * 1000:8.1f} ms")
        if gloo_jobs:
            hand_loop, job_loop = med(h[0] for h in gloo_hand), med(j[0] for j in gloo_jobs)
            what = f"{args.gloo_iters} x all_reduce of {args.gloo_mb} MB, 2 hosts (gloo)"
            hand_wall, job_wall = med(h[1] for h in gloo_hand), med(j[1] for j in gloo_jobs)
            print(f"  {what}, by hand:   {hand_loop * 1000:8.1f} ms  (spawn -> end {hand_wall:.2f} s)")
            print(f"  {what}, as a job:  {job_loop * 1000:8.1f} ms  (create -> Completed {job_wall:.2f} s)")
            print(f"  all-reduce loop, job / by hand: {job_loop / hand_loop:.2f}")
    finally:
        up.stop()


if __name__ == "__main__":
    main()
