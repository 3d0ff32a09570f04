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


FILLS_TMP = textwrap.dedent(
    """
    import time
    with open("/tmp/fill", "wb") as f:  # 1 GiB, 64 MiB at a time, in the private /tmp (a tmpfs: memory)
        for _ in range(16):
            f.write(b"x" * (64 << 20))
            f.flush()
            time.sleep(0.05)
    time.sleep(600)  # then wait to be killed
    """
)


def test_what_a_job_writes_to_its_tmp_counts_against_its_memory(up: UpProcess) -> None:
    """The sandbox's /tmp is a tmpfs: its bytes are memory, and count with the processes' resident memory."""
    sm, s3, _ = clients(up)
    small = {"InstanceType": SMALL, "InstanceCount": 1, "VolumeSizeInGB": 10}
    limit = {"MaxRuntimeInSeconds": 60}  # without the count, the job would sleep until this stops it
    sm.create_training_job(**job(s3, "tmp-filler", FILLS_TMP, ResourceConfig=small, StoppingCondition=limit))
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="tmp-filler", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="tmp-filler")
    assert d["TrainingJobStatus"] == "Failed" and "out of memory" in d["FailureReason"], d.get("FailureReason")
    assert "(resident memory and its /tmp)" in d["FailureReason"]


def test_a_jobs_tmp_holds_no_more_than_its_volume(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    one_gib = {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 1}
    script = "import os, sys\nst = os.statvfs('/tmp')\nprint('tmp bytes', st.f_blocks * st.f_frsize)\n"
    script += "sys.exit(0 if st.f_blocks * st.f_frsize == 1 << 30 else 1)\n"
    sm.create_training_job(**job(s3, "tmp-size", script, ResourceConfig=one_gib))
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="tmp-size", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="tmp-size")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
