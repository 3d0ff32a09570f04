"""Where instances run. The control logic asks a :class:`ReplicaBackend` to start and stop instances and to say
whether they are still alive; it never knows whether an instance is a local process, a Ray actor or a pod.

:class:`LocalProcessBackend` runs each instance as a ``servekit serve`` process on an ephemeral loopback port,
inside its instance type's envelope: model threads = vCPUs, CPU affinity when the machine has the cores, and a
memory limit enforced by a watchdog that stops the instance with a reason when its RSS passes the envelope.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from servekit._utils.files import tail_lines
from servekit._utils.parent_watch import PARENT_PID_ENV
from servekit._utils.processes import free_port as free_port  # where the backends' users import it
from servekit._utils.processes import rss_bytes
from servekit.accelerators.inventory import VISIBLE_ENV, detect_gpus, visible
from servekit.accelerators.placement import GpuPool
from servekit.backends.isolation import IsolatedNetwork, isolate

log = logging.getLogger(__name__)

# A multi-model instance unloads idle models to stay under this share of its envelope's memory, below the watchdog
# that stops an instance at the whole envelope.
MULTI_MODEL_MEMORY_SHARE = 0.85


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """One instance to run: which model directory to serve under which name, in which envelope."""

    instance_id: str
    model_name: str
    model_dir: str
    vcpus: int
    memory_bytes: int | None = None
    cpus: tuple[int, ...] | None = None  # CPU affinity; None = any
    environment: Mapping[str, str] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()  # further `servekit serve` flags (capture, batching...)
    multi_model: bool = False  # a multi-model instance: starts with no model, loads them as the gateway asks
    gpus: int = 0  # GPUs of its own (a GPU instance type's): CUDA_VISIBLE_DEVICES names them, 0 hides every card
    isolated: bool = False  # the model's EnableNetworkIsolation: a network namespace of its own (backends.isolation)


@dataclass(slots=True)
class InstanceHandle:
    spec: InstanceSpec
    url: str  # http://127.0.0.1:<port>
    pid: int | None = None
    exit_reason: str | None = None  # set once the backend knows why it ended
    log_path: str | None = None
    gpu_indices: tuple[int, ...] = ()  # the machine's GPUs it holds (their NVML indices), for metrics


class ReplicaBackend(Protocol):
    async def start(self, spec: InstanceSpec) -> InstanceHandle: ...

    async def stop(self, handle: InstanceHandle, grace_s: float = 10.0) -> None: ...

    def alive(self, handle: InstanceHandle) -> bool:
        """False once the instance has ended (its ``exit_reason`` then says why)."""
        ...

    def log_tail(self, handle: InstanceHandle, lines: int = 20) -> str: ...

    async def close(self) -> None: ...


class LocalProcessBackend:
    """Instances as local ``servekit serve`` subprocesses, logs under ``log_dir``."""

    def __init__(
        self,
        log_dir: Path,
        watch_interval_s: float = 1.0,
        python: str = sys.executable,
        gpus: GpuPool | None = None,
    ) -> None:
        self._log_dir = log_dir
        # The cards this process may use (its CUDA_VISIBLE_DEVICES), detected on the first GPU instance's start.
        self.gpus = gpus if gpus is not None else GpuPool(lambda: visible(detect_gpus(), os.environ))
        self._python = python
        self._watch_interval_s = watch_interval_s
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._killed: set[str] = set()  # instances stopped for their memory (their exit reason says so)
        self._isolated: dict[str, IsolatedNetwork] = {}  # instances with a network namespace of their own

    def command(self, spec: InstanceSpec, port: int) -> list[str]:
        if spec.multi_model:
            # models come and go through the container API; they must fit under the envelope's memory watchdog
            limit = int(spec.memory_bytes * MULTI_MODEL_MEMORY_SHARE) if spec.memory_bytes else 0
            models = ["--multi_model", "--multi_model_memory_bytes", str(limit)]
        else:
            models = ["--model_name", spec.model_name, "--model_base_path", spec.model_dir]
        return [
            self._python,
            "-m",
            "servekit.cli.main",
            "serve",
            *models,
            "--host",
            "127.0.0.1",
            "--rest_api_port",
            str(port),
            "--num_inference_threads",
            str(max(1, spec.vcpus)),
            "--tensorflow_intra_op_parallelism",
            str(max(1, spec.vcpus)),
            "--file_system_poll_wait_seconds",
            "0",
            "--max_num_load_retries",
            "0",  # an instance whose model does not load fails at once, with the reason, as SageMaker's does
            *spec.extra_args,
        ]

    async def start(self, spec: InstanceSpec) -> InstanceHandle:
        port = free_port()
        self._log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self._log_dir / f"{spec.instance_id}.log"
        # Its own GPUs, or none: a CPU type sees no card, as on SageMaker (GpuShortage when too few are free).
        devices = self.gpus.acquire(spec.instance_id, spec.gpus) if spec.gpus else ()
        # The instance watches this process and stops once it is gone (a plane killed before it could stop it).
        env = {
            **os.environ,
            **spec.environment,
            VISIBLE_ENV: ",".join(str(i) for i in devices),
            "PYTHONUNBUFFERED": "1",
            PARENT_PID_ENV: str(os.getpid()),
        }
        net = await isolate(spec.instance_id, port) if spec.isolated else None
        try:
            with open(log_path, "ab") as log:  # the child keeps its own descriptor
                proc = await asyncio.create_subprocess_exec(
                    *(net.enter() if net is not None else []),
                    *self.command(spec, port),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=env,
                    start_new_session=True,  # its own process group: stopping it stops its workers too
                )
        except BaseException:
            self.gpus.release(spec.instance_id)
            if net is not None:
                await net.close()
            raise
        if net is not None:
            self._isolated[spec.instance_id] = net
            port = net.port  # where the gateway reaches it
        if spec.cpus:  # set before the interpreter has started any thread, so every thread inherits it
            with contextlib.suppress(OSError):
                os.sched_setaffinity(proc.pid, spec.cpus)
        (self._log_dir / f"{spec.instance_id}.pid").write_text(str(proc.pid))
        handle = InstanceHandle(spec, f"http://127.0.0.1:{port}", proc.pid, log_path=str(log_path), gpu_indices=devices)
        self._procs[spec.instance_id] = proc
        self._watchers[spec.instance_id] = asyncio.get_running_loop().create_task(self._watch(handle, proc))
        return handle

    async def _watch(self, handle: InstanceHandle, proc: asyncio.subprocess.Process) -> None:
        """Record why the process ended; stop it when it outgrows its memory envelope."""
        while proc.returncode is None:
            if self._over_limit(handle, proc):
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), self._watch_interval_s)
        code = await proc.wait()
        if handle.exit_reason is None:
            handle.exit_reason = f"instance {handle.spec.instance_id} exited with status {code}"

    def reap_orphans(self) -> list[int]:
        """Stop instances a previous control process left running (it was killed before it could stop them):
        every pid file under the log directory whose process is still a ``servekit serve``. Returns the pids."""
        reaped: list[int] = []
        if not self._log_dir.is_dir():
            return reaped
        for pidfile in self._log_dir.glob("*.pid"):
            try:
                pid = int(pidfile.read_text().strip())
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except (OSError, ValueError):
                pidfile.unlink(missing_ok=True)
                continue
            if b"servekit.cli.main" in cmdline and b"serve" in cmdline:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                reaped.append(pid)
            pidfile.unlink(missing_ok=True)
        return reaped

    async def stop(self, handle: InstanceHandle, grace_s: float = 10.0) -> None:
        (self._log_dir / f"{handle.spec.instance_id}.pid").unlink(missing_ok=True)
        self.gpus.release(handle.spec.instance_id)  # its cards are free once it is asked to stop
        proc = self._procs.pop(handle.spec.instance_id, None)
        if proc is None:
            return
        if proc.returncode is None:
            handle.exit_reason = handle.exit_reason or f"instance {handle.spec.instance_id} was stopped"
            _signal_group(proc, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except TimeoutError:
                _signal_group(proc, signal.SIGKILL)
                await proc.wait()
        watcher = self._watchers.pop(handle.spec.instance_id, None)
        if watcher is not None:
            await asyncio.gather(watcher, return_exceptions=True)
        self._killed.discard(handle.spec.instance_id)
        net = self._isolated.pop(handle.spec.instance_id, None)
        if net is not None:
            await net.close()

    def _over_limit(self, handle: InstanceHandle, proc: asyncio.subprocess.Process) -> bool:
        """Kill the instance (and say why) when its resident memory passes its envelope; True if it did."""
        limit = handle.spec.memory_bytes
        if handle.spec.instance_id in self._killed:
            return True
        if limit is None or proc.returncode is not None:
            return False
        rss = rss_bytes(proc.pid)
        if rss is None or rss <= limit:
            return False
        handle.exit_reason = (
            f"instance {handle.spec.instance_id} exceeded its memory limit: "
            f"{rss / 2**30:.2f} GiB resident, limit {limit / 2**30:.2f} GiB"
        )
        self._killed.add(handle.spec.instance_id)
        _signal_group(proc, signal.SIGKILL)
        return True

    def alive(self, handle: InstanceHandle) -> bool:
        """Also enforces the memory limit (besides the watcher's interval): the fleet asks before every health
        poll, so an instance that is over its envelope never counts as healthy."""
        proc = self._procs.get(handle.spec.instance_id)
        if proc is not None and proc.returncode is None and not self._over_limit(handle, proc):
            return True
        if handle.exit_reason is None:  # reaped before the watcher recorded why: say so from the status
            code = None if proc is None else proc.returncode
            handle.exit_reason = f"instance {handle.spec.instance_id} exited with status {code}"
        return False

    def log_tail(self, handle: InstanceHandle, lines: int = 20) -> str:
        return tail_lines(handle.log_path, lines) if handle.log_path is not None else ""

    async def close(self) -> None:
        handles = list(self._procs)
        for instance_id in handles:
            proc = self._procs.get(instance_id)
            if proc is not None and proc.returncode is None:
                _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for instance_id in handles:
            proc = self._procs.pop(instance_id)
            try:
                await asyncio.wait_for(proc.wait(), max(0.1, deadline - time.monotonic()))
            except TimeoutError:
                _signal_group(proc, signal.SIGKILL)
                await proc.wait()
        for task in self._watchers.values():
            task.cancel()
        await asyncio.gather(*self._watchers.values(), return_exceptions=True)
        self._watchers.clear()


def _signal_group(proc: asyncio.subprocess.Process, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


# ---- CPU affinity -------------------------------------------------------------------------------------------------


def pick_cpus(vcpus: int, cpus: Sequence[int], in_use: Collection[int], start: int = 0) -> tuple[int, ...] | None:
    """``vcpus`` CPUs of ``cpus`` that are not ``in_use``, in the order taken going round from position ``start``; None
    when fewer than ``vcpus`` are free (the instance then runs unpinned: oversubscription, never a clamp)."""
    if vcpus < 1 or not cpus:
        return None
    n = len(cpus)
    free = [cpus[(start + i) % n] for i in range(n) if cpus[(start + i) % n] not in in_use]
    if len(free) < vcpus:
        return None
    return tuple(free[:vcpus])


def assign_cpu_sets(demands: Sequence[int], cpus: Sequence[int]) -> list[tuple[int, ...] | None]:
    """Disjoint CPU sets for instances asking for ``demands`` vCPUs each, started in that order: round-robin over
    ``cpus`` (an instance gets the next free ones); an instance that no longer fits gets None (unpinned)."""
    pool = CpuPool(cpus)
    return [pool.take(f"i{k}", d) for k, d in enumerate(demands)]


class CpuPool:
    """Which CPUs each running instance holds; :meth:`take` hands out disjoint sets round-robin."""

    def __init__(self, cpus: Sequence[int]) -> None:
        self.cpus = tuple(cpus)
        self._held: dict[str, tuple[int, ...]] = {}
        self._next = 0

    def take(self, instance_id: str, vcpus: int) -> tuple[int, ...] | None:
        in_use = {c for held in self._held.values() for c in held}
        got = pick_cpus(vcpus, self.cpus, in_use, self._next)
        if got is not None:
            self._held[instance_id] = got
            self._next = (self.cpus.index(got[-1]) + 1) % len(self.cpus)  # the next instance starts after it
        return got

    def release(self, instance_id: str) -> None:
        self._held.pop(instance_id, None)

    def free(self) -> int:
        return len(self.cpus) - sum(len(h) for h in self._held.values())


class CpuPinningBackend:
    """A :class:`ReplicaBackend` around another that gives each instance its own CPUs (``InstanceSpec.cpus``) while
    the machine has enough free ones, and starts it unpinned with a warning when it does not."""

    def __init__(self, inner: ReplicaBackend, pool: CpuPool) -> None:
        self.inner = inner
        self.pool = pool

    async def start(self, spec: InstanceSpec) -> InstanceHandle:
        if spec.cpus is None and self.pool.cpus:
            free = self.pool.free()
            cpus = self.pool.take(spec.instance_id, spec.vcpus)
            if cpus is None:
                log.warning(
                    "oversubscribed: instance %s asks for %d vCPUs and only %d of this machine's %d CPUs are not "
                    "held by other instances: it runs without CPU affinity, sharing CPUs",
                    spec.instance_id,
                    spec.vcpus,
                    free,
                    len(self.pool.cpus),
                )
            else:
                spec = replace(spec, cpus=cpus)
        try:
            return await self.inner.start(spec)
        except BaseException:
            self.pool.release(spec.instance_id)
            raise

    async def stop(self, handle: InstanceHandle, grace_s: float = 10.0) -> None:
        try:
            await self.inner.stop(handle, grace_s)
        finally:
            self.pool.release(handle.spec.instance_id)

    def alive(self, handle: InstanceHandle) -> bool:
        if self.inner.alive(handle):
            return True
        self.pool.release(handle.spec.instance_id)  # a dead instance's CPUs go to its replacement
        return False

    def log_tail(self, handle: InstanceHandle, lines: int = 20) -> str:
        return self.inner.log_tail(handle, lines)

    async def close(self) -> None:
        await self.inner.close()
