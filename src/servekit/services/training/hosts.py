"""How the hosts of a SageMaker job run (training, processing): each host's sandbox command here
(:func:`run_sandboxed`) or through a :class:`Launcher` (a Ray actor), all of a job's together (:func:`run_hosts`),
with its output appended to its log; a stop or ``MaxRuntimeInSeconds`` is SIGTERM, then SIGKILL after the grace; the
instance type's memory envelope is enforced; a failing host stops the others."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from servekit._utils.files import tail_text
from servekit._utils.processes import (
    TERM_AGAIN_S,
    out_of_memory,
    sandbox_memory,
    signal_sandbox,
    terminate_sandbox,
)
from servekit.accelerators.placement import GpuPool
from servekit.services.training import contract, sandbox

STOP_GRACE_S = 120.0  # SageMaker's: SIGTERM, then SIGKILL two minutes later


@dataclass(frozen=True)
class JobEnvelope:
    """What an instance type gives a job's host: its CPUs (``SM_NUM_CPUS``) and memory (a host whose processes
    hold more resident memory, with what its private /tmp stores, is killed and the job fails "out of memory")."""

    instance_type: str
    vcpus: int
    memory_bytes: int | None
    gpus: int = 0  # GPUs each host gets to itself (a GPU instance type's)


MEMORY_POLL_S = 0.25  # how often a host's memory (resident and its /tmp) is read against its envelope


@dataclass
class Running:
    proc: asyncio.subprocess.Process | None = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str = ""
    hosts: list[Running] = field(default_factory=list)  # a job of several hosts: one run each
    out_of_memory: str = ""  # why the memory watcher killed it
    cancel: Callable[[], None] | None = None  # ends it elsewhere (a host on Ray: kills its actor)

    def failure(self, rc: int) -> str:
        """What ended the run, when it was not the script itself: its envelope, or a SIGKILL from elsewhere."""
        if self.out_of_memory:
            return self.out_of_memory
        if rc == -signal.SIGKILL:
            return (
                "OutOfMemoryError: the job was killed (SIGKILL), as the kernel's out-of-memory killer does when the "
                "machine runs out of memory"
            )
        return ""

    def kill(self) -> None:
        """SIGKILL what still runs (servekit up is stopping: the sandboxes die with it)."""
        for run in [self, *self.hosts]:
            if run.proc is not None and run.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    signal_sandbox(run.proc.pid, signal.SIGKILL)
            if run.cancel is not None:
                with contextlib.suppress(Exception):  # Ray's own errors: the actor is gone already
                    run.cancel()


class Launcher(Protocol):
    """Runs one host's sandbox command: here (:func:`run_sandboxed`) or on a Ray node
    (``servekit.backends.ray_job_hosts.RayJobHosts``). Its exit code, and whether it was stopped."""

    async def __call__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        log_path: Path,
        limit_s: float,
        run: Running,
        grace_s: float,
        envelope: JobEnvelope | None = None,
    ) -> tuple[int, bool]: ...


async def run_hosts(
    commands: Sequence[tuple[list[str], Mapping[str, str], Path]],
    limit_s: float,
    run: Running,
    grace_s: float,
    envelope: JobEnvelope | None = None,
    launch: Launcher | None = None,
) -> tuple[list[tuple[int, bool]], bool]:
    """Run one sandbox command per host (:func:`run_sandboxed`) together. When one host fails the others are
    stopped (they would wait for it forever in a rendezvous); a stop of the job stops them all. Each host's exit
    code and whether it was stopped, and whether the job was stopped (``run.reason`` says why)."""
    run.hosts = [Running() for _ in commands]
    tasks = [
        asyncio.create_task((launch or run_sandboxed)(argv, env, log_path, limit_s, host, grace_s, envelope))
        for (argv, env, log_path), host in zip(commands, run.hosts, strict=True)
    ]
    stopper = asyncio.create_task(run.stop.wait())
    pending: set[asyncio.Task[Any]] = {*tasks, stopper}
    try:
        while pending - {stopper}:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            abort = ""
            if stopper in done:
                abort = run.reason
            for task in done - {stopper}:
                rc, stopped = task.result()
                if rc != 0 and not stopped:
                    abort = "another host of the job failed"
            if stopper in done or abort:
                for host in run.hosts:
                    if not host.stop.is_set():
                        host.reason = host.reason or abort
                        host.stop.set()
    finally:
        stopper.cancel()
    results = [t.result() for t in tasks]
    timed_out = any(h.reason == "MaxRuntimeExceeded" for h in run.hosts)
    if timed_out and not run.stop.is_set():
        run.reason = "MaxRuntimeExceeded"
    stopped = run.stop.is_set() or timed_out
    return results, stopped


def shards(folder: Path, count: int) -> list[Path]:
    """``ShardedByS3Key``: ``count`` folders beside ``folder``, the i-th holding every ``count``-th file by key from
    the i-th (hard links, or copies across file systems)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    out = []
    for i in range(count):
        shard = folder.with_name(f"{folder.name}.shard-{i + 1}")
        shutil.rmtree(shard, ignore_errors=True)
        shard.mkdir(parents=True)
        for src in files[i::count]:
            dest = shard / src.relative_to(folder)
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(src, dest)
            except OSError:
                shutil.copy2(src, dest)
        out.append(shard)
    return out


def last_line(path: Path) -> str:
    """The log's last non-blank line ("" when it has none): what a failed job's FailureReason quotes."""
    lines = [ln for ln in tail_text(path, 8192).splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


def ml_dir(job_dir: Path, host: str) -> Path:
    """A host's ``/opt/ml`` on this machine (the first host's keeps the single-host name)."""
    return job_dir / "ml" if host == contract.HOST else job_dir / f"ml-{host}"


async def _watch_memory(proc: asyncio.subprocess.Process, envelope: JobEnvelope, run: Running) -> None:
    limit = envelope.memory_bytes
    assert limit is not None
    while proc.returncode is None:
        rss = sandbox_memory(proc.pid)
        if rss is not None and rss > limit:
            run.out_of_memory = out_of_memory(rss, limit, envelope.instance_type)
            with contextlib.suppress(ProcessLookupError):
                signal_sandbox(proc.pid, signal.SIGKILL)
            return
        await asyncio.sleep(MEMORY_POLL_S)


async def run_sandboxed(
    argv: list[str],
    env: Mapping[str, str],
    log_path: Path,
    limit_s: float,
    run: Running,
    grace_s: float,
    envelope: JobEnvelope | None = None,
) -> tuple[int, bool]:
    """Run ``argv`` (a sandbox command) with its output appended to ``log_path``; stop it when ``run.stop`` is set
    or after ``limit_s`` (SIGTERM to its process group, SIGKILL after ``grace_s``); kill it when its processes hold
    more memory than ``envelope`` allows (``run.out_of_memory`` says so). Its exit code, and whether it was stopped
    (``run.reason`` says why: ``MaxRuntimeExceeded`` when the limit passed)."""
    with log_path.open("ab") as out:
        run.proc = await asyncio.create_subprocess_exec(
            *argv,
            stdout=out,
            stderr=asyncio.subprocess.STDOUT,
            stdin=asyncio.subprocess.DEVNULL,
            env=dict(env),
            start_new_session=True,
        )
    proc = run.proc
    waiter = asyncio.create_task(proc.wait())
    stopper = asyncio.create_task(run.stop.wait())
    watcher = None
    if envelope is not None and envelope.memory_bytes is not None:
        watcher = asyncio.create_task(_watch_memory(proc, envelope, run))
    try:
        done, _ = await asyncio.wait({waiter, stopper}, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
        if watcher is not None:
            watcher.cancel()
    if waiter in done:
        return waiter.result(), False
    if not run.stop.is_set():
        run.reason = "MaxRuntimeExceeded"
    await _stop_sandbox(proc, waiter, grace_s)
    return proc.returncode or 0, True


async def _stop_sandbox(proc: asyncio.subprocess.Process, waiter: asyncio.Task[int], grace_s: float) -> None:
    """SIGTERM to what runs in the sandbox, again every :data:`TERM_AGAIN_S` to what started since, SIGKILL to all
    after ``grace_s``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + grace_s
    signalled: set[int] = set()
    while not waiter.done():
        terminate_sandbox(proc.pid, signalled)
        left = end - loop.time()
        if left <= 0:
            with contextlib.suppress(ProcessLookupError):
                signal_sandbox(proc.pid, signal.SIGKILL)
            break
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(waiter), min(TERM_AGAIN_S, left))
    await waiter


GPU_CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def gpu_device_nodes(indices: Sequence[int]) -> tuple[str, ...]:
    """The device nodes a host holding the GPUs ``indices`` needs in its sandbox (none without GPUs)."""
    return (*GPU_CONTROL_NODES, *(f"/dev/nvidia{i}" for i in indices)) if indices else ()


@contextlib.contextmanager
def job_gpus(
    pool: GpuPool | None, job: str, hosts: Sequence[str], envelope: JobEnvelope | None
) -> Iterator[dict[str, tuple[int, ...]]]:
    """Each host's own GPUs for a job on a GPU instance type, held while the job runs (the same pool as the
    endpoints' instances); :class:`GpuShortage` when the machine lacks them. No pool (hosts on Ray): none here."""
    wanted = envelope.gpus if envelope is not None else 0
    held: dict[str, tuple[int, ...]] = {}
    try:
        if wanted and pool is not None:
            for host in hosts:
                held[host] = pool.acquire(f"{job}/{host}", wanted)
        yield held
    finally:
        if pool is not None:
            for host in hosts:
                pool.release(f"{job}/{host}")


def sandbox_env(extra: Mapping[str, str]) -> dict[str, str]:
    """A job's environment: a plain PATH with servekit's Python first as ``python``/``python3`` (BIN), then
    ``extra``."""
    return {
        "PATH": f"{sandbox.BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": "/tmp",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        **extra,
    }
