"""GPU instance types in the backends: the Ray backend asks Ray for the type's GPUs (``num_gpus``), and a node
without them is told apart; the envelope of a GPU type carries its GPU count to the instance spec."""

from __future__ import annotations

from servekit.backends.local import InstanceSpec
from servekit.backends.ray_actors import RayBackendConfig, actor_options, demand, unfit
from servekit.services.hosting.envelopes import TableEnvelopes
from servekit.services.hosting.instance_types import instance_types

GIB = 2**30


def _spec(instance_type: str) -> InstanceSpec:
    env = TableEnvelopes(instance_types()).envelope(instance_type)
    assert env is not None
    return InstanceSpec("ep-A-1", "m", "/m", vcpus=env.vcpus, memory_bytes=env.memory_bytes, gpus=env.gpus)


def test_gpu_types_map_to_num_gpus() -> None:
    for name, gpus in (("ml.g4dn.xlarge", 1), ("ml.g5.12xlarge", 4), ("ml.p3.16xlarge", 8)):
        options = actor_options(_spec(name), RayBackendConfig(), "x")
        assert options["num_gpus"] == float(gpus), name
        assert "resources" not in options
    assert "num_gpus" not in actor_options(_spec("ml.m5.xlarge"), RayBackendConfig(), "x")
    # --ray-resources still wins over the type (a cluster that names its accelerators otherwise)
    assert actor_options(_spec("ml.g4dn.xlarge"), RayBackendConfig(resources={"GPU": 0.5}), "x")["num_gpus"] == 0.5


def test_a_gpu_instance_does_not_fit_a_cpu_node() -> None:
    cpu_node = {"CPU": 16.0, "memory": 64.0 * GIB}
    gpu_node = {"CPU": 16.0, "memory": 64.0 * GIB, "GPU": 1.0}
    want = demand(_spec("ml.g4dn.xlarge"), {})
    assert want == {"CPU": 4.0, "memory": 16.0 * GIB, "GPU": 1.0}
    assert unfit(want, [gpu_node]) is None
    assert "GPU" in (unfit(want, [cpu_node]) or "")
