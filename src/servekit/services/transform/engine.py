"""What both engines share: run options, the events they report, sharding, and building the invoker."""

from __future__ import annotations

import gc
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from servekit._utils import heap
from servekit._utils.ctrl_c import CtrlC
from servekit._utils.processes import cpu_share
from servekit.config.models import RuntimeOptions
from servekit.services.transform.invoke import HttpInvoker, Invoker, RuntimeInvoker
from servekit.services.transform.object_runner import ObjectResult, ObjectTask
from servekit.services.transform.spec import EngineKind, TransformSpec
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.storage.fs import Storage


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How to run a job; never changes its outputs."""

    engine: EngineKind = EngineKind.LOCAL
    ray_address: str = ""  # "" = start a local Ray
    intra_op_threads: int = 0  # onnxruntime threads per instance; 0 = cores / instances
    progress_interval_s: float = 0.2  # how often instances report records done


class EngineEvents(Protocol):
    """What an engine tells the job runner, on the runner's thread."""

    def on_progress(self, records: int, nbytes: int) -> None: ...

    def on_object(self, result: ObjectResult) -> None: ...

    def on_fatal(self, instance: int, message: str) -> None:
        """An instance could not start (the model did not load, the endpoint URL is malformed)."""
        ...

    def on_stopping(self) -> None: ...


class Engine(Protocol):
    def run(
        self, spec: TransformSpec, shards: list[list[ObjectTask]], events: EngineEvents, ctrl_c: CtrlC | None = None
    ) -> bool:
        """Run every task; one object is always done by one instance. True when stopped (Ctrl-C) early.

        ``ctrl_c`` counts the run's SIGINTs (the first stops at the next mini-batch, a second abandons those in
        flight); without it an engine takes KeyboardInterrupt as the first.
        """
        ...


def shard(tasks: list[ObjectTask], instances: int) -> list[list[ObjectTask]]:
    """Objects to instances, deterministically: largest first onto the least loaded instance (ties: lowest
    instance). Each list keeps the input order, so outputs appear in key order per instance."""
    loads = [0] * instances
    owner: dict[str, int] = {}
    for task in sorted(tasks, key=lambda t: (-t.obj.size, t.obj.key)):
        i = min(range(instances), key=lambda k: (loads[k], k))
        owner[task.obj.key] = i
        loads[i] += max(task.obj.size, 1)
    shards: list[list[ObjectTask]] = [[] for _ in range(instances)]
    for task in tasks:
        shards[owner[task.obj.key]].append(task)
    return shards


def intra_op_threads(options: RunOptions, instances: int) -> int:
    if options.intra_op_threads:
        return options.intra_op_threads
    return cpu_share(instances)


# What an instance's heap keeps for its next mini-batch (see keep_heap_pages).
_MMAP_THRESHOLD_BYTES, _TRIM_THRESHOLD_BYTES = 32 << 20, 64 << 20


def tune_instance_process() -> None:
    """An instance process makes and drops many short-lived containers per record: collect young objects
    less often (about 8% faster here) and keep what the model loaded out of every collection."""
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    keep_heap_pages()


def keep_heap_pages() -> None:
    """Keep freed heap pages for the next mini-batch instead of handing them back to the system at once.

    A mini-batch of 1,024 records of 64 floats makes a few buffers of ~0.5 MB (the joined lines, simdjson's parse,
    the arrays) and frees them. glibc maps blocks that large on their own and unmaps them when freed (or trims
    the heap's top once over twice that size), so every mini-batch faulted its ~4 MB in again: ~1,100 page faults
    and as much system CPU as the parse's own (``numeric_lines`` x200: 0.36-0.45 s system, 222k faults; with these
    thresholds 0.004 s, 1.1k faults). An instance holds at most 64 MiB of free heap this way. No-op without glibc."""
    heap.keep_freed_pages(_MMAP_THRESHOLD_BYTES, _TRIM_THRESHOLD_BYTES)


def make_invoker(spec: TransformSpec, intra_op: int) -> Invoker:
    """The model, loaded once per instance, or a client of the endpoint."""
    if spec.endpoint_url:
        return HttpInvoker(spec.endpoint_url, float(spec.invocation_timeout_s))
    path = Storage().local_path(spec.model)
    servable = RuntimeRegistry().load(
        Path(path).resolve(), options=RuntimeOptions(intra_op_threads=intra_op, inter_op_threads=1)
    )
    name = Path(path).resolve().parent.name or "model"
    return RuntimeInvoker(servable, name)
