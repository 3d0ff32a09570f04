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
import shutil
import tarfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from servekit._utils.cgroups import pids_group
from servekit._utils.cgroups import remove as remove_cgroup
from servekit._utils.files import read_beneath
from servekit._utils.processes import free_port
from servekit.accelerators.inventory import VISIBLE_ENV
from servekit.accelerators.placement import GpuPool, GpuShortage
from servekit.aws.policy import PolicyError
from servekit.aws.sessions import SessionKeys
from servekit.errors import ConfigError
from servekit.services.training import contract, sandbox
from servekit.services.training.folder_sync import SYNC_S, FolderSync
from servekit.services.training.hosts import (
    STOP_GRACE_S,
    JobEnvelope,
    Launcher,
    Running,
    gpu_device_nodes,
    job_gpus,
    last_line,
    ml_dir,
    run_hosts,
    run_sandboxed,
    sandbox_env,
    shards,
)
from servekit.services.training.images import Image, ImageTable, framework_check, unknown_image
from servekit.services.training.inputs import fetch_input
from servekit.services.training.job_files import copy_into, extract, in_channel, tar_folders, volume_bytes
from servekit.services.training.lifecycle import SecondaryStatus, TrainingJobStatus, check_transition
from servekit.services.training.metrics import POLL_S as METRICS_POLL_S
from servekit.services.training.metrics import MetricFollower, MetricSink, evaluation_metrics, final_metrics
from servekit.services.training.network import JobNetwork, job_network, loopback_address
from servekit.services.training.roles import RoleDocuments, role_policy
from servekit.services.training.store import SageMakerJobs

log = logging.getLogger(__name__)

KIND = "training"
LOG_GROUP = "/aws/sagemaker/TrainingJobs"
_FAILURE_MAX = 1024


class JobFiles(Protocol):
    """``s3://`` objects for jobs (servekit.services.s3.objects.Objects)."""

    def fetch(self, uri: str, dest: Path) -> int: ...

    def put_file(self, uri: str, path: Path, content_type: str = ...) -> str: ...


class JobLogs(Protocol):
    """Where a job's output goes (the CloudWatch Logs shipper, adapted by the launch layer)."""

    def register(self, group: str, stream: str, path: Path) -> None: ...

    def unregister(self, path: Path) -> None: ...

    def flush(self, group: str, stream: str, path: Path) -> None: ...


class JobFailed(Exception):
    """The job cannot go on; the message is its FailureReason."""


CHECKPOINTS = f"{contract.ML}/checkpoints"
SITE = "/opt/servekit/site"  # what a job's requirements.txt installed, on its PYTHONPATH
INSTALL_LIMIT_S = 1800.0
NO_INSTALLS = "start servekit up with --allow-installs to install a job's requirements.txt"
XGBOOST_ALGORITHM = "servekit.services.training.algorithms.xgboost_algorithm"
# a job host's process limit, where a pids cgroup can be made for it: this many per vCPU of its instance type
PROCESSES_PER_VCPU = 1024
DEFAULT_VCPUS = 4  # a job without an instance type servekit knows
SESSION_SLACK_S = 3600.0  # a job's role session outlives MaxRuntimeInSeconds by this much, unless revoked first
# What is read of the file a failed job wrote for SageMaker (/opt/ml/output/failure): enough for the 1,024
# characters a FailureReason holds, in any UTF-8
REASON_BYTES = 4 * 1024


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
        gpus: GpuPool | None = None,
        sessions: SessionKeys | None = None,
        role_documents: RoleDocuments | None = None,
    ) -> None:
        self.jobs = jobs
        # where each job's role session comes from; None: jobs get ``environment``'s keys (a test's fake plane)
        self.sessions = sessions
        self.role_documents = role_documents  # the roles' policies in IAM (services.training.roles.role_policy)
        self.gpus = gpus  # the machine's GPUs, shared with the endpoints' instances (None: jobs get none here)
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

    def hold_gpus(
        self, stack: contextlib.ExitStack, job: str, hosts: Sequence[str], envelope: JobEnvelope | None
    ) -> dict[str, tuple[int, ...]]:
        """Each host's own GPUs for a job on a GPU instance type, held until ``stack`` closes (from the pool the
        endpoints' instances take theirs from); a machine short of them fails the job with a CapacityError."""
        try:
            return stack.enter_context(job_gpus(self.gpus, job, hosts, envelope))
        except GpuShortage as exc:
            raise JobFailed(f"CapacityError: {envelope.instance_type if envelope else ''} {exc}") from None

    def envelope(self, instance_type: str) -> JobEnvelope | None:
        return self.envelopes(instance_type) if instance_type else None

    @contextlib.contextmanager
    def role_session(self, req: Mapping[str, Any], name: str) -> Iterator[dict[str, str]]:
        """The job's own credentials, for its environment while it runs: a session for its RoleArn allowed what the
        role's policy allows (services.training.roles), revoked when the job ends. The home's admin key never
        reaches a job's script; without a plane's keys to replace (jobs on another S3), nothing."""
        if self.sessions is None or "AWS_ACCESS_KEY_ID" not in self.environment:
            yield {}
            return
        role = str(req.get("RoleArn") or "")
        try:
            policy = role_policy(self.home, role, req, self.role_documents)
            limit = float((req.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds") or 86400)
            key = self.sessions.mint(role, f"SageMaker-{name}"[:64], policy, limit + SESSION_SLACK_S)
        except (PolicyError, ValueError) as exc:
            raise JobFailed(f"ClientError: the job's role {role}: {exc}") from None
        try:
            yield {
                "AWS_ACCESS_KEY_ID": key.access_key_id,
                "AWS_SECRET_ACCESS_KEY": key.secret_access_key,
                "AWS_SESSION_TOKEN": key.session_token or "",
            }
        finally:
            self.sessions.revoke(key.access_key_id)

    def process_group(
        self, stack: contextlib.ExitStack, job: str, host: str, envelope: JobEnvelope | None
    ) -> Path | None:
        """The host's pids cgroup (:data:`PROCESSES_PER_VCPU` per vCPU of its instance type), removed when
        ``stack`` closes; None on Ray nodes (the group would be this machine's) and where this machine lets servekit
        make none."""
        if self.launch is not None:
            return None
        group = pids_group(f"servekit-{job}-{host}", self.process_limit(envelope))
        if group is not None:
            stack.callback(remove_cgroup, group)
        return group

    def process_limit(self, envelope: JobEnvelope | None) -> int:
        """A host's process limit: :data:`PROCESSES_PER_VCPU` per vCPU of its instance type."""
        return PROCESSES_PER_VCPU * (envelope.vcpus if envelope is not None else DEFAULT_VCPUS)

    def keyless(self) -> dict[str, str]:
        """``environment`` without the plane's keys (what a job's pip install runs with)."""
        return {k: v for k, v in self.environment.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}

    async def runtime(self, python: str) -> tuple[str, ...]:
        """The folders under /tmp or /opt that ``python`` needs in the sandbox (asked of it once, off the loop); a
        Python inside the servekit home fails the job with the reason."""
        try:
            return await asyncio.to_thread(sandbox.runtime_for, python, [self.home])
        except sandbox.SandboxUnavailable as exc:
            raise JobFailed(f"ClientError: {exc}") from None

    def sandboxed(self, layout: sandbox.Layout, argv: Sequence[str], bwrap: str) -> list[str]:
        """The sandbox command for ``argv`` (:func:`sandbox.command`), run as the jobs' user (:func:`sandbox.job_uid`);
        a machine where it cannot be fails the job with the reason."""
        try:
            return sandbox.command(layout, argv, bwrap, sandbox.job_uid())
        except sandbox.SandboxUnavailable as exc:
            raise JobFailed(f"ClientError: {exc}") from None

    def network(self, isolated: bool, job_dir: Path) -> contextlib.AbstractAsyncContextManager[JobNetwork | None]:
        """The job's network namespace (:func:`job_network`) while it runs: the plane's signed API at its
        ``AWS_ENDPOINT_URL`` (or S3's) unless ``isolated``; None for hosts on Ray nodes (each sandbox makes its own)."""
        env = self.environment
        plane = loopback_address(env.get("AWS_ENDPOINT_URL") or env.get("AWS_ENDPOINT_URL_S3") or "")
        if self.launch is not None:
            return contextlib.nullcontext(None)
        return job_network(plane, isolated, job_dir / "etc")

    async def hand_over(self, layouts: Sequence[sandbox.Layout]) -> None:
        """The hosts' folders made the job's (:func:`sandbox.hand_over`), off the loop, just before they start."""
        for layout in layouts:
            await asyncio.to_thread(sandbox.hand_over, layout, sandbox.job_uid())

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
            text = host_run.failure(rc)
            text = text or (read_beneath(ml_dir(job_dir, host), "output/failure", REASON_BYTES) or "").strip()
            last = last_line(job_dir / f"{host}.log") or "the script failed"
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
            ml = ml_dir(job_dir, host)
            for sub in ("input/config", "model", "output/data", "output/intermediate", "checkpoints"):
                (ml / sub).mkdir(parents=True, exist_ok=True)
            for fname, doc in contract.config_files(req, host).items():
                (ml / "input" / "config" / fname).write_text(json.dumps(doc, indent=2))
        channels: dict[str, dict[str, Path]] = {host: {} for host in hosts}
        for ch in req.get("InputDataConfig") or []:
            source = (ch.get("DataSource") or {}).get("S3DataSource") or {}
            target = job_dir / "channels" / ch["ChannelName"]
            try:
                fetch_input(self.files, source, target)
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
                local = in_channel(script.submit_directory, channels[hosts[0]])
                if local is None:
                    self.files.fetch(script.submit_directory, source_dir)
                else:  # network isolation: the SDK ships the code as a channel (/opt/ml/input/data/code/...)
                    copy_into(local, source_dir)
            except (OSError, ValueError) as exc:
                raise JobFailed(f"ClientError: sagemaker_submit_directory {script.submit_directory}: {exc}") from None
            archives = [p for p in source_dir.rglob("*") if p.is_file()]
            for archive in archives:
                try:
                    extract(archive, code)
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
        runtime = await self.runtime(python)
        filter_file = sandbox.seccomp_file(job_dir / "etc")
        isolated = bool(req.get("EnableNetworkIsolation"))
        async with self.network(isolated, job_dir) as net:  # every host in it, and the install before them
            site = None
            if script is not None and (job_dir / "code" / "requirements.txt").is_file():
                if not self.allow_installs:
                    for host in hosts:
                        with (job_dir / f"{host}.log").open("a") as f:
                            f.write(f"servekit: {contract.CODE}/requirements.txt not installed ({NO_INSTALLS})\n")
                else:
                    site = job_dir / "site"
                    if await self._install(job_dir, hosts[0], python, bwrap, bin_dir, site, run, runtime, net):
                        return [(0, True)] * len(hosts), True
            port = free_port()
            envelope = self.envelope(str((req.get("ResourceConfig") or {}).get("InstanceType") or ""))
            with contextlib.ExitStack() as stack:
                held = self.hold_gpus(stack, str(req["TrainingJobName"]), hosts, envelope)
                creds = stack.enter_context(self.role_session(req, str(req["TrainingJobName"])))
                checkpoint = req.get("CheckpointConfig") or {}
                local = str(checkpoint.get("LocalPath") or CHECKPOINTS)
                if not local.startswith("/") or ".." in local.split("/"):
                    raise JobFailed(f"ClientError: CheckpointConfig.LocalPath {local!r} must be an absolute path")
                commands, layouts = [], []
                for host in hosts:
                    ckpt = ml_dir(job_dir, host) / "checkpoints"
                    layout = sandbox.Layout(
                        ml_dir(job_dir, host),
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
                        devices=gpu_device_nodes(held.get(host, ())),
                        runtime=runtime,
                        network=not isolated,
                        net=net,
                        seccomp=filter_file,
                        tmp_bytes=volume_bytes(req.get("ResourceConfig") or {}),
                        cgroup=self.process_group(stack, str(req["TrainingJobName"]), host, envelope),
                        nproc=self.process_limit(envelope),
                    )
                    sm = contract.environment(req, script, self.cpus(envelope), host, port, len(held.get(host, ())))
                    if host in held:
                        sm[VISIBLE_ENV] = ",".join(str(i) for i in held[host])
                    if site is not None:  # what requirements.txt installed, after the source directory
                        sm["PYTHONPATH"] = f"{contract.CODE}:{SITE}:{contract.CONTAINER_LIBRARIES}"
                    env = sandbox_env({**self.environment, **creds, **sm})
                    layouts.append(layout)
                    commands.append(
                        (self.pinned(self.sandboxed(layout, argv, bwrap), envelope), env, job_dir / f"{host}.log")
                    )
                limit = float((req.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds") or 86400)
                definitions = (req.get("AlgorithmSpecification") or {}).get("MetricDefinitions") or []
                follower = None
                if self.metrics is not None and definitions:
                    logs = [job_dir / f"{host}.log" for host in hosts]
                    follower = MetricFollower(str(req["TrainingJobName"]), definitions, logs, self.metrics)
                with self._following(follower):
                    return await self._run_with_checkpoints(
                        req, job_dir, hosts, layouts, commands, limit, run, envelope
                    )

    async def _install(
        self,
        job_dir: Path,
        host: str,
        python: str,
        bwrap: str,
        bin_dir: Path,
        site: Path,
        run: Running,
        runtime: tuple[str, ...],
        net: JobNetwork | None = None,
    ) -> bool:
        """``pip install -r requirements.txt`` into ``site`` in the sandbox (its output in the first host's log, as
        the containers print it), for every host to import; True when the job was stopped meanwhile."""
        site.mkdir(parents=True, exist_ok=True)
        layout = sandbox.Layout(
            ml_dir(job_dir, host),
            code=job_dir / "code",
            hidden=[self.home],
            bin=bin_dir,
            mounts=[(site, SITE, True)],
            runtime=runtime,
            net=net,
            seccomp=sandbox.seccomp_file(job_dir / "etc"),
        )
        argv = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--target", SITE]
        argv += ["-r", f"{contract.CODE}/requirements.txt"]
        log_path = job_dir / f"{host}.log"
        env = sandbox_env({**self.keyless(), "PIP_NO_CACHE_DIR": "1"})
        await asyncio.to_thread(sandbox.hand_over, layout, sandbox.job_uid())
        rc, stopped = await run_sandboxed(
            self.sandboxed(layout, argv, bwrap), env, log_path, INSTALL_LIMIT_S, run, self.stop_grace_s
        )
        if stopped:
            if run.reason == "MaxRuntimeExceeded" and not run.stop.is_set():
                raise JobFailed(f"ClientError: installing requirements.txt took over {INSTALL_LIMIT_S:.0f} s")
            return True
        if rc != 0:
            raise JobFailed(
                f"ClientError: installing requirements.txt failed: {last_line(log_path) or 'pip failed'} "
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
        layouts: Sequence[sandbox.Layout],
        commands: Sequence[tuple[list[str], Mapping[str, str], Path]],
        limit: float,
        run: Running,
        envelope: JobEnvelope | None,
    ) -> tuple[list[tuple[int, bool]], bool]:
        checkpoint = req.get("CheckpointConfig") or {}
        if not checkpoint.get("S3Uri"):
            await self.hand_over(layouts)
            return await run_hosts(commands, limit, run, self.stop_grace_s, envelope, self.launch)
        sync = FolderSync(self.files, str(checkpoint["S3Uri"]), [ml_dir(job_dir, h) / "checkpoints" for h in hosts])
        try:
            await asyncio.to_thread(sync.restore)
        except (OSError, ValueError) as exc:
            raise JobFailed(f"ClientError: CheckpointConfig.S3Uri {checkpoint['S3Uri']}: {exc}") from None
        await self.hand_over(layouts)  # after the restore: the restored files become the job's
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
        tar_folders([ml_dir(job_dir, h) / "model" for h in hosts], archive)
        self.files.put_file(model_uri, archive, "application/x-tar")
        outputs = [ml_dir(job_dir, h) / "output" / "data" for h in hosts]
        if any(any(o.iterdir()) for o in outputs):
            out_archive = job_dir / "output.tar.gz"
            tar_folders(outputs, out_archive)
            self.files.put_file(f"{base}/{name}/output/output.tar.gz", out_archive, "application/x-tar")
        return model_uri
