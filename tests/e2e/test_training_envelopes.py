"""A training job's instance type is an envelope, as for endpoints: ``SM_NUM_CPUS`` is its vCPUs and the job is
pinned to that many CPUs; a job whose processes hold more resident memory than the type has is killed and ends
Failed with "out of memory" in FailureReason; the next job on the same plane runs as usual. The types come from
``servekit up --instance-types``."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import botocore.exceptions
import pytest
import sklearn
from tests.e2e.test_training_jobs import FAST, TRAIN, clients, job

from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
SMALL = "ml.c5.xlarge"  # replaced by the file below: 1 vCPU, 0.25 GiB
INSTANCE_TYPES = textwrap.dedent(
    f"""
    instance_types:
      - name: {SMALL}
        vcpus: 1
        memory_gib: 0.25
        price_per_hour: 0
    """
)
GREEDY = textwrap.dedent(
    """
    import os, time
    print("cpus", os.environ["SM_NUM_CPUS"], "pinned to", len(os.sched_getaffinity(0)), flush=True)
    hold = []
    while True:  # up to 1 GiB, 64 MiB at a time, then wait to be killed
        if len(hold) < 16:
            hold.append(b"x" * (64 << 20))
        time.sleep(0.05)
    """
)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    root: Path = tmp_path_factory.mktemp("training-envelopes")
    types = root / "types.yaml"
    types.write_text(INSTANCE_TYPES)
    u = UpProcess(root / "home", "--instance-types", str(types))
    u.start()
    try:
        yield u
    finally:
        u.stop()


def test_a_job_over_its_memory_fails_out_of_memory_and_the_next_job_runs(up: UpProcess) -> None:
    sm, s3, logs = clients(up)
    small = {"InstanceType": SMALL, "InstanceCount": 1, "VolumeSizeInGB": 10}
    sm.create_training_job(**job(s3, "greedy-1", GREEDY, ResourceConfig=small))
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="greedy-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="greedy-1")
    assert d["TrainingJobStatus"] == "Failed"
    assert "out of memory" in d["FailureReason"]
    assert f"0.25 GiB of its instance type {SMALL}" in d["FailureReason"]
    stream = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="greedy-1/")
    name = stream["logStreams"][0]["logStreamName"]
    events = logs.get_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=name, startFromHead=True)
    messages = [e["message"] for e in events["events"]]
    # the image is scikit-learn 1.2: servekit's Python has another version, and the job's log says so first
    mismatch = not sklearn.__version__.startswith("1.2.")
    assert [m.startswith("servekit: the image") and "is scikit-learn 1.2" in m for m in messages[:1]] == [mismatch]
    assert messages[int(mismatch)] == "cpus 1 pinned to 1"  # SM_NUM_CPUS, and taskset's pinning
    sm.create_training_job(**job(s3, "after-1", TRAIN, ResourceConfig=small))
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="after-1", WaiterConfig=FAST)
    assert sm.describe_training_job(TrainingJobName="after-1")["TrainingJobStatus"] == "Completed"
