"""Training jobs of several hosts (``InstanceCount`` > 1) on a real ``servekit up``: each host is a sandbox with its
own ``/opt/ml``, hostname ``algo-N`` and ``SM_CURRENT_HOST``; every host name resolves to the loopback, so the hosts
rendezvous at ``MASTER_ADDR:MASTER_PORT``; a ``ShardedByS3Key`` channel gives each host its share of the objects;
each host's log is its own stream; one failing host fails the job and stops the others. The torch.distributed
(gloo) all-reduce of two hosts is in the extras suite (it needs torch)."""

from __future__ import annotations

import io
import json
import tarfile
import textwrap
from collections.abc import Iterator
from typing import Any

import botocore.exceptions
import pytest
from tests.e2e.test_training_jobs import BUCKET, FAST, clients, job

from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e

RENDEZVOUS = textwrap.dedent(
    """
    import json, os, socket, sys
    host = os.environ["SM_CURRENT_HOST"]
    hosts = json.loads(os.environ["SM_HOSTS"])
    shard = sorted(os.listdir(os.environ["SM_CHANNEL_SHARDED"]))
    everything = sorted(os.listdir(os.environ["SM_CHANNEL_FULL"]))
    addr = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    peers = []
    if host == hosts[0]:  # the master gathers every other host's name
        server = socket.create_server((socket.gethostbyname(addr[0]), addr[1]))
        for _ in hosts[1:]:
            conn, _ = server.accept()
            peers.append(conn.makefile().readline().strip())
            conn.close()
    else:
        for attempt in range(600):
            try:
                conn = socket.create_connection(addr)
                break
            except ConnectionRefusedError:
                import time; time.sleep(0.05)
        conn.sendall((host + "\\n").encode())
        conn.close()
    seen = {
        "hostname": socket.gethostname(), "host": host, "hosts": hosts, "rank": os.environ["RANK"],
        "world": os.environ["WORLD_SIZE"], "master": socket.gethostbyname(os.environ["MASTER_ADDR"]),
        "shard": shard, "full": everything, "peers": sorted(peers),
        "resource": json.load(open("/opt/ml/input/config/resourceconfig.json"))["current_host"],
    }
    print("host", host, "ready", flush=True)
    with open(os.path.join(os.environ["SM_MODEL_DIR"], host + ".json"), "w") as f:
        json.dump(seen, f)
    """
)


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("training-hosts") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def channel(name: str, uri: str, distribution: str) -> dict[str, Any]:
    return {
        "ChannelName": name,
        "DataSource": {
            "S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": uri, "S3DataDistributionType": distribution}
        },
    }


def test_three_hosts_rendezvous_share_a_sharded_channel_and_write_one_model(up: UpProcess) -> None:
    sm, s3, logs = clients(up)
    for i in range(7):
        s3.put_object(Bucket=BUCKET, Key=f"shards/part-{i}.csv", Body=f"{i}\n".encode())
    request = job(
        s3,
        "hosts-1",
        RENDEZVOUS,
        ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 3, "VolumeSizeInGB": 10},
        InputDataConfig=[
            channel("sharded", f"s3://{BUCKET}/shards", "ShardedByS3Key"),
            channel("full", f"s3://{BUCKET}/shards", "FullyReplicated"),
        ],
    )
    sm.create_training_job(**request)
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="hosts-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="hosts-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    body = s3.get_object(Bucket=BUCKET, Key="output/hosts-1/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        seen = {n: json.load(tar.extractfile(n)) for n in sorted(tar.getnames())}  # type: ignore[arg-type]
    assert list(seen) == ["algo-1.json", "algo-2.json", "algo-3.json"]
    parts = [f"part-{i}.csv" for i in range(7)]
    shards = []
    for rank, (name, s) in enumerate(seen.items()):
        host = name.removesuffix(".json")
        assert (s["hostname"], s["host"], s["resource"], s["rank"], s["world"]) == (host, host, host, str(rank), "3")
        assert s["hosts"] == ["algo-1", "algo-2", "algo-3"]
        assert s["master"] == "127.0.0.1"
        assert s["full"] == parts
        shards.append(s["shard"])
    assert shards == [parts[0::3], parts[1::3], parts[2::3]]
    assert seen["algo-1.json"]["peers"] == ["algo-2", "algo-3"]
    streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="hosts-1/")
    names = sorted(s["logStreamName"].rsplit("-", 1)[0] for s in streams["logStreams"])
    assert names == ["hosts-1/algo-1", "hosts-1/algo-2", "hosts-1/algo-3"]
    for stream in streams["logStreams"]:
        host = stream["logStreamName"].split("/")[1].rsplit("-", 1)[0]
        events = logs.get_log_events(
            logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream["logStreamName"], startFromHead=True
        )
        lines = [e["message"] for e in events["events"] if not e["message"].startswith("servekit: ")]
        assert lines == [f"host {host} ready"]


def test_a_failing_host_fails_the_job_and_stops_the_others(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    script = textwrap.dedent(
        """
        import os, time
        if os.environ["SM_CURRENT_HOST"] == "algo-2":
            raise RuntimeError("rank 1 lost its shard")
        while True:  # the others wait for it, as in a rendezvous
            time.sleep(0.1)
        """
    )
    sm.create_training_job(
        **job(s3, "hosts-2", script, ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 2})
    )
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="hosts-2", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="hosts-2")
    assert d["TrainingJobStatus"] == "Failed"
    assert "RuntimeError: rank 1 lost its shard" in d["FailureReason"]
    assert d["FailureReason"].endswith("on algo-2")
