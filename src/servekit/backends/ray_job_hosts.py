"""The hosts of SageMaker jobs (training, processing) as Ray actors, with ``servekit up --backend ray``.

Each host is one actor, placed with its instance type's envelope as Ray resources (``num_cpus`` = vCPUs, ``memory``
= the type's bytes, plus the backend's custom resources) on the node with room that runs the fewest job hosts of this
control plane (soft node affinity, as for endpoints' instances), so a job's hosts land on different nodes where they
can; a line of each host's log says which node. The actor runs the same sandbox command the local runner
runs (bubblewrap must be installed on every node), its output appended to the host's log, and enforces the memory
envelope on its node. The job's folders (``/opt/ml`` of each host, channels, code) are paths under the servekit
home: on a cluster of several machines the home must be on storage every node mounts at the same path, as for
endpoints' model files. A stop (StopTrainingJob, MaxRuntimeInSeconds) is SIGTERM to the host's process group, SIGKILL
after the grace, as locally; ``servekit up`` stopping kills the actors, and the sandboxes die with them
(``--die-with-parent``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import signal
import subprocess
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from servekit._utils.processes import (
    TERM_AGAIN_S,
    out_of_memory,
    sandbox_memory,
    signal_sandbox,
    terminate_sandbox,
)
from servekit.backends.ray_actors import (
    NodeRoom,
    RayBackendConfig,
    _ray,
    _wait_ref,
    choose_node,
    death_cause,
    describe,
)

WATCH_S = 0.25  # how often a host's memory is read against its envelope


class HostRun(Protocol):
    """What a job's runner holds for one host (servekit.services.training.hosts.Running)."""

    stop: asyncio.Event
    reason: str
    out_of_memory: str
    cancel: Callable[[], None] | None


class HostEnvelope(Protocol):
    """A host's instance type (servekit.services.training.hosts.JobEnvelope)."""

    @property
    def instance_type(self) -> str: ...

    @property
    def vcpus(self) -> int: ...

    @property
    def memory_bytes(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class HostExit:
    code: int
    out_of_memory: str  # why the actor killed it for its memory, else ""


class HostActor:
    """One host: its sandbox command on this node. Wrapped with ``ray.remote`` at run time."""

    def __init__(
        self, argv: list[str], env: Mapping[str, str], log_path: str, memory_bytes: int | None, instance_type: str
    ) -> None:
        self._memory = memory_bytes
        self._type = instance_type
        self._over = ""
        self._signalled: set[int] = set()
        node = str(_ray().get_runtime_context().get_node_id())
        with open(log_path, "ab") as out:  # the child keeps its own descriptor
            out.write(f"servekit: this host runs on Ray node {node}\n".encode())
            out.flush()
            self._proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out, env=dict(env), start_new_session=True
            )

    async def where(self) -> str:
        return str(_ray().get_runtime_context().get_node_id())

    async def wait_exit(self) -> HostExit:
        loop = asyncio.get_running_loop()
        while True:
            code = await loop.run_in_executor(None, self._wait, WATCH_S)
            if code is not None:
                return HostExit(code, self._over)
            self._enforce_memory()

    def _wait(self, timeout_s: float) -> int | None:
        try:
            return self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def _enforce_memory(self) -> None:
        rss = sandbox_memory(self._proc.pid) if self._memory else None
        if self._memory is None or rss is None or rss <= self._memory or self._over:
            return
        self._over = out_of_memory(rss, self._memory, self._type)
        self.signal(signal.SIGKILL)

    def signal(self, sig: int) -> None:
        if sig == signal.SIGTERM:  # each time to what started inside since the last (see terminate_sandbox)
            terminate_sandbox(self._proc.pid, self._signalled)
        else:
            signal_sandbox(self._proc.pid, sig)


class RayJobHosts:
    """Runs a job's host on the Ray cluster the plane is connected to (its endpoints' backend opened it)."""

    def __init__(self, config: RayBackendConfig) -> None:
        self._config = config
        self._ray = _ray()
        self._actor_class = self._ray.remote(HostActor)
        self._strategies = importlib.import_module("ray.util.scheduling_strategies")
        self._placed: dict[str, tuple[str, dict[str, float]]] = {}  # running hosts: actor name -> (node, demand)

    def _node_for(self, wanted: Mapping[str, float]) -> str | None:
        """The live node with room (by these books) running the fewest of this plane's job hosts."""
        try:
            alive = [n for n in self._ray.nodes() if n.get("Alive")]
        except Exception:  # the GCS did not answer: let Ray place it
            return None
        held: dict[str, dict[str, float]] = {}
        peers: dict[str, int] = {}
        for node, demand in self._placed.values():
            there = held.setdefault(node, {})
            for k, v in demand.items():
                there[k] = there.get(k, 0.0) + v
            peers[node] = peers.get(node, 0) + 1
        rooms = [
            NodeRoom(
                str(n["NodeID"]),
                dict(n.get("Resources", {})),
                held.get(str(n["NodeID"]), {}),
                peers.get(str(n["NodeID"]), 0),
            )
            for n in alive
        ]
        return choose_node(wanted, rooms)

    async def __call__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        log_path: Path,
        limit_s: float,
        run: HostRun,
        grace_s: float,
        envelope: HostEnvelope | None = None,
    ) -> tuple[int, bool]:
        """As ``servekit.services.training.hosts.run_sandboxed``, on a Ray node: its exit code, and whether it was
        stopped."""
        ray = self._ray
        wanted: dict[str, float] = {"CPU": float(envelope.vcpus if envelope else 1), **self._config.resources}
        name = f"servekit-job-host-{uuid.uuid4().hex[:12]}"
        node = self._node_for(wanted)
        strategy: Any = "SPREAD"
        if node is not None:  # soft, and spilled elsewhere if the node turns out busy
            strategy = self._strategies.NodeAffinitySchedulingStrategy(node, soft=True, _spill_on_unavailable=True)
        options: dict[str, Any] = {
            "name": name,
            "namespace": self._config.namespace,
            "num_cpus": wanted["CPU"],
            "scheduling_strategy": strategy,
            "max_concurrency": 4,  # wait_exit runs while signal answers
        }
        if envelope is not None and envelope.memory_bytes:
            options["memory"] = envelope.memory_bytes
        if self._config.resources:
            options["resources"] = dict(self._config.resources)
        memory = envelope.memory_bytes if envelope else None
        itype = envelope.instance_type if envelope else ""
        actor = self._actor_class.options(**options).remote(argv, dict(env), str(log_path), memory, itype)
        run.cancel = lambda: ray.kill(actor, no_restart=True)
        self._placed[name] = (node or "", wanted)
        try:
            return await self._run(actor, name, wanted, log_path, limit_s, run, grace_s)
        finally:
            self._placed.pop(name, None)
            run.cancel = None
            ray.kill(actor, no_restart=True)

    async def _run(
        self,
        actor: Any,
        name: str,
        wanted: Mapping[str, float],
        log_path: Path,
        limit_s: float,
        run: HostRun,
        grace_s: float,
    ) -> tuple[int, bool]:
        ray = self._ray
        try:
            node = await asyncio.wait_for(_wait_ref(actor.where.remote()), self._config.placement_timeout_s)
        except TimeoutError:
            free = describe(ray.available_resources(), wanted)
            return self._fail(
                log_path,
                f"the host needs {describe(wanted, wanted)} and the Ray cluster had no room for it within "
                f"{self._config.placement_timeout_s:g} s (free now: {free})",
            )
        except Exception as exc:  # the actor's constructor failed (no bwrap on the node...), or it died
            return self._fail(log_path, f"the host could not start on Ray: {death_cause(str(exc))}")
        self._placed[name] = (node, dict(wanted))
        return await self._watch(actor, limit_s, run, grace_s)

    async def _watch(self, actor: Any, limit_s: float, run: HostRun, grace_s: float) -> tuple[int, bool]:
        waiter = asyncio.ensure_future(_wait_ref(actor.wait_exit.remote()))
        stopper = asyncio.ensure_future(run.stop.wait())
        try:
            done, _ = await asyncio.wait({waiter, stopper}, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if waiter in done:
            return self._exit(waiter, run), False
        if not run.stop.is_set():
            run.reason = "MaxRuntimeExceeded"
        loop = asyncio.get_running_loop()
        end = loop.time() + grace_s
        while not waiter.done():  # SIGTERM again to what started since, as a local host's stop does
            await _wait_ref(actor.signal.remote(signal.SIGTERM))
            left = end - loop.time()
            if left <= 0:
                await _wait_ref(actor.signal.remote(signal.SIGKILL))
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(waiter), min(TERM_AGAIN_S, left))
        await waiter
        return self._exit(waiter, run), True

    @staticmethod
    def _exit(waiter: asyncio.Future[Any], run: HostRun) -> int:
        try:
            ended: HostExit = waiter.result()
        except Exception as exc:  # the actor died (its node went away, it was killed)
            run.out_of_memory = ""
            raise RuntimeError(f"the host's Ray actor died: {death_cause(str(exc))}") from None
        run.out_of_memory = ended.out_of_memory
        return ended.code

    @staticmethod
    def _fail(log_path: Path, message: str) -> tuple[int, bool]:
        with log_path.open("a") as f:
            f.write(f"servekit: {message}\n")
        return 1, False
