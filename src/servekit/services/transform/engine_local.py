"""The default engine: one process per instance, each loading the model once.

On Linux, when the parent runs no other thread, instances are forked: they start in milliseconds with
everything imported (the parent imports the pipeline before it forks and has loaded no model). Otherwise
they are spawned. Each reports over its own pipe: progress every ``progress_interval_s``,
each finished object, and an ``exit`` message. The parent waits on the pipes and on its Ctrl-C descriptor (no
polling). Ctrl-C in the parent sets a shared event; instances stop at the next mini-batch, drop their partial output
and exit (they ignore SIGINT themselves). A second Ctrl-C terminates them. Ctrl-C never raises in the parent while it
forks (see ``_utils.ctrl_c``). An instance whose parent dies (SIGKILL)
exits at once, so a resumed run never races an orphan.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from servekit._utils.ctrl_c import CtrlC
from servekit.services.transform.engine import (
    EngineEvents,
    RunOptions,
    intra_op_threads,
    make_invoker,
    tune_instance_process,
)
from servekit.services.transform.object_runner import ObjectResult, ObjectRunner, ObjectTask
from servekit.services.transform.spec import TransformSpec
from servekit.services.transform.status import ObjectStatus


class _Reporter:
    """Sums progress and sends it at most every ``interval`` seconds."""

    def __init__(self, conn: Connection, interval: float) -> None:
        self._conn = conn
        self._interval = interval
        self._records = self._bytes = 0
        self._last = time.monotonic()

    def add(self, records: int, nbytes: int) -> None:
        self._records += records
        self._bytes += nbytes
        now = time.monotonic()
        if now - self._last >= self._interval:
            self.flush()
            self._last = now

    def flush(self) -> None:
        if self._records or self._bytes:
            self._conn.send(("progress", self._records, self._bytes))
            self._records = self._bytes = 0


def _exit_with_parent() -> None:
    parent = mp.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def instance_main(
    spec: TransformSpec,
    instance: int,
    tasks: list[ObjectTask],
    conn: Connection,
    stop: Any,
    intra_op: int,
    interval: float,
) -> None:
    """Body of one instance process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent()
    os.environ.update(dict(spec.environment))
    try:
        try:
            invoker = make_invoker(spec, intra_op)
        except Exception as exc:
            conn.send(("fatal", f"instance {instance} could not start: {exc}"))
            return
        tune_instance_process()
        runner = ObjectRunner(spec, invoker, instance)
        reporter = _Reporter(conn, interval)
        try:
            for task in tasks:
                if stop.is_set():
                    break
                try:
                    result = runner.run(task, stop.is_set, reporter.add)
                except Exception as exc:  # a bug must fail this object, not the others
                    result = ObjectResult(task.obj.key, ObjectStatus.FAILED, message=f"internal error: {exc!r}")
                    result.instance = instance
                reporter.flush()
                conn.send(("object", result))
        finally:
            runner.close()
            invoker.close()
        conn.send(("exit",))
    finally:
        conn.close()


@dataclass
class _Instance:
    index: int
    proc: Any
    tasks: dict[str, ObjectTask]
    exited: bool = False
    fatal: str = ""


def _context() -> Any:
    if sys.platform == "linux" and threading.active_count() == 1:
        return mp.get_context("fork")
    return mp.get_context("spawn")


class LocalEngine:
    def __init__(self, options: RunOptions) -> None:
        self._options = options
        self._stopped = False

    def run(
        self, spec: TransformSpec, shards: list[list[ObjectTask]], events: EngineEvents, ctrl_c: CtrlC | None = None
    ) -> bool:
        if ctrl_c is None:
            with CtrlC() as own:
                return self._run(spec, shards, events, own)
        return self._run(spec, shards, events, ctrl_c)

    def _run(self, spec: TransformSpec, shards: list[list[ObjectTask]], events: EngineEvents, ctrl_c: CtrlC) -> bool:
        ctx = _context()
        stop = ctx.Event()
        intra_op = intra_op_threads(self._options, len(shards))
        live: dict[Connection, _Instance] = {}
        for i, tasks in enumerate(shards):
            if not tasks:
                continue
            reader, writer = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=instance_main,
                args=(spec, i, tasks, writer, stop, intra_op, self._options.progress_interval_s),
                name=f"servekit-transform-{spec.name}-{i}",
            )
            proc.start()
            writer.close()
            live[reader] = _Instance(i, proc, {t.obj.key: t for t in tasks})
        self._stopped = False
        seen = 0
        while live:
            if ctrl_c.count > seen:
                seen = ctrl_c.count
                if self._stopped:  # a second Ctrl-C: do not wait for mini-batches in flight
                    for inst in live.values():
                        inst.proc.terminate()
                else:
                    self._stopped = True
                    stop.set()
                    events.on_stopping()
            for ready in multiprocessing.connection.wait([*live, ctrl_c.fd]):
                if isinstance(ready, int):
                    ctrl_c.drain()
                else:
                    assert isinstance(ready, Connection)
                    self._receive(ready, live, events)
        return self._stopped

    def _receive(self, conn: Connection, live: dict[Connection, _Instance], events: EngineEvents) -> None:
        inst = live[conn]
        try:
            msg = conn.recv()
        except EOFError:
            del live[conn]
            inst.proc.join()
            if not inst.exited and not inst.fatal and not self._stopped:
                code = inst.proc.exitcode
                for key in inst.tasks:  # whatever it had not finished has no output
                    events.on_object(
                        ObjectResult(key, ObjectStatus.FAILED, message=f"instance {inst.index} died (exit code {code})")
                    )
            return
        kind = msg[0]
        if kind == "progress":
            events.on_progress(msg[1], msg[2])
        elif kind == "object":
            result: ObjectResult = msg[1]
            inst.tasks.pop(result.key, None)
            events.on_object(result)
        elif kind == "fatal":
            inst.fatal = msg[1]
            events.on_fatal(inst.index, msg[1])
        elif kind == "exit":
            inst.exited = True
