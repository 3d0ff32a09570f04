"""``servekit up --backend ray`` on a real two-node Ray cluster on this machine (``ray start --head`` plus a second
``ray start`` joining it, each with its own marker resource): instances spread over both nodes, InvokeEndpoint
through boto3, an instance killed with ``ray.kill`` is replaced, a stopped node's instance comes back on the other
node, and a request mix sent all along with botocore's own retry handling sees no failure."""

from __future__ import annotations

import importlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import botocore.exceptions
import pytest

from servekit.backends.local import free_port
from servekit.testing.hosting import UpProcess, scaling_model

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.e2e, pytest.mark.ray_cluster]
FAST = {"Delay": 1, "MaxAttempts": 120}
GIB = 2**30
# Each node: 4 logical CPUs and 8 GiB of logical memory, room for two ml.t2.medium (2 vCPU, 4 GiB) instances, so
# either node alone can hold the endpoint; logical amounts are bookkeeping, not this machine's cores.
# Every node on loopback: the nodes, this test's driver, servekit up and the instances it starts all use 127.0.0.1.
# Ray 2.x rewrites 127.0.0.1, given as --node-ip-address, as ray.init's _node_ip_address or as the host of an
# address, to this machine's routable address (ray._private.services.resolve_ip_for_localhost), and its gRPC servers
# then listen on every interface. With RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 "this node" is 127.0.0.1 instead and they
# listen on 127.0.0.1 alone; but then `ray start --address` refuses to add a node, so a joining node's `ray start`
# is JOIN: allowed to join, and keeping 127.0.0.1 as given.
LOOPBACK = "127.0.0.1"
NODE = (
    "--num-cpus",
    "4",
    "--memory",
    str(8 * GIB),
    "--object-store-memory",
    str(100 * 2**20),
    "--node-ip-address",
    LOOPBACK,
)
RAY_ENV = {
    "RAY_AUTH_MODE": "disabled",  # a token some other local Ray left in ~/.ray must not apply to this cluster
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_prestart_worker_first_driver": "0",  # no idle workers started ahead: two cores are shared
    "RAY_enable_worker_prestart": "0",
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # read when ray is imported: this node is 127.0.0.1
}
JOIN = (
    "import sys\n"
    "from ray._private import ray_constants, services\n"
    "ray_constants.ENABLE_RAY_CLUSTER = True  # a node may join (RAY_ENV says no for everything else)\n"
    "services.resolve_ip_for_localhost = lambda host: host  # and 127.0.0.1 stays 127.0.0.1\n"
    "from ray.scripts.scripts import main\n"
    "sys.exit(main())\n"
)


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                kids = [int(c) for c in Path(f"/proc/{p}/task/{t}/children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _group(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    members.append(int(entry))
            except OSError:
                continue
    return members


@dataclass
class RayNode:
    """One ``ray start`` and the processes it left running: its own process group (it ran in a new session), plus
    the workers its raylet spawned (their own groups) and their children. Stopped by pid, never by name."""

    name: str
    pgid: int
    log: Path
    stopped: bool = field(default=False)

    def stop(self, grace_s: float = 5.0) -> None:
        if self.stopped:
            return
        self.stopped = True
        tree = set(_group(self.pgid))
        for pid in list(tree):
            tree.update(_descendants(pid))
        try:
            os.killpg(self.pgid, signal.SIGTERM)  # what `ray stop` sends first: the raylet tells the GCS it leaves
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_running(p) for p in tree):
            time.sleep(0.1)  # polling other processes' exit
        for pid in tree:
            if _running(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def start_node(name: str, args: list[str], log: Path) -> RayNode:
    """``ray start`` with ``args`` (a head with ``--head``, else a node joining one through JOIN), this Python's Ray."""
    ray_start = ["-m", "ray.scripts.scripts"] if "--head" in args else ["-c", JOIN]
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, *ray_start, "start", *args, "--disable-usage-stats"],
            stdout=out,
            stderr=out,
            env={**os.environ, **RAY_ENV},
            start_new_session=True,  # its daemons stay in this group: the node can be stopped alone
        )
    node = RayNode(name, proc.pid, log)
    if proc.wait(120) != 0:
        node.stop()
        raise RuntimeError(f"ray start ({name}) failed: {log.read_text()[-3000:]}")
    return node


@dataclass
class Cluster:
    address: str  # the head's GCS
    head: RayNode
    worker: RayNode


@pytest.fixture(scope="module")
def cluster() -> Iterator[Cluster]:
    # Ray's unix sockets live under the temp dir: a short path keeps them under the 107-byte limit
    tmp = Path(tempfile.mkdtemp(prefix="sk-ray-", dir="/tmp"))
    port = free_port()
    head = start_node(
        "node_a",
        [
            "--head",
            "--port",
            str(port),
            "--temp-dir",
            str(tmp),
            "--include-dashboard=false",
            "--include-log-monitor=false",
            "--ray-client-server-port",  # not the default 10001, which another local Ray may hold
            str(free_port()),
            "--dashboard-agent-listen-port",
            str(free_port()),
            "--resources",
            json.dumps({"node_a": 1}),
            *NODE,
        ],
        tmp / "head.log",
    )
    try:
        address = f"{LOOPBACK}:{port}"
        worker = start_node(
            "node_b",
            [
                "--address",
                address,
                "--include-log-monitor=false",
                "--dashboard-agent-listen-port",
                str(free_port()),
                "--resources",
                json.dumps({"node_b": 1}),
                *NODE,
            ],
            tmp / "worker.log",
        )
    except BaseException:
        head.stop()
        raise
    mp = pytest.MonkeyPatch()
    for k, v in RAY_ENV.items():
        mp.setenv(k, v)  # servekit up and this test's own driver see the cluster the same way
    # this process imported ray before RAY_ENV was set: its driver is told so directly
    mp.setattr(importlib.import_module("ray._private.ray_constants"), "ENABLE_RAY_CLUSTER", False)
    try:
        ray.init(
            address=address,
            namespace="servekit",
            logging_level="WARNING",
            log_to_driver=False,
            _node_ip_address=LOOPBACK,
        )
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {LOOPBACK}, ray.nodes()
        yield Cluster(address, head, worker)
    finally:
        ray.shutdown()
        worker.stop()
        head.stop()
        mp.undo()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def up(cluster: Cluster, tmp_path: Path) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path / "home", "--backend", "ray", "--ray-address", cluster.address)
    u.start()
    try:
        yield u
    finally:
        u.stop()


def node_ids() -> dict[str, str]:
    """The simulated node's marker resource -> its Ray node id, from the GCS."""
    out = {}
    for n in ray.nodes():
        for marker in ("node_a", "node_b"):
            if n["Alive"] and marker in n["Resources"]:
                out[marker] = n["NodeID"]
    return out


def actors(prefix: str) -> dict[str, str]:
    """The live instance actors of ``prefix`` (an endpoint's instances) -> the node id each runs on, as Ray's
    runtime context in the actor reports it."""
    out = {}
    for name in ray.util.list_named_actors():
        if name.startswith(prefix):
            try:
                out[name] = ray.get(ray.get_actor(name).where.remote(), timeout=30).node_id
            except (ValueError, ray.exceptions.RayError):  # ended between the listing and the call
                continue
    return out


def deploy(sm: Any, tmp: Path, endpoint: str, count: int, instance_type: str = "ml.t2.medium") -> None:
    model = f"{endpoint}-m"
    sm.create_model(
        ModelName=model, PrimaryContainer={"Image": "servekit", "ModelDataUrl": str(scaling_model(tmp, model, 2.0))}
    )
    sm.create_endpoint_config(
        EndpointConfigName=f"{endpoint}-cfg",
        ProductionVariants=[
            {"VariantName": "A", "ModelName": model, "InitialInstanceCount": count, "InstanceType": instance_type}
        ],
    )
    sm.create_endpoint(EndpointName=endpoint, EndpointConfigName=f"{endpoint}-cfg")


class Traffic:
    """Requests of mixed sizes sent back to back from a thread with a default botocore client, whose standard
    retry handler (connection errors, 5xx and throttling) is the only retrying: every failure it lets through is
    counted."""

    def __init__(self, up: UpProcess, endpoint: str) -> None:
        self._rt = up.rt()
        self._endpoint = endpoint
        self._stop = threading.Event()
        self.ok = 0
        self.retried = 0  # attempts botocore's retry handler added (it retries connection errors, 5xx, throttling)
        self.failures: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)

    def _run(self) -> None:
        sizes = (1, 7, 64, 1000)
        k = 0
        while not self._stop.is_set():
            xs = [float(i % 13) for i in range(sizes[k % len(sizes)])]
            k += 1
            try:
                r = self._rt.invoke_endpoint(
                    EndpointName=self._endpoint, Body=json.dumps(xs), ContentType="application/json"
                )
                out = json.loads(r["Body"].read())["out"]
                self.retried += int(r["ResponseMetadata"].get("RetryAttempts", 0))
                if out != [x * 2.0 for x in xs]:
                    self.failures.append(f"wrong answer for {len(xs)} values")
                else:
                    self.ok += 1
            except Exception as exc:  # what a caller would see
                self.failures.append(repr(exc))

    def wait_for(self, n: int, timeout_s: float = 60) -> None:
        deadline, target = time.monotonic() + timeout_s, self.ok + n
        while self.ok < target and time.monotonic() < deadline:
            time.sleep(0.05)
        assert self.ok >= target, f"only {self.ok} answers; failures: {self.failures[:3]}"


def wait_until(what: str, check: Any, timeout_s: float = 90) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)  # polling another process's state
    raise AssertionError(f"timed out waiting for {what}")


def healthy(sm: Any, endpoint: str) -> int:
    d = sm.describe_endpoint(EndpointName=endpoint)
    assert d["EndpointStatus"] == "InService", d
    return int(d["ProductionVariants"][0]["CurrentInstanceCount"])


@pytest.mark.slow  # 18 s with its cluster's setup on the 2-core machine (make test-slow)
def test_instances_spread_killed_actor_replaced_lost_node_moved_no_failed_requests(
    up: UpProcess, cluster: Cluster, tmp_path: Path
) -> None:
    sm, rt = up.sm(), up.rt()
    deploy(sm, tmp_path, "ep", 2)
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig=FAST)
    nodes = node_ids()
    placed = actors("ep-A-")
    assert len(placed) == 2
    assert set(placed.values()) == {nodes["node_a"], nodes["node_b"]}  # SPREAD: one instance on each node
    r = rt.invoke_endpoint(EndpointName="ep", Body=json.dumps([1.5]), ContentType="application/json")
    assert json.loads(r["Body"].read()) == {"out": [3.0]}

    with Traffic(up, "ep") as traffic:
        traffic.wait_for(20)
        # an instance killed through Ray: the fleet replaces it, the endpoint never leaves InService, and the
        # replacement goes where the fleet has no instance (back to node_a), so that one lost node never takes both
        victim = next(name for name, node in placed.items() if node == nodes["node_a"])
        ray.kill(ray.get_actor(victim), no_restart=True)
        replaced = wait_until(
            "a replacement instance",
            lambda: (a := actors("ep-A-")) and victim not in a and len(a) == 2 and healthy(sm, "ep") == 2 and a,
        )
        assert sorted(replaced.values()) == sorted(placed.values())
        traffic.wait_for(20)

        # a node stopped: the instance it ran comes back on the node that is left
        lost = [name for name, node in replaced.items() if node == nodes["node_b"]]
        assert len(lost) == 1
        cluster.worker.stop()
        wait_until(
            "every instance on node_a",
            lambda: (
                (a := actors("ep-A-"))
                and len(a) == 2
                and set(a.values()) == {nodes["node_a"]}
                and healthy(sm, "ep") == 2
            ),
        )
        traffic.wait_for(20)
    assert traffic.failures == [], f"{traffic.ok} answered, {traffic.retried} botocore retries"
    assert traffic.ok >= 60
    assert set(replaced) != set(placed)
    log = up.log.read_text()
    assert "killed by `ray.kill`" in log and "its node has died" in log  # Ray's reasons, in the replace warnings


def test_an_instance_no_node_can_hold_fails_the_endpoint_with_the_reason(up: UpProcess, tmp_path: Path) -> None:
    sm = up.sm()
    deploy(sm, tmp_path, "big", 1, instance_type="ml.m5.2xlarge")  # 8 vCPUs: every node has 4
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("endpoint_in_service").wait(EndpointName="big", WaiterConfig=FAST)
    d = sm.describe_endpoint(EndpointName="big")
    assert d["EndpointStatus"] == "Failed"
    assert "needs 8 CPU, 32.0 GiB memory" in d["FailureReason"]
    assert "no node of the Ray cluster can hold it" in d["FailureReason"]


JOB_HOST = textwrap.dedent(
    """
    import json, os
    host = os.environ["SM_CURRENT_HOST"]
    # in its own pid namespace the script's parent is one of the namespace's first processes (bubblewrap's): who
    # started the sandbox (a Ray worker or servekit up) is out of its sight, so the nodes are told by the actors' log
    # lines below
    seen = {"parent": os.getppid(), "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit())}
    json.dump(seen, open(os.path.join(os.environ["SM_MODEL_DIR"], host + ".json"), "w"))
    """
)


def test_a_two_host_training_job_runs_its_hosts_as_ray_actors_on_both_nodes(up: UpProcess) -> None:
    from tests.e2e.test_training_jobs import BUCKET, clients, job

    sm, s3, logs = clients(up)
    request = job(s3, "ray-hosts-1", JOB_HOST, ResourceConfig={"InstanceType": "ml.m5.large", "InstanceCount": 2})
    sm.create_training_job(**request)
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="ray-hosts-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="ray-hosts-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    body = s3.get_object(Bucket=BUCKET, Key="output/ray-hosts-1/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        seen = {n: json.load(tar.extractfile(n)) for n in tar.getnames()}  # type: ignore[arg-type]
    assert sorted(seen) == ["algo-1.json", "algo-2.json"]
    assert all(s["parent"] in s["pids"] and len(s["pids"]) < 5 for s in seen.values()), seen  # only itself
    nodes = set()
    group = "/aws/sagemaker/TrainingJobs"
    for stream in logs.describe_log_streams(logGroupName=group, logStreamNamePrefix="ray-hosts-1/")["logStreams"]:
        events = logs.get_log_events(logGroupName=group, logStreamName=stream["logStreamName"], startFromHead=True)
        said = [e["message"] for e in events["events"] if e["message"].startswith("servekit: this host runs on")]
        assert len(said) == 1, events["events"]
        nodes.add(said[0].rsplit(" ", 1)[1])
    assert nodes == set(node_ids().values())  # one host on each node
