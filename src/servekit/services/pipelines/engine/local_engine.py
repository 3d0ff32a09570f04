"""Engines run the steps that execute code (functions, commands, transform jobs): the :class:`Engine` protocol, and
:class:`LocalEngine`, which runs each attempt as a process of its own (in a session of its own, so a timeout or a
stop kills everything it started). :class:`servekit.services.pipelines.engine.ray_engine.RayEngine` implements the same
protocol."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from servekit._utils.files import read_beneath, tail_text
from servekit._utils.processes import terminate_sandbox
from servekit.services.pipelines.definition.steps import METRICS_FILE, METRICS_OUTPUT, StepKind

if TYPE_CHECKING:
    from servekit.services.pipelines.engine.step_sandbox import StepSandbox

RESULT_FILE = "result.json"
TASK_FILE = "task.json"
LOG_FILE = "log.txt"
LOG_TAIL_BYTES = 2000
RESULT_BYTES = 16 << 20  # what a step's result, properties or metrics file may hold


@dataclass(frozen=True, slots=True)
class StepTask:
    """One attempt of one step, everything resolved: what the engine needs and nothing of the run's state."""

    pipeline: str
    run_id: str
    step: str
    kind: StepKind
    attempt: int
    source: str  # where the worker loads the pipeline from (functions and transform steps)
    inputs: Mapping[str, Any]  # resolved arguments
    outputs: Mapping[str, str]  # output name -> folder URI
    reads: tuple[str, ...]  # read prefixes (the step's own write prefix is added by the guard)
    write_prefix: str
    workdir: Path  # task, result and log files of this attempt (not an artifact)
    home: str  # the servekit home (a transform step's job state)
    parameters: Mapping[str, Any] = field(default_factory=dict)
    command: tuple[str, ...] = ()  # a command step's resolved argv

    def to_json(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "run_id": self.run_id,
            "step": self.step,
            "kind": str(self.kind),
            "attempt": self.attempt,
            "source": self.source,
            "inputs": dict(self.inputs),
            "outputs": dict(self.outputs),
            "reads": list(self.reads),
            "write_prefix": self.write_prefix,
            "workdir": str(self.workdir),
            "home": self.home,
            "parameters": dict(self.parameters),
            "command": list(self.command),
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> StepTask:
        return cls(
            pipeline=doc["pipeline"],
            run_id=doc["run_id"],
            step=doc["step"],
            kind=StepKind(doc["kind"]),
            attempt=int(doc["attempt"]),
            source=doc["source"],
            inputs=doc["inputs"],
            outputs=doc["outputs"],
            reads=tuple(doc["reads"]),
            write_prefix=doc["write_prefix"],
            workdir=Path(doc["workdir"]),
            home=doc["home"],
            parameters=doc.get("parameters", {}),
            command=tuple(doc.get("command", ())),
        )


@dataclass(frozen=True, slots=True)
class StepOutcome:
    step: str
    attempt: int
    ok: bool
    properties: Mapping[str, Any] = field(default_factory=dict)  # a function's returned mapping
    metrics: Mapping[str, Any] = field(default_factory=dict)  # an evaluation's metrics
    message: str = ""  # why it failed
    error_types: tuple[str, ...] = ()  # for retry policies


class StepHandle(Protocol):
    def kill(self) -> None:
        """End the attempt now (its outcome still arrives, as a failure)."""
        ...


class Engine(Protocol):
    def start(self, task: StepTask, done: Callable[[StepOutcome], None]) -> StepHandle:
        """Start ``task``; ``done`` is called once with its outcome, from any thread."""
        ...


def read_result(task: StepTask, returncode: int, log_fd: int | None = None) -> StepOutcome:
    """The outcome a worker or a command left behind, its files read beneath the attempt's folder without following
    a link (a step may have made ``result.json`` a link to a file it could not read itself); the log's tail from
    ``log_fd`` when given (the file the step wrote, whatever it renamed)."""
    if task.command:
        return _command_result(task, returncode, log_fd)
    text = read_beneath(task.workdir, RESULT_FILE, RESULT_BYTES)
    if text is not None:
        try:
            doc = orjson.loads(text)
        except orjson.JSONDecodeError:
            doc = None
        if isinstance(doc, dict):
            return outcome_of(task, doc)
    return StepOutcome(
        task.step,
        task.attempt,
        False,
        message=f"the step's process ended with status {returncode} without a result{_log_tail(task, log_fd)}",
        error_types=(f"ExitCode.{returncode}",) if returncode >= 0 else ("Killed",),
    )


def outcome_of(task: StepTask, doc: Mapping[str, Any]) -> StepOutcome:
    """The outcome a worker's result document describes."""
    return StepOutcome(
        task.step,
        task.attempt,
        bool(doc.get("ok")),
        doc.get("properties") or {},
        doc.get("metrics") or {},
        doc.get("message", ""),
        tuple(doc.get("error_types", ())),
    )


def command_env(task: StepTask, base: Mapping[str, str]) -> dict[str, str]:
    """A command step's environment: its run, step, output folders (made when local) and properties file."""
    env = {**base, "SERVEKIT_RUN_ID": task.run_id, "SERVEKIT_STEP": task.step}
    env["SERVEKIT_PROPERTIES"] = str(task.workdir / "properties.json")
    for name, uri in task.outputs.items():
        env[f"SERVEKIT_OUTPUT_{env_name(name)}"] = uri
        if "://" not in uri:
            Path(uri).mkdir(parents=True, exist_ok=True)  # a command writes into its folders directly
    return env


def _command_result(task: StepTask, returncode: int, log_fd: int | None = None) -> StepOutcome:
    if returncode != 0:
        return StepOutcome(
            task.step,
            task.attempt,
            False,
            message=f"the command exited with status {returncode}{_log_tail(task, log_fd)}",
            error_types=(f"ExitCode.{returncode}",),
        )
    props: Any = {}
    try:
        text = read_beneath(task.workdir, "properties.json", RESULT_BYTES)
        if text is not None:
            props = orjson.loads(text)
        metrics: Any = {}
        if task.kind is StepKind.EVALUATION:
            metrics_file = Path(task.outputs[METRICS_OUTPUT].removeprefix("file://")) / METRICS_FILE
            prefix = Path(task.write_prefix.removeprefix("file://"))
            # from the step's own prefix down: no part of the way is a link the step made
            under = prefix in metrics_file.parents
            root, rel = (
                (prefix, str(metrics_file.relative_to(prefix))) if under else (metrics_file.parent, METRICS_FILE)
            )
            text = read_beneath(root, rel, RESULT_BYTES)
            metrics = orjson.loads(text) if text is not None else None
            if not isinstance(metrics, dict):
                return StepOutcome(
                    task.step,
                    task.attempt,
                    False,
                    message=f"the evaluation command wrote no JSON object to $SERVEKIT_OUTPUT_METRICS/{METRICS_FILE}",
                )
    except orjson.JSONDecodeError as exc:
        return StepOutcome(task.step, task.attempt, False, message=f"the command wrote invalid JSON: {exc}")
    if not isinstance(props, dict):
        return StepOutcome(task.step, task.attempt, False, message="$SERVEKIT_PROPERTIES must hold a JSON object")
    return StepOutcome(task.step, task.attempt, True, props, metrics)


def _log_tail(task: StepTask, log_fd: int | None = None) -> str:
    log = task.workdir / LOG_FILE
    if log_fd is None:
        tail = tail_text(log, LOG_TAIL_BYTES).strip()
    else:
        end = os.fstat(log_fd).st_size
        tail = os.pread(log_fd, LOG_TAIL_BYTES, max(0, end - LOG_TAIL_BYTES)).decode("utf-8", "replace").strip()
    return f"; log ({log}) ends: {tail}" if tail else ""


def env_name(output: str) -> str:
    return output.upper().replace("-", "_")


class _ProcessHandle:
    def __init__(self, proc: subprocess.Popen[bytes], grace_s: float, sandboxed: bool = False) -> None:
        self._proc = proc
        self._grace_s = grace_s
        self._sandboxed = sandboxed
        self._killed = threading.Event()

    def kill(self) -> None:
        if self._killed.is_set():
            return
        self._killed.set()
        if self._sandboxed:  # to the step's processes: bubblewrap's own would end the sandbox with SIGKILL
            terminate_sandbox(self._proc.pid, set())
        else:
            _signal_group(self._proc, signal.SIGTERM)
        threading.Thread(target=self._finish, daemon=True, name="servekit-step-kill").start()

    def _finish(self) -> None:
        try:
            self._proc.wait(self._grace_s)
        except subprocess.TimeoutExpired:
            _signal_group(self._proc, signal.SIGKILL)


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # the step runs in a session of its own: its pid is its group


class LocalEngine:
    """Each attempt a process: ``python -m servekit.services.pipelines.engine.worker TASK`` for functions and transform
    jobs, the argv itself for commands; stdout and stderr go to the attempt's ``log.txt``."""

    def __init__(
        self, *, kill_grace_s: float = 5.0, env: Mapping[str, str] | None = None, sandbox: StepSandbox | None = None
    ) -> None:
        self._grace_s = kill_grace_s
        self._env = dict(os.environ if env is None else env)
        self._sandbox = sandbox  # Function and command steps in the jobs' sandbox (runs servekit up started)

    def start(self, task: StepTask, done: Callable[[StepOutcome], None]) -> StepHandle:
        task.workdir.mkdir(parents=True, exist_ok=True)
        (task.workdir / TASK_FILE).write_bytes(orjson.dumps(task.to_json()))
        if task.command:
            argv = list(task.command)
            env = command_env(task, self._env)
        else:
            argv = [sys.executable, "-m", "servekit.services.pipelines.engine.worker", str(task.workdir / TASK_FILE)]
            env = {**self._env, "SERVEKIT_RUN_ID": task.run_id, "SERVEKIT_STEP": task.step}
        sandboxed = self._sandbox is not None and task.kind is not StepKind.TRANSFORM
        log = (task.workdir / LOG_FILE).open("a+b")  # kept open: the tail is read from this file, whatever its name
        try:
            if sandboxed:
                assert self._sandbox is not None
                layout = self._sandbox.layout(task.workdir, task.source, [task.write_prefix], task.reads)
                argv, env = self._sandbox.command(layout, argv), self._sandbox.env(env)
            proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )
        except BaseException:
            log.close()
            raise

        def watch() -> None:
            code = proc.wait()
            try:
                outcome = read_result(task, code, log.fileno())
            except (OSError, ValueError) as exc:  # the run must hear of every attempt, or it waits forever
                outcome = StepOutcome(task.step, task.attempt, False, message=f"the step's result: {exc}")
            finally:
                log.close()
            done(outcome)

        threading.Thread(target=watch, daemon=True, name=f"servekit-step-{task.step}").start()
        return _ProcessHandle(proc, self._grace_s, sandboxed)
