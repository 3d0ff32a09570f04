"""One processing job, as SageMaker runs it: each ``ProcessingInput`` at its ``LocalPath`` (read-only, linked from the
plane's S3), each output folder at its ``LocalPath`` (writable), ``/opt/ml/config/processingjobconfig.json`` and
``resourceconfig.json``, the container's entrypoint and arguments run in the sandbox (``python3`` is servekit's
Python), the log in ``/aws/sagemaker/ProcessingJobs``, the outputs uploaded at the end, the stopping condition and
StopProcessingJob honoured."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servekit._utils.files import read_beneath
from servekit.accelerators.inventory import VISIBLE_ENV
from servekit.services.processing.lifecycle import ProcessingJobStatus, check_transition
from servekit.services.training import contract, sandbox
from servekit.services.training.folder_sync import SYNC_S, FolderSync
from servekit.services.training.hosts import (
    Running,
    gpu_device_nodes,
    last_line,
    ml_dir,
    run_hosts,
    sandbox_env,
    shards,
)
from servekit.services.training.images import Image
from servekit.services.training.inputs import fetch_input
from servekit.services.training.job_files import volume_bytes
from servekit.services.training.runner import REASON_BYTES, JobFailed, SandboxJobRunner

log = logging.getLogger(__name__)

KIND = "processing"
LOG_GROUP = "/aws/sagemaker/ProcessingJobs"
PREFIX = "/opt/ml/processing/"
_FAILURE_MAX = 1024


DEFAULT_MAX_RUNTIME_S = 86400  # a job's MaxRuntimeInSeconds when its request gives none, as AWS's


class ProcessingRunner(SandboxJobRunner):
    FOLDER = "processing"
    sync_s = SYNC_S  # how often Continuous outputs are uploaded

    def _set(self, name: str, status: ProcessingJobStatus, reason: str | None = None, **details: Any) -> None:
        row = self.jobs.get(KIND, name)
        assert row is not None
        if status.value != row.status:
            check_transition(ProcessingJobStatus(row.status), status)
        self.jobs.update(KIND, name, status=status.value, reason=reason, details=details, final=status.terminal)

    async def run(self, name: str) -> None:
        run = self.running[name] = Running()
        try:
            await self._run(name, run)
        except JobFailed as exc:
            self._set(name, ProcessingJobStatus.FAILED, str(exc)[:_FAILURE_MAX], ProcessingEndTime=self.clock())
        except asyncio.CancelledError:
            reason = "servekit up stopped while the job ran; start the job again"
            self._set(name, ProcessingJobStatus.FAILED, reason, ProcessingEndTime=self.clock())
            raise
        except Exception as exc:
            log.exception("processing job %s failed in servekit", name)
            self._set(name, ProcessingJobStatus.FAILED, f"InternalServerError: {exc}"[:_FAILURE_MAX])
        finally:
            self.running.pop(name, None)

    async def _run(self, name: str, run: Running) -> None:
        row = self.jobs.get(KIND, name)
        assert row is not None
        req = row.request
        job_dir = self.root / name
        cluster = (req.get("ProcessingResources") or {}).get("ClusterConfig") or {}
        hosts = contract.hosts({"ResourceConfig": cluster})
        mounts, outputs = await asyncio.to_thread(self._prepare, req, job_dir, hosts)
        if run.stop.is_set():
            self._set(name, ProcessingJobStatus.STOPPED, run.reason or "Stopped by the user")
            return
        try:
            bwrap = sandbox.bwrap()
        except sandbox.SandboxUnavailable as exc:
            raise JobFailed(f"ClientError: {exc}") from None
        app = req["AppSpecification"]
        entrypoint = list(app.get("ContainerEntrypoint") or [])
        try:
            image: Image | None = self.image(str(app.get("ImageUri") or ""))
        except JobFailed:
            if not entrypoint:
                raise
            image = None  # an image nothing maps: its entrypoint runs with servekit's Python
        python = (image.python if image else None) or self.python
        argv = [*(entrypoint or (image.command if image else ())), *(app.get("ContainerArguments") or [])]
        if not argv:
            raise JobFailed(
                "ClientError: AppSpecification has no ContainerEntrypoint; servekit runs the command the job names "
                "(the SDK's processors always give one)"
            )
        logs = {job_dir / f"{host}.log": f"{name}/{host}-{int(self.clock())}" for host in hosts}
        for log_path, stream in logs.items():
            self.logs.register(LOG_GROUP, stream, log_path)
        started = self.clock()
        self.jobs.update(KIND, name, details={"ProcessingStartTime": started})
        bin_dir = sandbox.python_wrappers(job_dir / "bin", python)
        hosts_file = sandbox.hosts_file(job_dir / "etc" / "hosts", hosts)
        runtime = await self.runtime(python)
        filter_file = sandbox.seccomp_file(job_dir / "etc")
        own = {str(k): str(v) for k, v in (req.get("Environment") or {}).items()}
        envelope = self.envelope(str(cluster.get("InstanceType") or ""))
        isolated = bool((req.get("NetworkConfig") or {}).get("EnableNetworkIsolation"))
        async with self.network(isolated, job_dir) as net:  # every host in it
            with contextlib.ExitStack() as stack:
                try:
                    held = self.hold_gpus(stack, name, hosts, envelope)
                    creds = stack.enter_context(self.role_session(req, name))
                except JobFailed:
                    for log_path in logs:
                        self.logs.unregister(log_path)
                    raise
                env = sandbox_env({**self.environment, **creds, **own})
                commands, layouts = [], []
                for host in hosts:
                    layout = sandbox.Layout(
                        ml_dir(job_dir, host),
                        hidden=[self.home],
                        mounts=mounts[host],
                        bin=bin_dir,
                        hostname=host,
                        hosts_file=hosts_file,
                        devices=gpu_device_nodes(held.get(host, ())),
                        runtime=runtime,
                        network=not isolated,
                        net=net,
                        seccomp=filter_file,
                        tmp_bytes=volume_bytes(cluster),
                        cgroup=self.process_group(stack, name, host, envelope),
                        nproc=self.process_limit(envelope),
                    )
                    host_env = {**env, VISIBLE_ENV: ",".join(map(str, held[host]))} if host in held else env
                    layouts.append(layout)
                    commands.append(
                        (self.pinned(self.sandboxed(layout, argv, bwrap), envelope), host_env, job_dir / f"{host}.log")
                    )
                limit = float((req.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds") or DEFAULT_MAX_RUNTIME_S)
                continuous = [
                    FolderSync(self.files, uri, folders) for uri, folders, mode in outputs if mode == "Continuous"
                ]
                keepers = [asyncio.create_task(sync.keep_in_step(self.sync_s)) for sync in continuous]
                try:
                    await self.hand_over(layouts)
                    codes, stopped = await run_hosts(commands, limit, run, self.stop_grace_s, envelope, self.launch)
                finally:
                    for keeper in keepers:
                        keeper.cancel()
                    await asyncio.gather(*keepers, return_exceptions=True)
                    for log_path, stream in logs.items():
                        await asyncio.to_thread(self.logs.flush, LOG_GROUP, stream, log_path)
                        self.logs.unregister(log_path)
        for sync in continuous:  # whatever the end, as SageMaker's continuous upload has it
            await asyncio.to_thread(self._sync, sync)
        ended = self.clock()
        if stopped:
            reason = "The job reached its MaxRuntimeInSeconds" if run.reason == "MaxRuntimeExceeded" else run.reason
            self._set(name, ProcessingJobStatus.STOPPED, reason, ProcessingEndTime=ended)
            return
        for host, (rc, host_stopped), host_run in zip(hosts, codes, run.hosts, strict=True):
            if rc == 0 or host_stopped:  # stopped because another instance failed
                continue
            # what the job wrote for SageMaker: /opt/ml/output/message (processing), or failure (as training)
            written = (read_beneath(ml_dir(job_dir, host), f"output/{n}", REASON_BYTES) for n in ("message", "failure"))
            text = host_run.failure(rc)
            text = text or next((t.strip() for t in written if t is not None), "")
            last = last_line(job_dir / f"{host}.log") or "the command failed"
            on = f" on {host}" if len(hosts) > 1 else ""
            raise JobFailed(text or f"AlgorithmError: {last}, exit code: {rc}{on}")
        for uri, folders, mode in outputs:
            if mode != "Continuous":
                await asyncio.to_thread(self._sync, FolderSync(self.files, uri, folders))
        self._set(name, ProcessingJobStatus.COMPLETED, ProcessingEndTime=self.clock())

    @staticmethod
    def _sync(sync: FolderSync) -> None:
        try:
            sync.sync()
        except (OSError, ValueError) as exc:
            raise JobFailed(f"ClientError: uploading to {sync.uri}: {exc}") from None

    def _prepare(
        self, req: Mapping[str, Any], job_dir: Path, hosts: list[str]
    ) -> tuple[dict[str, list[tuple[Path, str, bool]]], list[tuple[str, list[Path], str]]]:
        """Each instance's mounts (its own copy of each input at their LocalPath, its own output folders) and each
        output's (S3Uri, the instances' folders, S3UploadMode)."""
        mounts: dict[str, list[tuple[Path, str, bool]]] = {host: [] for host in hosts}
        for host in hosts:
            ml = ml_dir(job_dir, host)
            (ml / "config").mkdir(parents=True, exist_ok=True)
            (ml / "output").mkdir(parents=True, exist_ok=True)
            (ml / "config" / "processingjobconfig.json").write_text(json.dumps(dict(req), indent=2, default=str))
            cluster = (req.get("ProcessingResources") or {}).get("ClusterConfig") or {}
            resource = contract.resource_config({"ResourceConfig": cluster}, host)
            (ml / "config" / "resourceconfig.json").write_text(json.dumps(resource))
        for i, item in enumerate(req.get("ProcessingInputs") or []):
            source = item.get("S3Input")
            if source is None:
                raise JobFailed(f"ClientError: input {item.get('InputName')}: only S3Input is supported")
            local = str(source["LocalPath"])
            folder = job_dir / "inputs" / str(i)
            try:
                fetch_input(self.files, source, folder)
            except (OSError, ValueError) as exc:
                raise JobFailed(f"ClientError: input {item.get('InputName')}: {exc}") from None
            sharded = source.get("S3DataDistributionType") == "ShardedByS3Key" and len(hosts) > 1
            # Writable, as a processing container's inputs are (the SDK's FrameworkProcessor unpacks its code into
            # its `code` input): each instance writes into a copy of its own.
            parts = shards(folder, len(hosts)) if sharded else [folder, *(_copy(folder, h) for h in hosts[1:])]
            for host, part in zip(hosts, parts, strict=True):
                mounts[host].append((part, local, True))
        outputs: list[tuple[str, list[Path], str]] = []
        for i, item in enumerate((req.get("ProcessingOutputConfig") or {}).get("Outputs") or []):
            target = item.get("S3Output")
            if target is None:
                raise JobFailed(f"ClientError: output {item.get('OutputName')}: only S3Output is supported")
            folders = []
            for host in hosts:
                folder = job_dir / "outputs" / str(i) / host
                folder.mkdir(parents=True, exist_ok=True)
                mounts[host].append((folder, str(target["LocalPath"]), True))
                folders.append(folder)
            outputs.append((str(target["S3Uri"]), folders, str(target.get("S3UploadMode") or "EndOfJob")))
        return {host: nest(m) for host, m in mounts.items()}, outputs


def _copy(folder: Path, host: str) -> Path:
    """An instance's own copy of an input folder, beside it."""
    copy = folder.with_name(f"{folder.name}.{host}")
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(folder, copy, symlinks=True)
    return copy


def nest(mounts: list[tuple[Path, str, bool]]) -> list[tuple[Path, str, bool]]:
    """Mounts in an order that works when one LocalPath lies inside another (the SDK puts its ``code`` input at
    ``/opt/ml/processing/input/code``, inside ``/opt/ml/processing/input``): outer ones first, and the inner one's
    mount point made in the outer one's folder beforehand (a read-only mount cannot get one later)."""
    ordered = sorted(mounts, key=lambda m: len(Path(m[1]).parts))
    for i, (_, inner, _w) in enumerate(ordered):
        for outer_dir, outer, _ in ordered[:i]:
            rel = os.path.relpath(inner, outer)
            if not rel.startswith(".."):
                (outer_dir / rel).mkdir(parents=True, exist_ok=True)
    return ordered


def local_path_problem(path: str) -> str | None:
    """Why a LocalPath cannot be used, or None: SageMaker requires paths under /opt/ml/processing/."""
    norm = os.path.normpath(path)
    if not norm.startswith(PREFIX) or ".." in Path(path).parts:
        return f"LocalPath {path} must be an absolute path under {PREFIX}"
    return None
