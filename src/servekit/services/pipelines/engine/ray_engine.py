"""The Ray engine (``--engine ray``): each attempt of a code or transform step is one Ray task.

The task runs the same code the local engine's step process runs
(:func:`servekit.services.pipelines.engine.worker.execute` for
functions and transform jobs, the argv for commands), so artifacts, hashes and lineage are the same; the run loop,
caching, retries and lineage stay in the driver. Each task gets a Ray worker process of its own (``max_calls=1``):
a step's imports never leak into the next, and a changed pipeline file is read afresh. Ray's own retries are off
(``max_retries=0``): retry policies are the pipeline's. A kill (timeout, stop) cancels the task, then forces it
after a grace period.

On a cluster, the servekit home (task and log files) and the artifact root must be reachable from every node under
the same paths (shared storage, or an fsspec URI for the artifact root). Ray is imported only when this engine is
used.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from servekit.services.pipelines.engine.local_engine import (
    LOG_FILE,
    RESULT_FILE,
    TASK_FILE,
    StepHandle,
    StepOutcome,
    StepTask,
    command_env,
    outcome_of,
    read_result,
)

KILL_GRACE_S = 5.0


def run_task(doc: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """What a Ray task runs: one attempt, in the Ray worker. Returns ``{"result": ...}`` (a worker's result
    document) or ``{"returncode": n}`` (a command, whose properties and metrics files the driver reads)."""
    task = StepTask.from_json(doc)
    task.workdir.mkdir(parents=True, exist_ok=True)
    (task.workdir / TASK_FILE).write_bytes(orjson.dumps(task.to_json()))
    if task.command:
        with (task.workdir / LOG_FILE).open("ab") as log:
            proc = subprocess.Popen(
                list(task.command),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=command_env(task, {**os.environ, **env}),
                start_new_session=True,
            )
            try:
                return {"returncode": proc.wait()}
            except BaseException:  # a cancel (KeyboardInterrupt): the command's whole session goes too
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                raise
    from servekit.services.pipelines.engine.worker import execute

    os.environ.update({**env, "SERVEKIT_RUN_ID": task.run_id, "SERVEKIT_STEP": task.step})
    result = execute(task)
    (task.workdir / RESULT_FILE).write_bytes(orjson.dumps(result))
    return {"result": result}


class _RayHandle:
    def __init__(self, ref: Any, grace_s: float) -> None:
        self._ref = ref
        self._grace_s = grace_s
        self._killed = threading.Event()
        self.done = threading.Event()

    def kill(self) -> None:
        import ray

        if self._killed.is_set():
            return
        self._killed.set()
        with contextlib.suppress(Exception):  # already finished: nothing to cancel
            ray.cancel(self._ref, force=False)

        def force() -> None:
            if not self.done.wait(self._grace_s):
                with contextlib.suppress(Exception):
                    ray.cancel(self._ref, force=True)

        threading.Thread(target=force, daemon=True, name="servekit-ray-kill").start()


class RayEngine:
    """Steps as Ray tasks on the cluster at ``address`` (None: a local Ray started here with ``num_cpus``).
    :meth:`close` shuts down a Ray this engine started."""

    def __init__(
        self,
        *,
        address: str | None = None,
        num_cpus: int | None = None,
        task_cpus: float = 1.0,
        kill_grace_s: float = KILL_GRACE_S,
    ) -> None:
        self._address = address
        self._num_cpus = num_cpus
        self._task_cpus = task_cpus
        self._grace_s = kill_grace_s
        self._started = False
        self._remote: Any = None
        self._lock = threading.Lock()

    def _ensure(self) -> Any:
        import ray

        with self._lock:
            if not ray.is_initialized():
                kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": "WARNING"}
                if self._address is not None:
                    kwargs["address"] = self._address
                else:
                    kwargs["num_cpus"] = self._num_cpus
                ray.init(**kwargs)
                self._started = True
            if self._remote is None:
                self._remote = ray.remote(num_cpus=self._task_cpus, max_calls=1, max_retries=0)(run_task)
            return ray

    def start(self, task: StepTask, done: Callable[[StepOutcome], None]) -> StepHandle:
        ray = self._ensure()
        task.workdir.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k.startswith("SERVEKIT_")}
        ref = self._remote.options(name=f"servekit-{task.pipeline}-{task.step}-{task.attempt}").remote(
            task.to_json(), env
        )
        handle = _RayHandle(ref, self._grace_s)

        def watch() -> None:
            try:
                answer = ray.get(ref)
                if "result" in answer:
                    outcome = outcome_of(task, answer["result"])
                else:
                    outcome = read_result(task, int(answer["returncode"]))
            except Exception as exc:  # cancelled, the worker died, or Ray failed: the attempt failed
                outcome = StepOutcome(
                    task.step,
                    task.attempt,
                    False,
                    message=f"the step's Ray task failed: {type(exc).__name__}: {str(exc)[:500]}",
                    error_types=tuple(c.__name__ for c in type(exc).__mro__),
                )
            handle.done.set()
            done(outcome)

        threading.Thread(target=watch, daemon=True, name=f"servekit-ray-step-{task.step}").start()
        return handle

    def close(self) -> None:
        if self._started:
            import ray

            ray.shutdown()
            self._started = False
