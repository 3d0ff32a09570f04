"""The Ray backend's decisions, without a cluster: resources from the envelope, placement feasibility, Ray's death
reasons, the CLI's configuration, the serve command and the exec wrapper's command line (the wrapper itself, with
real processes: tests/integration/backends/test_tied_process.py)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import pytest

from servekit.backends.local import InstanceSpec
from servekit.backends.ray_actors import (
    NodeRoom,
    RayBackendConfig,
    actor_options,
    choose_node,
    config_from_cli,
    death_cause,
    demand,
    describe,
    machine_identity,
    missing_model,
    serve_command,
    tied_command,
    unfit,
    unreachable,
)
from servekit.errors import ConfigError

GIB = 2**30
SPEC = InstanceSpec("ep-A-1", "m", "/models/m", vcpus=2, memory_bytes=4 * GIB)


def test_the_envelope_becomes_ray_resources_spread_and_never_restarted_by_ray() -> None:
    options = actor_options(SPEC, RayBackendConfig(resources={"GPU": 1, "neuron_cores": 2}), "ep-A-1-x", "SPREAD")
    assert options == {
        "name": "ep-A-1-x",
        "namespace": "servekit",
        "num_cpus": 2.0,
        "memory": 4 * GIB,
        "num_gpus": 1,
        "resources": {"neuron_cores": 2},
        "scheduling_strategy": "SPREAD",
        "max_restarts": 0,
        "max_task_retries": 0,
        "max_concurrency": 4,
    }
    bare = actor_options(InstanceSpec("i", "m", "/m", vcpus=1), RayBackendConfig(), "i-x")
    assert "memory" not in bare and "resources" not in bare and "num_gpus" not in bare


def test_an_instance_no_node_can_hold_is_told_apart_from_one_that_waits_for_room() -> None:
    small = {"CPU": 4.0, "memory": 8.0 * GIB, "node:10.0.0.1": 1.0}
    gpu = {"CPU": 8.0, "memory": 32.0 * GIB, "GPU": 1.0}
    assert unfit(demand(SPEC, {}), [small]) is None
    assert unfit(demand(SPEC, {"GPU": 1}), [small, gpu]) is None
    why = unfit(demand(SPEC, {"GPU": 1}), [small])
    assert why == "no node of the Ray cluster can hold it (the largest has 4 CPU, 8.0 GiB memory, 0 GPU)"
    assert unfit({"CPU": 1.0}, []) == "the Ray cluster has no live node"
    assert describe(demand(SPEC, {})) == "2 CPU, 4.0 GiB memory"


def test_a_new_instance_goes_where_its_model_runs_least_among_nodes_with_room() -> None:
    want = demand(SPEC, {})  # 2 CPU, 4 GiB
    total = {"CPU": 4.0, "memory": 8.0 * GIB}
    a, b = NodeRoom("a", total, {}, 0), NodeRoom("b", total, {}, 0)
    assert choose_node(want, [b, a]) == "a"  # a tie: the same answer whatever the order
    a1 = NodeRoom("a", total, {"CPU": 2.0, "memory": 4.0 * GIB}, 1)
    assert choose_node(want, [a1, b]) == "b"  # the fleet's second instance goes to the other node
    busy_b = NodeRoom("b", total, {"CPU": 3.0}, 0)
    assert choose_node(want, [a1, busy_b]) == "a"  # no room on b: beside its peer rather than not at all
    other = NodeRoom("b", total, {"CPU": 2.0, "memory": 4.0 * GIB}, 0)  # b holds another model's instance
    assert choose_node(want, [a1, other]) == "b"
    assert choose_node(want, [NodeRoom("a", total, {"CPU": 4.0}, 2)]) is None  # Ray waits for room instead


def test_ray_death_messages_reduce_to_their_cause() -> None:
    killed = (
        "The actor died unexpectedly before finishing this task.\n\tclass_name: A\n\tactor_id: 673ea4c0\n\tpid: 17281"
        "\n\tname: a0\n\tnamespace: servekit\n\tip: 192.0.2.2\nThe actor is dead because it was killed by `ray.kill`."
    )
    assert death_cause(killed) == "The actor is dead because it was killed by `ray.kill`."
    node = (
        "The actor died unexpectedly before finishing this task.\n\tclass_name: A\n\tactor_id: 0312e8c9\n\tpid: 1"
        "\n\tnamespace: servekit\n\tip: 192.0.2.2\nThe actor died because its node has died. Node Id: dc2b58c9\n"
        "\tthe actor's node was terminated expectedly: received SIGTERM"
    )
    assert death_cause(node) == (
        "The actor died because its node has died. Node Id: dc2b58c9 "
        "the actor's node was terminated expectedly: received SIGTERM"
    )
    assert death_cause("ActorDiedError: something else") == "ActorDiedError: something else"
    assert death_cause("") == "the Ray actor died"


def test_cli_options_become_a_config_or_a_clear_error() -> None:
    assert config_from_cli("local", None, None) is None
    config = config_from_cli("ray", "ray://head:10001", '{"GPU": 1}')
    assert config == RayBackendConfig(address="ray://head:10001", resources={"GPU": 1.0})
    assert config_from_cli("ray", "auto", None) == RayBackendConfig(address="auto")
    assert config_from_cli("ray", None, None) == RayBackendConfig()
    for args, message in [
        (("k8s", None, None), "expected one of local, ray"),
        (("local", "auto", None), "go with --backend ray"),
        (("ray", "head", None), "expected auto, host:port"),
        (("ray", "ray://head:99999", None), "expected auto, host:port"),
        (("ray", None, "{"), "expected a JSON object"),
        (("ray", None, '{"GPU": "one"}'), "JSON object of numbers"),
        (("ray", None, '{"GPU": true}'), "JSON object of numbers"),
        (("ray", None, "[1]"), "JSON object of numbers"),
        (("ray", None, '{"CPU": 2}'), "CPU and memory come from the instance type"),
        (("ray", None, '{"GPU": 0}'), "expected a positive number"),
    ]:
        with pytest.raises(ConfigError, match=message):
            config_from_cli(*args)


def test_an_address_where_nothing_listens_is_refused_before_ray_tries_it() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert unreachable(f"127.0.0.1:{port}") is None
        assert unreachable(f"ray://127.0.0.1:{port}") is None
    why = unreachable(f"127.0.0.1:{port}")  # closed now
    assert why is not None and f"nothing answers at 127.0.0.1:{port}" in why
    assert unreachable("auto") is None and unreachable(None) is None


def test_the_serve_command_listens_on_the_node_address() -> None:
    command = serve_command(SPEC, "10.0.0.7", 8080, "/usr/bin/python3")
    assert command[:4] == ["/usr/bin/python3", "-m", "servekit.cli.main", "serve"]
    assert command[command.index("--host") + 1] == "10.0.0.7"
    assert command[command.index("--rest_api_port") + 1] == "8080"
    assert command[command.index("--model_base_path") + 1] == "/models/m"
    assert tied_command(["a", "b"], 1, "py", linux=False) == ["a", "b"]


def test_a_node_that_cannot_see_the_model_directory_says_so(tmp_path: Path) -> None:
    there = InstanceSpec("ep-A-1", "m", str(tmp_path), vcpus=1)
    assert missing_model(there, "10.0.0.7") is None
    gone = InstanceSpec("ep-A-2", "m", str(tmp_path / "nope"), vcpus=1)
    why = missing_model(gone, "10.0.0.7")
    assert why is not None and str(tmp_path / "nope") in why and "10.0.0.7" in why and "shared storage" in why
    assert missing_model(InstanceSpec("mme-1", "", "s3://bucket/models/", 1, multi_model=True), "n") is None


def test_machine_identity_is_this_kernel_and_pid_namespace() -> None:
    ident = machine_identity()
    assert ident == machine_identity()
    if sys.platform == "linux":
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        assert ident.startswith(boot + ":")


def test_config_is_checked_where_it_is_made() -> None:
    with pytest.raises(ConfigError, match="positive"):
        RayBackendConfig(placement_timeout_s=0)
    with pytest.raises(ConfigError, match="namespace"):
        RayBackendConfig(namespace="")
