"""Instances as Ray actors: the :class:`~servekit.backends.local.ReplicaBackend` for a Ray cluster.

Each instance is one actor, placed with the instance type's envelope as Ray resources (``num_cpus`` = vCPUs,
``memory`` = the envelope's bytes, plus any custom resources the backend is configured with, such as ``GPU``) on the
node with room that runs the fewest instances of the same model (soft node affinity; Ray's ``SPREAD`` when no node
has room by this backend's books), so that a fleet's instances, replacements included, land on different nodes and
one lost node takes as few of them as it can. The actor starts the same
``servekit serve`` process the local backend runs, bound to its node's Ray address on a free port, and reports the
URL; the gateway reaches it over HTTP as it reaches a local one. Everything above the backend (variants, routing,
rollouts, autoscaling, multi-model routing) is unchanged.

The serving process dies with its actor: it is started through a tiny exec wrapper that asks the kernel for
``SIGKILL`` when its parent ends (``PR_SET_PDEATHSIG``), so an actor killed with ``ray.kill`` or a node that goes
away takes its instance with it, and the control plane hears of it through the actor's pending ``wait_exit`` call,
which then fails with Ray's reason (killed, node died...). The fleet replaces a dead instance as it replaces a dead
local process. Actors are owned by the ``servekit up`` process: if it dies, Ray ends them.

Ray is imported only when a backend is built (``--backend ray``): the control plane imports without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import importlib
import json
import logging
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from servekit._utils.files import tail_lines
from servekit._utils.processes import rss_bytes
from servekit.backends.local import InstanceHandle, InstanceSpec, LocalProcessBackend, free_port
from servekit.errors import ConfigError, IllegalTransition

log = logging.getLogger(__name__)

NAMESPACE = "servekit"
_PR_SET_PDEATHSIG = 1
_GPU = "GPU"
_RESERVED = frozenset({"CPU", "memory", "object_store_memory"})  # these come from the envelope, or are Ray's own


def _ray() -> Any:
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise ConfigError(f"--backend ray needs Ray: pip install 'servekit[ray]' ({exc})") from None


# ---- configuration ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RayBackendConfig:
    """Where the cluster is and what every instance asks of it besides its envelope.

    ``address``: None starts a Ray on this machine for the control plane's lifetime; ``auto`` joins the cluster this
    machine belongs to (``ray start`` ran here); ``host:port`` is a cluster's GCS; ``ray://host:port`` goes through
    Ray Client. ``resources``: custom Ray resources each instance needs (accelerators: ``{"GPU": 1}`` or a cluster's
    own names), on top of ``num_cpus`` and ``memory`` from its instance type. ``placement_timeout_s``: how long an
    instance may wait for room on the cluster before it fails with what the cluster has."""

    address: str | None = None
    resources: Mapping[str, float] = field(default_factory=dict)
    placement_timeout_s: float = 120.0
    watch_interval_s: float = 1.0  # how often an actor compares its instance's memory with the envelope
    namespace: str = NAMESPACE

    def __post_init__(self) -> None:
        check_address(self.address)
        for name, amount in self.resources.items():
            if not name or name in _RESERVED:
                raise ConfigError(
                    f"Ray resource {name!r} cannot be asked for per instance: CPU and memory come from the instance "
                    "type; name an accelerator (GPU) or a custom resource of the cluster"
                )
            if (
                isinstance(amount, bool)
                or not isinstance(amount, int | float)
                or not math.isfinite(amount)
                or amount <= 0
            ):
                raise ConfigError(f"Ray resource {name!r}: expected a positive number, got {amount!r}")
        if not self.placement_timeout_s > 0 or not self.watch_interval_s > 0:
            raise ConfigError("placement_timeout_s and watch_interval_s must be positive")
        if not self.namespace:
            raise ConfigError("the Ray namespace must not be empty")


BACKENDS = ("local", "ray")


def config_from_cli(backend: str, address: str | None, resources_json: str | None) -> RayBackendConfig | None:
    """``servekit up --backend/--ray-address/--ray-resources`` as a config: None for the local backend."""
    if backend not in BACKENDS:
        raise ConfigError(f"--backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if backend == "local":
        if address is not None or resources_json is not None:
            raise ConfigError("--ray-address and --ray-resources go with --backend ray")
        return None
    resources: dict[str, float] = {}
    if resources_json is not None:
        try:
            parsed = json.loads(resources_json)
        except ValueError as exc:
            raise ConfigError(f'--ray-resources: expected a JSON object such as {{"GPU": 1}} ({exc})') from None
        if not isinstance(parsed, dict) or not all(_is_number(v) for v in parsed.values()):
            raise ConfigError('--ray-resources: expected a JSON object of numbers such as {"GPU": 1}')
        resources = {str(k): float(v) for k, v in parsed.items()}
    return RayBackendConfig(address=address, resources=resources)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)  # JSON true is no amount


def check_address(address: str | None) -> None:
    """``auto``, ``host:port`` or ``ray://host:port`` (None: a local Ray); anything else is refused here, before
    Ray would try to reach it for a minute."""
    if address is None or address == "auto":
        return
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"--ray-address {address!r}: expected auto, host:port (a cluster's GCS) or ray://host:port (Ray Client)"
        )


def unreachable(address: str | None, timeout_s: float = 5.0) -> str | None:
    """Why nothing answers at a ``host:port`` or ``ray://host:port`` address (None when a TCP connection opens, or
    for ``auto`` and a local Ray, which Ray finds itself)."""
    if address is None or address == "auto":
        return None
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"nothing answers at {address} ({exc.strerror or exc}): is the Ray cluster's head running there?"


# ---- decisions (pure) ---------------------------------------------------------------------------------------------


def demand(spec: InstanceSpec, resources: Mapping[str, float]) -> dict[str, float]:
    """What an instance asks of a node, in Ray's resource names: its envelope plus the configured resources."""
    out: dict[str, float] = {"CPU": float(max(spec.vcpus, 0))}
    if spec.memory_bytes:
        out["memory"] = float(spec.memory_bytes)
    if spec.gpus:  # a GPU instance type: Ray places it where that many GPUs are free and sets CUDA_VISIBLE_DEVICES
        out[_GPU] = float(spec.gpus)
    out.update(resources)
    return out


def actor_options(spec: InstanceSpec, config: RayBackendConfig, name: str, strategy: Any = "SPREAD") -> dict[str, Any]:
    """``ActorClass.options(...)`` for an instance: its envelope as resources, placed by ``strategy`` (Ray's SPREAD,
    or a node chosen by :func:`choose_node`), never restarted by Ray (the fleet replaces a dead instance, with a new
    id, as it does for local processes)."""
    wanted = demand(spec, config.resources)
    options: dict[str, Any] = {
        "name": name,
        "namespace": config.namespace,
        "num_cpus": wanted.pop("CPU"),
        "scheduling_strategy": strategy,
        "max_restarts": 0,
        "max_task_retries": 0,
        "max_concurrency": 4,  # wait_exit stays pending while where/stop/log_tail are answered
    }
    if "memory" in wanted:
        options["memory"] = int(wanted.pop("memory"))
    if _GPU in wanted:
        options["num_gpus"] = wanted.pop(_GPU)
    if wanted:
        options["resources"] = wanted
    return options


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """A live node as placement sees it: its total resources, what this control plane's instances hold there, and
    how many of them serve the same model as the instance being placed."""

    node_id: str
    total: Mapping[str, float]
    held: Mapping[str, float]
    peers: int

    def free(self, name: str) -> float:
        return self.total.get(name, 0.0) - self.held.get(name, 0.0)


def choose_node(request: Mapping[str, float], nodes: Sequence[NodeRoom]) -> str | None:
    """The node for a new instance: among those with room for it (by this control plane's own bookkeeping), the one
    running the fewest instances of the same model, then the one with most free CPUs (then by id, for a stable
    answer). Ray's SPREAD alone goes round the nodes and may put a replacement beside its fleet's other instance,
    where one lost node takes both. None when no node has room (Ray then places it as room appears)."""
    fits = [n for n in nodes if all(n.free(k) >= v for k, v in request.items())]
    if not fits:
        return None
    return min(fits, key=lambda n: (n.peers, -n.free("CPU"), n.node_id)).node_id


def spread_key(spec: InstanceSpec) -> tuple[str, str, bool]:
    """Instances with the same key serve the same model: they are kept on different nodes where room allows."""
    return (spec.model_name, spec.model_dir, spec.multi_model)


def unfit(request: Mapping[str, float], nodes: Sequence[Mapping[str, float]]) -> str | None:
    """None when some node's total resources could hold ``request``; else why none can (the largest one's)."""
    if any(all(node.get(k, 0.0) >= v for k, v in request.items()) for node in nodes):
        return None
    if not nodes:
        return "the Ray cluster has no live node"
    largest = max(nodes, key=lambda n: (n.get("CPU", 0.0), n.get("memory", 0.0)))
    return f"no node of the Ray cluster can hold it (the largest has {describe(largest, request)})"


def describe(resources: Mapping[str, float], keys: Mapping[str, float] | None = None) -> str:
    """``2 CPU, 4.0 GiB memory, 1 GPU``: Ray resources as a person reads them (only ``keys``' names, if given)."""
    names = list(keys) if keys is not None else sorted(k for k in resources if not k.startswith("node:"))
    parts = []
    for name in names:
        amount = resources.get(name, 0.0)
        if name in ("memory", "object_store_memory"):
            parts.append(f"{amount / 2**30:.1f} GiB {name}")
        else:
            parts.append(f"{amount:g} {name}")
    return ", ".join(parts)


def death_cause(message: str) -> str:
    """Ray's reason an actor died, from its error text: the lines after the attribute block (``class_name: ...``),
    e.g. "The actor is dead because it was killed by `ray.kill`." or "The actor died because its node has died."."""
    lines = [line for line in message.splitlines() if line.strip()]
    cause: list[str] = []
    for line in lines[1:]:
        if cause or not line.startswith("\t"):
            cause.append(line.strip())
    return " ".join(cause) if cause else (lines[0].strip() if lines else "the Ray actor died")


def tied_command(command: Sequence[str], parent_pid: int, python: str, linux: bool) -> list[str]:
    """``command`` behind an exec wrapper that makes the kernel kill it when ``parent_pid`` (the actor) ends, so no
    serving process outlives its actor (``ray.kill``, a lost node). Elsewhere than Linux: the command as it is."""
    if not linux:
        return list(command)
    wrapper = (
        "import ctypes, os, signal, sys\n"
        f"ctypes.CDLL(None, use_errno=True).prctl({_PR_SET_PDEATHSIG}, signal.SIGKILL)\n"
        "if os.getppid() != int(sys.argv[1]): sys.exit(70)  # the actor ended before the request took hold\n"
        "os.execv(sys.argv[2], sys.argv[2:])\n"
    )
    return [python, "-c", wrapper, str(parent_pid), *command]


def serve_command(spec: InstanceSpec, host: str, port: int, python: str) -> list[str]:
    """The local backend's ``servekit serve`` command, listening on ``host`` (the node's Ray address, reachable from
    the gateway) instead of loopback."""
    command = LocalProcessBackend(Path(), python=python).command(spec, port)
    command[command.index("--host") + 1] = host
    return command


def machine_identity() -> str:
    """This kernel's boot id and this process's PID namespace: two processes with the same identity see the same
    pids (the control plane then samples an instance's CPU and memory from /proc). Empty when unknown."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        return f"{boot}:{os.stat('/proc/self/ns/pid').st_ino}"
    except OSError:
        return ""


# ---- the actor (runs on a node of the cluster) --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Placement:
    """Where an actor put its instance, as it reports it."""

    url: str
    node_id: str
    node_ip: str
    pid: int
    log_path: str
    machine: str  # machine_identity() of the node's process: its pid means something here only if it matches
    error: str | None = None  # why the instance could not start there (then nothing runs)


@dataclass(frozen=True, slots=True)
class Exit:
    """How an instance's process ended, as its actor saw it."""

    code: int | None
    reason: str
    log_tail: str


class InstanceActor:
    """One instance: starts ``servekit serve`` on its node and watches it. Wrapped with ``ray.remote`` at run time
    (importing this module imports no Ray); the node imports it from the installed servekit."""

    def __init__(self, spec: InstanceSpec, log_dir: str, watch_interval_s: float) -> None:
        ray = _ray()
        self._spec = spec
        self._interval = watch_interval_s
        node_id = str(ray.get_runtime_context().get_node_id())
        host = next(
            (str(n["NodeManagerAddress"]) for n in ray.nodes() if n.get("NodeID") == node_id and n.get("Alive")),
            str(ray.util.get_node_ip_address()),
        )
        port = free_port(host)
        self._log_path = _log_file(Path(log_dir), spec.instance_id)
        self._over: str | None = None
        missing = missing_model(spec, host)
        if missing is not None:
            self._placement = Placement("", node_id, host, 0, str(self._log_path), machine_identity(), missing)
            return
        env = {**os.environ, **spec.environment, "PYTHONUNBUFFERED": "1"}
        command = tied_command(
            serve_command(spec, host, port, sys.executable), os.getpid(), sys.executable, sys.platform == "linux"
        )
        with open(self._log_path, "ab") as out:  # the child keeps its own descriptor
            self._proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=env, start_new_session=True
            )
        self._placement = Placement(
            f"http://{host}:{port}", node_id, host, self._proc.pid, str(self._log_path), machine_identity()
        )

    async def where(self) -> Placement:
        return self._placement

    async def wait_exit(self) -> Exit:
        """Returns when the serving process ends (stopping it first if it outgrows its memory envelope)."""
        loop = asyncio.get_running_loop()
        while True:
            code = await loop.run_in_executor(None, self._wait, self._interval)
            if code is not None:
                break
            self._enforce_memory()
        reason = self._over or f"instance {self._spec.instance_id} exited with status {code}"
        return Exit(code, reason, tail_lines(self._log_path, 20))

    def _wait(self, timeout_s: float) -> int | None:
        try:
            return self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def _enforce_memory(self) -> None:
        limit = self._spec.memory_bytes
        rss = rss_bytes(self._proc.pid) if limit else None
        if limit is None or rss is None or rss <= limit or self._over is not None:
            return
        self._over = (
            f"instance {self._spec.instance_id} exceeded its memory limit: "
            f"{rss / 2**30:.2f} GiB resident, limit {limit / 2**30:.2f} GiB"
        )
        self._signal(signal.SIGKILL)

    async def stop(self, grace_s: float) -> None:
        if self._proc.poll() is not None:
            return
        self._signal(signal.SIGTERM)
        if await asyncio.get_running_loop().run_in_executor(None, self._wait, grace_s) is None:
            self._signal(signal.SIGKILL)
            await asyncio.get_running_loop().run_in_executor(None, self._proc.wait)

    async def log_tail(self, lines: int) -> str:
        return tail_lines(self._log_path, lines)

    def _signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)


def missing_model(spec: InstanceSpec, node: str) -> str | None:
    """Why this node cannot serve ``spec``'s model: its directory (resolved by the control plane, under its home for
    archives and s3:// data) is not there. None when it is (a multi-model instance loads models later)."""
    if spec.multi_model or Path(spec.model_dir).is_dir():
        return None
    return (
        f"instance {spec.instance_id}: the model directory {spec.model_dir} is not on Ray node {node}; every node "
        "must see the control plane's model files at the same path (on a cluster: the servekit home and the "
        "ModelDataUrl paths on shared storage)"
    )


def _log_file(log_dir: Path, instance_id: str) -> Path:
    """The instance's log on its node: the control plane's log directory where the node can write it (one machine,
    or shared storage), else the node's temporary directory."""
    for directory in (log_dir, Path(tempfile.gettempdir()) / "servekit-instances"):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"{instance_id}.log"
            path.touch()
            return path
        except OSError:
            continue
    raise OSError(f"instance {instance_id}: no writable log directory on this node")


# ---- the backend (runs in the control plane) ----------------------------------------------------------------------


class ActorState(enum.Enum):
    """An instance's actor as the control plane knows it: being placed, running its process, ended (final)."""

    PLACING = "placing"
    RUNNING = "running"
    ENDED = "ended"


_NEXT: dict[ActorState, frozenset[ActorState]] = {
    ActorState.PLACING: frozenset({ActorState.RUNNING, ActorState.ENDED}),
    ActorState.RUNNING: frozenset({ActorState.ENDED}),
    ActorState.ENDED: frozenset(),
}


@dataclass(slots=True)
class _Tracked:
    actor: Any
    spec: InstanceSpec
    node_id: str | None  # the node it was sent to (None: wherever Ray put it), then the one it reports
    state: ActorState = ActorState.PLACING
    placement: Placement | None = None
    exit_tail: str = ""
    handle: InstanceHandle | None = None
    watcher: asyncio.Task[None] | None = None

    def move(self, to: ActorState) -> None:
        if to not in _NEXT[self.state]:
            raise IllegalTransition(f"Ray instance actor: {self.state.value} -> {to.value}")
        self.state = to


class RayBackend:
    """Instances as Ray actors (see the module docstring). Connects to the cluster when built."""

    def __init__(self, config: RayBackendConfig, log_dir: Path) -> None:
        self._config = config
        self._log_dir = log_dir
        ray = self._ray = _ray()
        self._owns_connection = not ray.is_initialized()  # else someone else's session: left open at close
        if self._owns_connection:
            silent = unreachable(config.address)
            if silent is not None:  # Ray itself would keep retrying for minutes
                raise ConfigError(f"--backend ray: {silent}")
            try:
                ray.init(
                    address=config.address,
                    namespace=config.namespace,
                    logging_level=logging.WARNING,
                    log_to_driver=False,
                    **({"include_dashboard": False} if config.address is None else {}),
                )
            except Exception as exc:  # Ray raises its own types (ConnectionError, RuntimeError...) for a bad cluster
                where = config.address or "a new local Ray"
                raise ConfigError(f"--backend ray: could not connect to {where}: {exc}") from None
        self._actor_class = ray.remote(InstanceActor)
        self._strategies = importlib.import_module("ray.util.scheduling_strategies")
        self._machine = machine_identity()
        self._instances: dict[str, _Tracked] = {}

    def placement(self, handle: InstanceHandle) -> Placement | None:
        """Where the instance runs (node id and address), while the backend knows it."""
        tracked = self._instances.get(handle.spec.instance_id)
        return tracked.placement if tracked is not None else None

    async def start(self, spec: InstanceSpec) -> InstanceHandle:
        """Place the instance's actor and start its process. An instance that cannot be placed (no node could ever
        hold it, or no room within the placement timeout) or whose actor fails to start is returned ended, with
        the reason, as a process that exits at once is: the fleet then fails or replaces it."""
        ray = self._ray
        wanted = demand(spec, self._config.resources)
        try:
            alive = [n for n in ray.nodes() if n.get("Alive")]
        except Exception as exc:  # the GCS is unreachable (its head node is down): Ray's own error types
            return self._ended(spec, f"instance {spec.instance_id}: the Ray cluster did not answer: {exc}")
        why = unfit(wanted, [dict(n.get("Resources", {})) for n in alive])
        if why is not None:
            return self._ended(spec, f"instance {spec.instance_id} needs {describe(wanted, wanted)}: {why}")
        for gone in [k for k, t in self._instances.items() if t.state is ActorState.ENDED]:
            del self._instances[gone]  # dead ones the fleet has let go of (it replaces them without a stop)
        node_id = choose_node(wanted, self._rooms(spec, alive))
        strategy: Any = "SPREAD"
        if node_id is not None:
            # soft, and spilled elsewhere if the node turns out busy (other work on the cluster is not in our books)
            strategy = self._strategies.NodeAffinitySchedulingStrategy(node_id, soft=True, _spill_on_unavailable=True)
        name = f"{spec.instance_id}-{uuid.uuid4().hex[:8]}"  # unique: a restarted control plane reuses instance ids
        options = actor_options(spec, self._config, name, strategy)
        actor = self._actor_class.options(**options).remote(spec, str(self._log_dir), self._config.watch_interval_s)
        tracked = _Tracked(actor, spec, node_id)
        self._instances[spec.instance_id] = tracked
        try:
            placement: Placement = await asyncio.wait_for(
                _wait_ref(actor.where.remote()), self._config.placement_timeout_s
            )
        except TimeoutError:
            ray.kill(actor, no_restart=True)
            free = describe(ray.available_resources(), wanted)
            return self._ended(
                spec,
                f"instance {spec.instance_id} needs {describe(wanted, wanted)} and the Ray cluster had no room for it "
                f"within {self._config.placement_timeout_s:g} s (free now: {free})",
            )
        except Exception as exc:  # the actor's constructor failed, or it died before it answered
            ray.kill(actor, no_restart=True)
            return self._ended(spec, f"instance {spec.instance_id} could not start on Ray: {death_cause(str(exc))}")
        if placement.error is not None:
            ray.kill(actor, no_restart=True)
            return self._ended(spec, placement.error)
        tracked.placement, tracked.node_id = placement, placement.node_id
        tracked.move(ActorState.RUNNING)
        # a pid on another machine would name some unrelated local process to the utilization sampler
        here = placement.machine != "" and placement.machine == self._machine
        handle = tracked.handle = InstanceHandle(
            spec, placement.url, placement.pid if here else None, log_path=placement.log_path
        )
        tracked.watcher = asyncio.get_running_loop().create_task(self._watch(handle, tracked))
        log.info(
            "instance %s: Ray actor %s on node %s (%s), %s",
            spec.instance_id,
            name,
            placement.node_id[:12],
            placement.node_ip,
            placement.url,
        )
        return handle

    def _rooms(self, spec: InstanceSpec, alive: Sequence[Mapping[str, Any]]) -> list[NodeRoom]:
        """Each live node's totals, what this backend's live instances hold there, and their count of ``spec``'s
        model."""
        held: dict[str, dict[str, float]] = {}
        peers: dict[str, int] = {}
        key = spread_key(spec)
        for t in self._instances.values():
            if t.state is ActorState.ENDED or t.node_id is None:
                continue
            there = held.setdefault(t.node_id, {})
            for k, v in demand(t.spec, self._config.resources).items():
                there[k] = there.get(k, 0.0) + v
            if spread_key(t.spec) == key:
                peers[t.node_id] = peers.get(t.node_id, 0) + 1
        return [
            NodeRoom(
                str(n["NodeID"]),
                dict(n.get("Resources", {})),
                held.get(str(n["NodeID"]), {}),
                peers.get(str(n["NodeID"]), 0),
            )
            for n in alive
        ]

    def _ended(self, spec: InstanceSpec, reason: str) -> InstanceHandle:
        self._instances.pop(spec.instance_id, None)
        return InstanceHandle(spec, "http://unplaced.invalid", None, exit_reason=reason)

    async def _watch(self, handle: InstanceHandle, tracked: _Tracked) -> None:
        """Record why the instance ended: its process exited (status, memory), or Ray says its actor died."""
        node = tracked.placement.node_ip if tracked.placement is not None else "?"
        try:
            ended: Exit = await _wait_ref(tracked.actor.wait_exit.remote())
            reason, tracked.exit_tail = ended.reason, ended.log_tail
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # RayActorError and kin: killed, node lost, worker crashed
            reason = f"instance {handle.spec.instance_id} (Ray actor on {node}) ended: {death_cause(str(exc))}"
        if handle.exit_reason is None:
            handle.exit_reason = reason
        if tracked.state is not ActorState.ENDED:
            tracked.move(ActorState.ENDED)

    def alive(self, handle: InstanceHandle) -> bool:
        tracked = self._instances.get(handle.spec.instance_id)
        if tracked is not None and tracked.state is ActorState.RUNNING:
            return True
        if handle.exit_reason is None:
            handle.exit_reason = f"instance {handle.spec.instance_id} is not running on Ray"
        return False

    def log_tail(self, handle: InstanceHandle, lines: int = 20) -> str:
        """The ended process's last lines as its actor returned them, else the log file where this machine sees
        it (one machine, or shared storage); an actor that died with its node took its lines with it."""
        tracked = self._instances.get(handle.spec.instance_id)
        if tracked is not None and tracked.exit_tail:
            return "\n".join(tracked.exit_tail.splitlines()[-lines:])
        return tail_lines(handle.log_path, lines) if handle.log_path else ""

    async def stop(self, handle: InstanceHandle, grace_s: float = 10.0) -> None:
        tracked = self._instances.pop(handle.spec.instance_id, None)
        if tracked is None:
            return
        handle.exit_reason = handle.exit_reason or f"instance {handle.spec.instance_id} was stopped"
        if tracked.state is ActorState.RUNNING:
            with contextlib.suppress(Exception):  # an actor that died meanwhile has nothing left to stop
                await asyncio.wait_for(_wait_ref(tracked.actor.stop.remote(grace_s)), grace_s + 10.0)
        self._ray.kill(tracked.actor, no_restart=True)  # frees its resources on the node
        if tracked.watcher is not None:
            tracked.watcher.cancel()
            await asyncio.gather(tracked.watcher, return_exceptions=True)
        if tracked.state is not ActorState.ENDED:
            tracked.move(ActorState.ENDED)

    async def close(self) -> None:
        """Stop every instance this backend still runs, then leave the cluster (or end the Ray it started)."""
        handles = [t.handle for t in self._instances.values() if t.handle is not None]
        await asyncio.gather(*(self.stop(h, grace_s=5.0) for h in handles), return_exceptions=True)
        for tracked in self._instances.values():  # still being placed
            with contextlib.suppress(Exception):
                self._ray.kill(tracked.actor, no_restart=True)
        self._instances.clear()
        if self._owns_connection:
            self._ray.shutdown()


async def _wait_ref(ref: Any) -> Any:
    """An ObjectRef's value, awaited without blocking the event loop (Ray completes the future from its thread)."""
    return await asyncio.wrap_future(ref.future())
