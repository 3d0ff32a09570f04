"""One processing job, as SageMaker runs it: each ``ProcessingInput`` at its ``LocalPath`` (read-only, linked from the
plane's S3), each output folder at its ``LocalPath`` (writable), ``/opt/ml/config/processingjobconfig.json`` and
``resourceconfig.json``, the container's entrypoint and arguments run in the sandbox (``python3`` is servekit's
Python), the log in ``/aws/sagemaker/ProcessingJobs``, the outputs uploaded at the end, the stopping condition and
StopProcessingJob honoured."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from servekit.processing.lifecycle import ProcessingJobStatus, check_transition
from servekit.training import sandbox
from servekit.training.images import Image
from servekit.training.runner import JobFailed, Running, SandboxJobRunner, run_sandboxed, sandbox_env

log = logging.getLogger(__name__)

KIND = "processing"
LOG_GROUP = "/aws/sagemaker/ProcessingJobs"
PREFIX = "/opt/ml/processing/"
_FAILURE_MAX = 1024


def _last_line(path: Path) -> str:
    try:
        text = path.read_bytes()[-8192:].decode("utf-8", "replace")
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1].strip() if lines else ""


class ProcessingRunner(SandboxJobRunner):
    FOLDER = "processing"

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
        mounts, outputs = await asyncio.to_thread(self._prepare, req, job_dir)
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
        log_path = job_dir / "algo-1.log"
        stream = f"{name}/algo-1-{int(self.clock())}"
        self.logs.register(LOG_GROUP, stream, log_path)
        started = self.clock()
        self.jobs.update(KIND, name, details={"ProcessingStartTime": started})
        layout = sandbox.Layout(
            job_dir / "ml",
            hidden=[self.home],
            mounts=mounts,
            bin=sandbox.python_wrappers(job_dir / "bin", python),
        )
        env = sandbox_env({**self.environment, **{str(k): str(v) for k, v in (req.get("Environment") or {}).items()}})
        limit = float((req.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds") or 86400)
        cluster = (req.get("ProcessingResources") or {}).get("ClusterConfig") or {}
        envelope = self.envelope(str(cluster.get("InstanceType") or ""))
        try:
            rc, stopped = await run_sandboxed(
                sandbox.command(layout, argv, bwrap), env, log_path, limit, run, self.stop_grace_s, envelope
            )
        finally:
            await asyncio.to_thread(self.logs.flush, LOG_GROUP, stream, log_path)
            self.logs.unregister(log_path)
        ended = self.clock()
        if stopped:
            reason = "The job reached its MaxRuntimeInSeconds" if run.reason == "MaxRuntimeExceeded" else ""
            self._set(name, ProcessingJobStatus.STOPPED, reason, ProcessingEndTime=ended)
            return
        if rc != 0:
            # what the job wrote for SageMaker: /opt/ml/output/message (processing), or failure (as training)
            written = [job_dir / "ml" / "output" / n for n in ("message", "failure")]
            text = run.failure(rc) or next((p.read_text(errors="replace").strip() for p in written if p.is_file()), "")
            raise JobFailed(text or f"AlgorithmError: {_last_line(log_path) or 'the command failed'}, exit code: {rc}")
        await asyncio.to_thread(self._upload, outputs)
        self._set(name, ProcessingJobStatus.COMPLETED, ProcessingEndTime=self.clock())

    def _prepare(
        self, req: Mapping[str, Any], job_dir: Path
    ) -> tuple[list[tuple[Path, str, bool]], list[tuple[Path, str]]]:
        ml = job_dir / "ml"
        (ml / "config").mkdir(parents=True, exist_ok=True)
        (ml / "output").mkdir(parents=True, exist_ok=True)
        (ml / "config" / "processingjobconfig.json").write_text(json.dumps(dict(req), indent=2, default=str))
        resource = {"current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": "eth0"}
        (ml / "config" / "resourceconfig.json").write_text(json.dumps(resource))
        mounts: list[tuple[Path, str, bool]] = []
        for i, item in enumerate(req.get("ProcessingInputs") or []):
            source = item.get("S3Input")
            if source is None:
                raise JobFailed(f"ClientError: input {item.get('InputName')}: only S3Input is supported")
            local = str(source["LocalPath"])
            folder = job_dir / "inputs" / str(i)
            try:
                self.files.fetch(source["S3Uri"], folder)
            except (OSError, ValueError) as exc:
                raise JobFailed(f"ClientError: input {item.get('InputName')}: {exc}") from None
            mounts.append((folder, local, False))
        outputs: list[tuple[Path, str]] = []
        for i, item in enumerate((req.get("ProcessingOutputConfig") or {}).get("Outputs") or []):
            target = item.get("S3Output")
            if target is None:
                raise JobFailed(f"ClientError: output {item.get('OutputName')}: only S3Output is supported")
            folder = job_dir / "outputs" / str(i)
            folder.mkdir(parents=True, exist_ok=True)
            mounts.append((folder, str(target["LocalPath"]), True))
            outputs.append((folder, str(target["S3Uri"]).rstrip("/")))
        return nest(mounts), outputs

    def _upload(self, outputs: list[tuple[Path, str]]) -> None:
        for folder, uri in outputs:
            for path in sorted(p for p in folder.rglob("*") if p.is_file()):
                rel = path.relative_to(folder).as_posix()
                try:
                    self.files.put_file(f"{uri}/{rel}", path)
                except (OSError, ValueError) as exc:
                    raise JobFailed(f"ClientError: uploading {rel} to {uri}: {exc}") from None


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
