"""A job on a GPU instance type: each host holds its own GPUs from the machine's pool while the job runs, its
sandbox gets the NVIDIA device nodes, and SageMaker's contract says how many (SM_NUM_GPUS, num_gpus)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servekit.accelerators.inventory import Gpu
from servekit.accelerators.placement import GpuPool, GpuShortage
from servekit.services.training import contract, sandbox
from servekit.services.training.hosts import JobEnvelope, gpu_device_nodes, job_gpus

T4S = tuple(Gpu(i, "Tesla T4", 16 * 2**30) for i in range(3))
G4DN_12 = JobEnvelope("ml.g4dn.12xlarge", 48, None, gpus=2)


def test_each_host_holds_its_own_gpus_until_the_job_ends() -> None:
    pool = GpuPool(lambda: T4S)
    with job_gpus(pool, "fit", ["algo-1"], G4DN_12) as held:
        assert held == {"algo-1": (0, 1)}
        assert pool.held() == {"fit/algo-1": (0, 1)}
        with pytest.raises(GpuShortage, match=r"needs 2 GPUs, this machine has 3 \(1 free\)"):
            with job_gpus(pool, "other", ["algo-1"], G4DN_12):
                pass
    assert pool.held() == {}


def test_a_second_host_short_of_gpus_releases_the_first() -> None:
    pool = GpuPool(lambda: T4S)
    with pytest.raises(GpuShortage), job_gpus(pool, "fit", ["algo-1", "algo-2"], G4DN_12):
        pass
    assert pool.held() == {}


def test_cpu_types_and_hosts_elsewhere_hold_nothing() -> None:
    pool = GpuPool(lambda: ())
    with job_gpus(pool, "fit", ["algo-1"], JobEnvelope("ml.m5.large", 2, None)) as held:
        assert held == {}
    with job_gpus(None, "fit", ["algo-1"], G4DN_12) as held:  # hosts on Ray: Ray's num_gpus, not this pool
        assert held == {}


def test_the_sandbox_binds_the_device_nodes_it_is_given(tmp_path: Path) -> None:
    assert gpu_device_nodes(()) == ()
    nodes = gpu_device_nodes((1,))
    assert nodes == ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia1")
    argv = sandbox.command(sandbox.Layout(tmp_path, devices=nodes), ["python3", "x.py"])
    dev = argv.index("/dev")
    assert argv[dev - 1] == "--dev"
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--dev-bind-try"]
    assert binds == list(nodes) and argv.index("--dev-bind-try") > dev  # after the minimal /dev is mounted
    assert "--dev-bind-try" not in sandbox.command(sandbox.Layout(tmp_path), ["python3", "x.py"])


def test_the_contract_says_how_many_gpus() -> None:
    request = {
        "TrainingJobName": "fit",
        "ResourceConfig": {"InstanceType": "ml.g4dn.12xlarge", "InstanceCount": 1},
        "HyperParameters": {},
    }
    env = contract.environment(request, None, 48, gpus=4)
    assert env["SM_NUM_GPUS"] == "4"
    assert json.loads(env["SM_TRAINING_ENV"])["num_gpus"] == 4
    assert contract.environment(request, None, 2)["SM_NUM_GPUS"] == "0"
