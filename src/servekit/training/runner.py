"""One training job from start to end, as SageMaker runs it: download (here: link) the channels and the source,
write ``/opt/ml/input/config``, run the script in the sandbox with its log going to CloudWatch Logs, stop it at
``MaxRuntimeInSeconds`` or on StopTrainingJob (SIGTERM, then SIGKILL after the grace), tar ``/opt/ml/model`` to
``<S3OutputPath>/<job>/output/model.tar.gz``, and record every status on the way."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import tarfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from servekit._utils.processes import rss_bytes
from servekit.errors import ConfigError
from servekit.state.sagemaker_jobs import SageMakerJobs
from servekit.training import contract, sandbox
from servekit.training.folder_sync import SYNC_S, FolderSync
from servekit.training.images import Image, ImageTable, framework_check, unknown_image
from servekit.training.lifecycle import SecondaryStatus, TrainingJobStatus, check_transition
from servekit.training.metrics import POLL_S as METRICS_POLL_S
from servekit.training.metrics import MetricFollower, MetricSink, metric_values

log = logging.getLogger(__name__)

KIND = "training"
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
STOP_GRACE_S = 120.0  # SageMaker's: SIGTERM, then SIGKILL two minutes later
_FAILURE_MAX = 1024


class JobFiles(Protocol):
    """``s3://`` objects for jobs (servekit.s3.objects.Objects)."""

    def fetch(self, uri: str, dest: Path) -> int: ...

    def put_file(self, uri: str, path: Path, content_type: str = ...) -> str: ...


class JobLogs(Protocol):
    """Where a job's output goes (the CloudWatch Logs shipper, adapted by the launch layer)."""

    def register(self, group: str, stream: str, path: Path) -> None: ...

    def unregister(self, path: Path) -> None: ...

    def flush(self, group: str, stream: str, path: Path) -> None: ...


class JobFailed(Exception):
    """The job cannot go on; the message is its FailureReason."""


@dataclass(frozen=True)
class JobEnvelope:
    """What an instance type gives a job's host: its CPUs (``SM_NUM_CPUS``) and memory (a host whose processes
    hold more resident memory is killed and the job fails "out of memory")."""

    instance_type: str
    vcpus: int
    memory_bytes: int | None


MEMORY_POLL_S = 0.25  # how often a host's resident memory is read against its envelope


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
                    os.killpg(run.proc.pid, signal.SIGKILL)
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


def _extract(archive: Path, dest: Path) -> None:
    with tarfile.open(archive) as tar:
        tar.extractall(dest, filter="data")  # refuses absolute paths, .., links out of dest


def _tar(folders: Sequence[Path], archive: Path) -> None:
    """The files of ``folders`` in one archive; where several hold the same path, the first one's."""
    seen: set[str] = set()
    with tarfile.open(archive, "w:gz") as tar:
        for folder in folders:
            for item in sorted(folder.rglob("*")):
                arcname = item.relative_to(folder).as_posix()
                if arcname in seen:
                    continue
                seen.add(arcname)
                tar.add(item, arcname=arcname, recursive=False)


def _ml(job_dir: Path, host: str) -> Path:
    """A host's ``/opt/ml`` on this machine (the first host's keeps the single-host name)."""
    return job_dir / "ml" if host == contract.HOST else job_dir / f"ml-{host}"


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


def free_port() -> int:
    """A loopback port no one listens on now, for the hosts' rendezvous."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _last_line(path: Path) -> str:
    try:
        with path.open("rb") as f:
            f.seek(max(0, path.stat().st_size - 8192))
            lines = [ln for ln in f.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""


async def _watch_memory(proc: asyncio.subprocess.Process, envelope: JobEnvelope, run: Running) -> None:
    limit = envelope.memory_bytes
    assert limit is not None
    while proc.returncode is None:
        rss = rss_bytes(proc.pid)
        if rss is not None and rss > limit:
            run.out_of_memory = (
                f"OutOfMemoryError: out of memory: the job's processes held {rss / 2**30:.2f} GiB resident, over "
                f"the {limit / 2**30:.2f} GiB of its instance type {envelope.instance_type}"
            )
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
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
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(asyncio.shield(waiter), grace_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await waiter
    return proc.returncode or 0, True


def sandbox_env(extra: Mapping[str, str]) -> dict[str, str]:
    """A job's environment: a plain PATH with servekit's Python first as ``python``/``python3`` (BIN), then
    ``extra``."""
    return {
        "PATH": f"{sandbox.BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": "/tmp",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        **extra,
    }


CHECKPOINTS = f"{contract.ML}/checkpoints"
SITE = "/opt/servekit/site"  # what a job's requirements.txt installed, on its PYTHONPATH
INSTALL_LIMIT_S = 1800.0
NO_INSTALLS = "start servekit up with --allow-installs to install a job's requirements.txt"
XGBOOST_ALGORITHM = "servekit.training.algorithms.xgboost_algorithm"
_EVAL_LINE = re.compile(r"^\[\d+\]\t(.*)$", re.MULTILINE)
_EVAL_ITEM = re.compile(r"(\w+)-([\w@.:-]+?):([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)")


def evaluation_metrics(text: str, when: float) -> list[dict[str, Any]]:
    """A built-in algorithm's metrics as SageMaker names them (``train:rmse``), from its last evaluation line
    (``[9]\ttrain-rmse:0.12\tvalidation-rmse:0.31``)."""
    lines = _EVAL_LINE.findall(text)
    if not lines:
        return []
    return [
        {"MetricName": f"{channel}:{metric}", "Value": float(value), "Timestamp": when}
        for channel, metric, value in _EVAL_ITEM.findall(lines[-1])
    ]


def final_metrics(definitions: list[Mapping[str, str]], text: str, when: float) -> list[dict[str, Any]]:
    """``MetricDefinitions`` over the job's log: each metric's last match (its first group, else the match)."""
    out = []
    for d in definitions:
        values = metric_values(d["Regex"], text)
        if values:
            out.append({"MetricName": d["Name"], "Value": values[-1], "Timestamp": when})
    return out


class SandboxJobRunner:
    """What a runner of sandboxed jobs holds (training, processing): their state, files, log shipper, interpreter,
    the jobs running now and how they are stopped."""

    FOLDER = "jobs"  # under the home: one folder per job

    def __init__(
        self,
        jobs: SageMakerJobs,
        home: Path,
        files: JobFiles,
        logs: JobLogs,
        python: str,
        environment: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        stop_grace_s: float = STOP_GRACE_S,
        envelopes: Callable[[str], JobEnvelope | None] | None = None,
        images: ImageTable | None = None,
        metrics: MetricSink | None = None,
        allow_installs: bool = False,
        launch: Launcher | None = None,
    ) -> None:
        self.jobs = jobs
        self.launch = launch  # where hosts run: None = here; on Ray, no pinning to this machine's CPUs
        self.allow_installs = allow_installs  # pip install a script's requirements.txt (servekit up --allow-installs)
        self.metrics = metrics  # where a training job's MetricDefinitions matches go (CloudWatch), as they appear
        self.envelopes = envelopes or (lambda _: None)
        self.images = images or ImageTable([home / "images.yaml"])
        self.root = home / self.FOLDER
        self.home = home
        self.files = files
        self.logs = logs
        self.python = python
        self.environment = dict(environment or {})
        self.clock = clock
        self.stop_grace_s = stop_grace_s
        self.running: dict[str, Running] = {}
        self._next_cpu = 0  # where the next pinned host's CPUs start

    def image(self, uri: str) -> Image:
        """The job's image, or the job fails (an images file broken or changed since the job was accepted)."""
        try:
            image = self.images.resolve(uri)
        except ConfigError as exc:
            raise JobFailed(f"ClientError: {exc}") from None
        if image is None:
            raise JobFailed(f"ClientError: {unknown_image(uri)}")
        return image

    def envelope(self, instance_type: str) -> JobEnvelope | None:
        return self.envelopes(instance_type) if instance_type else None

    def pinned(self, argv: list[str], envelope: JobEnvelope | None) -> list[str]:
        """``argv`` on the envelope's vCPUs of the CPUs this process may use (``taskset``), each host of each job
        starting where the last one ended, so that hosts spread over the machine; as is when the type has as many
        vCPUs as there are CPUs, or taskset is missing (the job then shares every CPU)."""
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        taskset = shutil.which("taskset")
        if self.launch is not None or envelope is None or taskset is None or not 0 < envelope.vcpus < len(allowed):
            return argv
        chosen = [allowed[(self._next_cpu + i) % len(allowed)] for i in range(envelope.vcpus)]
        self._next_cpu = (self._next_cpu + envelope.vcpus) % len(allowed)
        return [taskset, "--cpu-list", ",".join(map(str, sorted(chosen))), *argv]

    def cpus(self, envelope: JobEnvelope | None) -> int:
        """``SM_NUM_CPUS``: the instance type's vCPUs (this machine's CPUs for a type without an envelope)."""
        return envelope.vcpus if envelope is not None else os.cpu_count() or 1

    def stop(self, name: str, reason: str = "") -> bool:
        run = self.running.get(name)
        if run is None:
            return False
        run.reason = reason
        run.stop.set()
        return True


class TrainingRunner(SandboxJobRunner):
    FOLDER = "training"
    checkpoint_sync_s = SYNC_S

    # ---- status ----------------------------------------------------------------------------------------------
    def _move(
        self,
        name: str,
        secondary: SecondaryStatus,
        message: str,
        status: TrainingJobStatus | None = None,
        reason: str | None = None,
        details: Mapping[str, Any] | None = None,
    ) -> None:
        row = self.jobs.get(KIND, name)
        assert row is not None
        if status is not None and status.value != row.status:
            check_transition(TrainingJobStatus(row.status), status)
        now = self.clock()
        transitions = list(row.details.get("SecondaryStatusTransitions", []))
        if transitions and "EndTime" not in transitions[-1]:
            transitions[-1]["EndTime"] = now
        transitions.append({"Status": secondary.value, "StartTime": now, "StatusMessage": message})
        final = status is not None and status.terminal
        if final:
            transitions[-1]["EndTime"] = now
        self.jobs.update(
            KIND,
            name,
            status=status.value if status is not None else None,
            secondary=secondary.value,
            reason=reason,
            details={"SecondaryStatusTransitions": transitions, **(details or {})},
            final=final,
        )

    def log_path(self, name: str, host: str = contract.HOST) -> Path:
        """Where a job's host's log grows (the first host's: the one metrics are read from)."""
        return self.root / name / f"{host}.log"

    # ---- a job -----------------------------------------------------------------------------------------------
    async def run(self, name: str) -> None:
        run = self.running[name] = Running()
        try:
            await self._run(name, run)
        except JobFailed as exc:
            self._move(
                name, SecondaryStatus.FAILED, str(exc)[:_FAILURE_MAX], TrainingJobStatus.FAILED, str(exc)[:_FAILURE_MAX]
            )
        except asyncio.CancelledError:  # servekit up is stopping: the sandbox dies with it
            run.kill()
            with contextlib.suppress(Exception):
                self._move(
                    name,
                    SecondaryStatus.FAILED,
                    "servekit up stopped while the job ran",
                    TrainingJobStatus.FAILED,
                    "servekit up stopped while the job ran; start the job again",
                )
            raise
        except Exception as exc:
            log.exception("training job %s failed in servekit", name)
            self._move(
                name,
                SecondaryStatus.FAILED,
                "internal error",
                TrainingJobStatus.FAILED,
                f"InternalServerError: {exc}"[:_FAILURE_MAX],
            )
        finally:
            self.running.pop(name, None)

    async def _run(self, name: str, run: Running) -> None:
        row = self.jobs.get(KIND, name)
        assert row is not None
        req = row.request
        script = contract.script_of(req.get("HyperParameters") or {})  # None: a built-in algorithm
        job_dir = self.root / name
        hosts = contract.hosts(req)
        self._move(name, SecondaryStatus.DOWNLOADING, "Downloading input data")
        channels = await asyncio.to_thread(self._prepare, req, script, job_dir, hosts)
        if run.stop.is_set():
            self._move(
                name,
                SecondaryStatus.STOPPED,
                "Stopped before training",
                TrainingJobStatus.STOPPED,
                run.reason or "Stopped by the user",
            )
            return
        logs = {self.log_path(name, host): f"{name}/{host}-{int(self.clock())}" for host in hosts}
        for log_path, stream in logs.items():
            self.logs.register(LOG_GROUP, stream, log_path)
        started = self.clock()
        self._move(
            name,
            SecondaryStatus.TRAINING,
            "Training image download completed. Training in progress.",
            TrainingJobStatus.IN_PROGRESS,
            details={"TrainingStartTime": started},
        )
        try:
            codes, stopped = await self._train(req, script, job_dir, hosts, channels, run)
        finally:
            for log_path, stream in logs.items():
                await asyncio.to_thread(self.logs.flush, LOG_GROUP, stream, log_path)
                self.logs.unregister(log_path)
        ended = self.clock()
        times = {"TrainingEndTime": ended, "TrainingTimeInSeconds": max(1, int(ended - started))}
        times["BillableTimeInSeconds"] = times["TrainingTimeInSeconds"]
        if stopped:  # a stopped job keeps what its log says (SageMaker reports a stopped job's metrics too)
            timed_out = run.reason == "MaxRuntimeExceeded"
            first_log = self.log_path(name)
            text = first_log.read_text(errors="replace") if first_log.exists() else ""
            definitions = (req.get("AlgorithmSpecification") or {}).get("MetricDefinitions") or []
            self._move(
                name,
                SecondaryStatus.MAX_RUNTIME_EXCEEDED if timed_out else SecondaryStatus.STOPPED,
                "Training job stopped",
                TrainingJobStatus.STOPPED,
                "Training job reached the MaxRuntimeInSeconds of its StoppingCondition" if timed_out else run.reason,
                {**times, "FinalMetricDataList": final_metrics(definitions, text, ended)},
            )
            return
        for host, (rc, host_stopped), host_run in zip(hosts, codes, run.hosts, strict=True):
            if rc == 0 or host_stopped:  # stopped because another host failed
                continue
            failure = _ml(job_dir, host) / "output" / "failure"
            text = host_run.failure(rc)
            text = text or (failure.read_text(errors="replace").strip() if failure.is_file() else "")
            last = _last_line(job_dir / f"{host}.log") or "the script failed"
            on = f" on {host}" if len(hosts) > 1 else ""
            raise JobFailed(text or f"AlgorithmError: {last}, exit code: {rc}{on}")
        self._move(name, SecondaryStatus.UPLOADING, "Uploading generated training model", details=times)
        artifacts = await asyncio.to_thread(self._upload, req, name, job_dir, hosts)
        first_log = self.log_path(name)
        text = first_log.read_text(errors="replace") if first_log.exists() else ""
        metrics = final_metrics((req.get("AlgorithmSpecification") or {}).get("MetricDefinitions") or [], text, ended)
        if script is None:  # a built-in algorithm: SageMaker knows its metrics (train:rmse, validation:auc, ...)
            known = {m["MetricName"] for m in metrics}
            metrics += [m for m in evaluation_metrics(text, ended) if m["MetricName"] not in known]
        self._move(
            name,
            SecondaryStatus.COMPLETED,
            "Training job completed",
            TrainingJobStatus.COMPLETED,
            details={"ModelArtifacts": {"S3ModelArtifacts": artifacts}, "FinalMetricDataList": metrics},
        )

    def _prepare(
        self, req: Mapping[str, Any], script: contract.Script | None, job_dir: Path, hosts: Sequence[str]
    ) -> dict[str, dict[str, Path]]:
        """Each host's ``/opt/ml`` and, per host, each channel's folder (the same one, or the host's shard of a
        ``ShardedByS3Key`` channel: every N-th object by key)."""
        for host in hosts:
            ml = _ml(job_dir, host)
            for sub in ("input/config", "model", "output/data", "output/intermediate", "checkpoints"):
                (ml / sub).mkdir(parents=True, exist_ok=True)
            for fname, doc in contract.config_files(req, host).items():
                (ml / "input" / "config" / fname).write_text(json.dumps(doc, indent=2))
        channels: dict[str, dict[str, Path]] = {host: {} for host in hosts}
        for ch in req.get("InputDataConfig") or []:
            source = (ch.get("DataSource") or {}).get("S3DataSource") or {}
            uri = source.get("S3Uri", "")
            target = job_dir / "channels" / ch["ChannelName"]
            try:
                self.files.fetch(uri, target)
            except (OSError, ValueError) as exc:
                raise JobFailed(f"ClientError: channel {ch['ChannelName']}: {exc}") from None
            sharded = source.get("S3DataDistributionType") == "ShardedByS3Key" and len(hosts) > 1
            folders = shards(target, len(hosts)) if sharded else [target] * len(hosts)
            for host, folder in zip(hosts, folders, strict=True):
                channels[host][ch["ChannelName"]] = folder
        code = job_dir / "code"
        code.mkdir(parents=True, exist_ok=True)
        if script is None:
            return channels
        if script.submit_directory:
            source_dir = job_dir / "source"
            try:
                self.files.fetch(script.submit_directory, source_dir)
            except (OSError, ValueError) as exc:
                raise JobFailed(f"ClientError: sagemaker_submit_directory {script.submit_directory}: {exc}") from None
            archives = [p for p in source_dir.rglob("*") if p.is_file()]
            for archive in archives:
                try:
                    _extract(archive, code)
                except (tarfile.TarError, OSError) as exc:
                    raise JobFailed(
                        f"ClientError: the source archive {archive.name} cannot be unpacked: {exc}"
                    ) from None
        if not (code / script.program).is_file():
            raise JobFailed(f"ClientError: the entry point {script.program} is not in the source directory")
        return channels

    async def _train(
        self,
        req: Mapping[str, Any],
        script: contract.Script | None,
        job_dir: Path,
        hosts: Sequence[str],
        channels: Mapping[str, Mapping[str, Path]],
        run: Running,
    ) -> tuple[list[tuple[int, bool]], bool]:
        try:
            bwrap = sandbox.bwrap()
        except sandbox.SandboxUnavailable as exc:
            raise JobFailed(f"ClientError: {exc}") from None
        image = self.image(str((req.get("AlgorithmSpecification") or {}).get("TrainingImage") or ""))
        python = image.python or self.python
        if image.own:
            argv = list(image.command)
        elif script is None:  # the built-in algorithm is servekit's own module
            python = self.python
            argv = [python, "-u", "-m", XGBOOST_ALGORITHM]
        else:
            argv = [python, "-u", f"{contract.CODE}/{script.program}", *script.args]
        error, warning = await asyncio.to_thread(framework_check, image, python)
        if error:
            raise JobFailed(f"ClientError: {error}")
        if warning:
            for host in hosts:
                with (job_dir / f"{host}.log").open("a") as f:
                    f.write(warning + "\n")
        bin_dir = sandbox.python_wrappers(job_dir / "bin", python)
        hosts_file = sandbox.hosts_file(job_dir / "etc" / "hosts", hosts)
        site = None
        if script is not None and (job_dir / "code" / "requirements.txt").is_file():
            if not self.allow_installs:
                for host in hosts:
                    with (job_dir / f"{host}.log").open("a") as f:
                        f.write(f"servekit: {contract.CODE}/requirements.txt not installed ({NO_INSTALLS})\n")
            else:
                site = job_dir / "site"
                if await self._install(job_dir, hosts[0], python, bwrap, bin_dir, site, run):
                    return [(0, True)] * len(hosts), True
        port = free_port()
        envelope = self.envelope(str((req.get("ResourceConfig") or {}).get("InstanceType") or ""))
        checkpoint = req.get("CheckpointConfig") or {}
        local = str(checkpoint.get("LocalPath") or CHECKPOINTS)
        if not local.startswith("/") or ".." in local.split("/"):
            raise JobFailed(f"ClientError: CheckpointConfig.LocalPath {local!r} must be an absolute path")
        commands = []
        for host in hosts:
            ckpt = _ml(job_dir, host) / "checkpoints"
            layout = sandbox.Layout(
                _ml(job_dir, host),
                channels[host],
                job_dir / "code",
                hidden=[self.home],
                bin=bin_dir,
                hostname=host,
                hosts_file=hosts_file,
                mounts=[
                    *([(ckpt, local, True)] if local != CHECKPOINTS else []),
                    *([(site, SITE, False)] if site is not None else []),
                ],
            )
            sm = contract.environment(req, script, self.cpus(envelope), host, port)
            if site is not None:  # what requirements.txt installed, after the source directory
                sm["PYTHONPATH"] = f"{contract.CODE}:{SITE}"
            env = sandbox_env({**self.environment, **sm})
            commands.append((self.pinned(sandbox.command(layout, argv, bwrap), envelope), env, job_dir / f"{host}.log"))
        limit = float((req.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds") or 86400)
        definitions = (req.get("AlgorithmSpecification") or {}).get("MetricDefinitions") or []
        follower = None
        if self.metrics is not None and definitions:
            logs = [job_dir / f"{host}.log" for host in hosts]
            follower = MetricFollower(str(req["TrainingJobName"]), definitions, logs, self.metrics)
        with self._following(follower):
            return await self._run_with_checkpoints(req, job_dir, hosts, commands, limit, run, envelope)

    async def _install(
        self, job_dir: Path, host: str, python: str, bwrap: str, bin_dir: Path, site: Path, run: Running
    ) -> bool:
        """``pip install -r requirements.txt`` into ``site`` in the sandbox (its output in the first host's log, as
        the containers print it), for every host to import; True when the job was stopped meanwhile."""
        site.mkdir(parents=True, exist_ok=True)
        layout = sandbox.Layout(
            _ml(job_dir, host), code=job_dir / "code", hidden=[self.home], bin=bin_dir, mounts=[(site, SITE, True)]
        )
        argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--target", SITE]
        argv += ["-r", f"{contract.CODE}/requirements.txt"]
        log_path = job_dir / f"{host}.log"
        env = sandbox_env({**self.environment, "PIP_NO_CACHE_DIR": "1"})
        rc, stopped = await run_sandboxed(
            sandbox.command(layout, argv, bwrap), env, log_path, INSTALL_LIMIT_S, run, self.stop_grace_s
        )
        if stopped:
            if run.reason == "MaxRuntimeExceeded" and not run.stop.is_set():
                raise JobFailed(f"ClientError: installing requirements.txt took over {INSTALL_LIMIT_S:.0f} s")
            return True
        if rc != 0:
            raise JobFailed(
                f"ClientError: installing requirements.txt failed: {_last_line(log_path) or 'pip failed'} "
                f"(exit code {rc})"
            )
        return False

    @contextlib.contextmanager
    def _following(self, follower: MetricFollower | None) -> Iterator[None]:
        """Metrics from the logs while the block runs, and what the logs hold at its end."""
        if follower is None:
            yield
            return

        async def follow() -> None:
            while True:
                await asyncio.sleep(METRICS_POLL_S)
                follower.read(self.clock())

        task = asyncio.create_task(follow())
        try:
            yield
        finally:
            task.cancel()
            follower.read(self.clock(), final=True)

    async def _run_with_checkpoints(
        self,
        req: Mapping[str, Any],
        job_dir: Path,
        hosts: Sequence[str],
        commands: Sequence[tuple[list[str], Mapping[str, str], Path]],
        limit: float,
        run: Running,
        envelope: JobEnvelope | None,
    ) -> tuple[list[tuple[int, bool]], bool]:
        checkpoint = req.get("CheckpointConfig") or {}
        if not checkpoint.get("S3Uri"):
            return await run_hosts(commands, limit, run, self.stop_grace_s, envelope, self.launch)
        sync = FolderSync(self.files, str(checkpoint["S3Uri"]), [_ml(job_dir, h) / "checkpoints" for h in hosts])
        try:
            await asyncio.to_thread(sync.restore)
        except (OSError, ValueError) as exc:
            raise JobFailed(f"ClientError: CheckpointConfig.S3Uri {checkpoint['S3Uri']}: {exc}") from None
        keeper = asyncio.create_task(sync.keep_in_step(self.checkpoint_sync_s))
        try:
            return await run_hosts(commands, limit, run, self.stop_grace_s, envelope, self.launch)
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError, ValueError):
                await keeper
            try:
                await asyncio.to_thread(sync.sync)  # whatever the end: the last checkpoints are kept
            except (OSError, ValueError):
                log.warning("checkpoints of %s not uploaded to %s", job_dir.name, checkpoint["S3Uri"], exc_info=True)

    def _upload(self, req: Mapping[str, Any], name: str, job_dir: Path, hosts: Sequence[str]) -> str:
        """``/opt/ml/model`` (and ``/opt/ml/output/data``) of every host in one archive each, the first host's file
        where two hosts wrote the same name."""
        base = str((req.get("OutputDataConfig") or {}).get("S3OutputPath", "")).rstrip("/")
        model_uri = f"{base}/{name}/output/model.tar.gz"
        archive = job_dir / "model.tar.gz"
        _tar([_ml(job_dir, h) / "model" for h in hosts], archive)
        self.files.put_file(model_uri, archive, "application/x-tar")
        outputs = [_ml(job_dir, h) / "output" / "data" for h in hosts]
        if any(any(o.iterdir()) for o in outputs):
            out_archive = job_dir / "output.tar.gz"
            _tar(outputs, out_archive)
            self.files.put_file(f"{base}/{name}/output/output.tar.gz", out_archive, "application/x-tar")
        return model_uri
