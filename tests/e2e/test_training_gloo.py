"""A PyTorch script-mode training job of two hosts all-reduces a tensor with torch.distributed's gloo backend, the
rendezvous from the environment the job sets (``MASTER_ADDR`` = algo-1, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``,
``GLOO_SOCKET_IFNAME``). Needs torch: the extras suite."""

from __future__ import annotations

import io
import json
import tarfile
import textwrap
from collections.abc import Iterator

import pytest
from tests.e2e.test_training_jobs import BUCKET, FAST, clients, job

from servekit.testing.hosting import UpProcess

pytestmark = [pytest.mark.e2e, pytest.mark.extras]
PYTORCH = "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.1-cpu-py310"

ALL_REDUCE = textwrap.dedent(
    """
    import json, os
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    t = torch.tensor([float(rank + 1), 10.0 * (rank + 1)])
    dist.all_reduce(t)
    print(f"rank {rank} of {dist.get_world_size()}: sum {t.tolist()}", flush=True)
    with open(os.path.join(os.environ["SM_MODEL_DIR"], f"rank-{rank}.json"), "w") as f:
        json.dump({"sum": t.tolist(), "world": dist.get_world_size()}, f)
    dist.destroy_process_group()
    """
)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("training-gloo") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def test_two_hosts_all_reduce_with_gloo(up: UpProcess) -> None:
    sm, s3, logs = clients(up)
    request = job(
        s3,
        "gloo-1",
        ALL_REDUCE,
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 2, "VolumeSizeInGB": 10},
    )
    request["AlgorithmSpecification"]["TrainingImage"] = PYTORCH
    sm.create_training_job(**request)
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="gloo-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="gloo-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    body = s3.get_object(Bucket=BUCKET, Key="output/gloo-1/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        ranks = {n: json.load(tar.extractfile(n)) for n in sorted(tar.getnames())}  # type: ignore[arg-type]
    assert ranks == {
        "rank-0.json": {"sum": [3.0, 30.0], "world": 2},
        "rank-1.json": {"sum": [3.0, 30.0], "world": 2},
    }
    streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="gloo-1/")
    messages = []
    for stream in streams["logStreams"]:
        events = logs.get_log_events(
            logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream["logStreamName"], startFromHead=True
        )
        messages += [e["message"] for e in events["events"] if e["message"].startswith("rank ")]
    assert sorted(messages) == ["rank 0 of 2: sum [3.0, 30.0]", "rank 1 of 2: sum [3.0, 30.0]"]
