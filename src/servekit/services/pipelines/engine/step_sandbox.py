"""The jobs' sandbox (:mod:`servekit.services.training.sandbox`) for the Function and command steps of a run that
``servekit up`` started (CreatePipeline, StartPipelineExecution on a definition in servekit's format): the step's
code runs as a job's does, root in a user namespace of its own and ``nobody`` outside when the plane runs as root,
with no capability, its own pid namespace and the seccomp filter, and sees of the servekit home only

- its attempt's folder (task, result, properties and log files), writable, which is also its ``/opt/ml``;
- its own output prefix, writable, and the prefixes it reads (upstream outputs, declared reads), read-only, each
  at its own path so the task's URIs hold;
- the pipeline's files: its definition, its ``Function`` files and its ``Code`` paths, read-only (but none that
  holds the home).

Its environment is a job's: a plain ``PATH``, ``HOME=/tmp``, the step's own variables and the pipeline role's
session (handed to the run by the plane), never the home's admin key. Transform steps run servekit's own batch
transform and stay outside the sandbox."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from servekit.services.pipelines.definition.loading import YAML_SUFFIXES, load_pipeline
from servekit.services.pipelines.definition.pipeline import Pipeline
from servekit.services.training import sandbox
from servekit.services.training.hosts import sandbox_env

# what servekit up hands a run's steps (the role session's keys, its endpoint), as JSON in the run's environment
STEP_ENVIRONMENT = "SERVEKIT_STEP_ENVIRONMENT"
FOLDER = ".sandbox"  # in the attempt's folder: the seccomp filter the sandbox loads
# the run's own variables a step keeps (the rest of the run process's environment stays outside)
KEPT = ("LANG", "LC_ALL", "TZ", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL")


@dataclass(frozen=True)
class StepSandbox:
    """How a run's steps are sandboxed: the home they must not see, servekit's Python (the worker) and what every
    step's environment holds besides its own variables (the role session's keys, the plane's endpoint)."""

    home: Path
    python: str
    environment: Mapping[str, str] = field(default_factory=dict)

    def layout(self, task_workdir: Path, source: str, outputs: Sequence[str], reads: Sequence[str]) -> sandbox.Layout:
        """The step's folders (see the module's docstring); its output prefix is made here when it is local. The
        read-only ones are mounted first, so a writable folder inside one stays writable; none that holds the home
        is mounted (it would show the home)."""
        writable = [task_workdir]
        for uri in outputs:
            local = _local(uri)
            if local is not None:
                local.mkdir(parents=True, exist_ok=True)
                writable.append(local)
        readable = [p for p in (_local(uri) for uri in reads) if p is not None and p.exists()]
        readable += pipeline_files(source)
        home = self.home.resolve()
        readable = [p for p in dict.fromkeys(readable) if not _under(home, p)]
        mounts = [(p, str(p), False) for p in readable] + [(p, str(p), True) for p in writable]
        return sandbox.Layout(
            task_workdir,
            hidden=[self.home],
            mounts=mounts,
            # `python3 script.py` in a command step means servekit's Python, as in a job
            bin=sandbox.python_wrappers(task_workdir / FOLDER / "bin", self.python),
            runtime=sandbox.runtime_for(self.python, [self.home]),
            seccomp=sandbox.seccomp_file(task_workdir / FOLDER),
            chdir=str(task_workdir),
        )

    def command(self, layout: sandbox.Layout, argv: Sequence[str]) -> list[str]:
        """``argv`` in the sandbox, after handing the step its folders (:func:`sandbox.hand_over`)."""
        uid = sandbox.job_uid()
        sandbox.hand_over(layout, uid)
        return sandbox.command(layout, argv, sandbox.bwrap(), uid)

    def env(self, own: Mapping[str, str]) -> dict[str, str]:
        """A step's environment: the job's basics, the run's kept variables, ``environment``, its own."""
        kept = {k: v for k, v in own.items() if k in KEPT}
        step = {k: v for k, v in own.items() if k.startswith("SERVEKIT_") and k != STEP_ENVIRONMENT}
        return sandbox_env({**kept, **self.environment, **step})


def _local(uri: str) -> Path | None:
    if "://" in uri and not uri.startswith("file://"):
        return None
    return Path(os.path.realpath(uri.removeprefix("file://")))


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


@functools.lru_cache(maxsize=32)
def pipeline_files(source: str) -> tuple[Path, ...]:
    """What a worker reads to load the pipeline ``source`` names (a definition document): the document, its steps'
    ``Function`` files (each loaded from its file alone) and its ``Code`` paths. Found without importing anything."""
    if not source.endswith(YAML_SUFFIXES):
        return ()
    pipeline: Pipeline = load_pipeline(source, import_code=False)
    found = [Path(source).resolve()]
    for step in pipeline.steps:
        target = step.function_path.rpartition(":")[0]
        if target.endswith(".py"):
            found.append(Path(target).resolve())
        found += [Path(c) for c in step.code if os.path.exists(c)]
    return tuple(dict.fromkeys(found))
