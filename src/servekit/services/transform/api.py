"""SageMaker's batch transform job operations on ``servekit up``, over the jobs ``servekit transform run`` records
in the same home (the ``transform_jobs`` tables of the state database).

- ListTransformJobs / DescribeTransformJob answer from those rows, whoever ran the job (the CLI or this plane).
  servekit's own words are mapped onto SageMaker's: CompletedWithErrors (every object has an output, some records
  failed) is ``Completed`` with a FailureReason naming the errors file; an InProgress job whose process is gone is
  ``Failed`` (running it again with the same name resumes it). Describe adds ``ServekitStatus`` and
  ``ServekitProgress`` (objects done/failed/total, records, record errors): botocore drops them, the console and a
  raw JSON reader see them.
- CreateTransformJob runs ``servekit transform run --spec <request>`` as a **subprocess** of the plane (the plane
  knows no transform code: the run writes the shared state); ModelName is a model of this plane (CreateModel),
  whose ModelDataUrl's newest version directory the run loads. It answers once the run has recorded the job, or
  refuses with the run's own reason when it exits first (a bad request, an existing job with other settings).
- StopTransformJob sends the running process SIGINT, as Ctrl-C on ``servekit transform run`` does: in-flight
  mini-batches finish, the job ends Stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from servekit._utils.files import tail_text
from servekit._utils.processes import owner_alive, stop_children
from servekit.aws.errors import conflict, validation_exception
from servekit.aws.front import Handler
from servekit.aws.models import service_model
from servekit.aws.names import Account
from servekit.aws.offsets import offset_page
from servekit.aws.policy import PolicyError
from servekit.aws.sessions import SessionKeys
from servekit.aws.timestamps import optional_epoch
from servekit.services.hosting.framework import FrameworkError
from servekit.services.hosting.store import Hosting
from servekit.services.hosting.store_rows import ContainerSpec
from servekit.services.training.network import job_network, loopback_address
from servekit.services.training.roles import RoleDocuments, role_policy
from servekit.services.transform.repo import TransformJobRow, TransformJobs
from servekit.services.transform.status import JobStatus, ObjectStatus

STARTED_TIMEOUT_S = 60.0  # a run records its job before it loads the model; this only bounds a stuck start
STOP_GRACE_S = 10.0
LOG_TAIL_BYTES = 1500


@functools.cache
def _described() -> tuple[str, ...]:
    """The request members DescribeTransformJob echoes, from botocore's model: what CreateTransformJob takes and
    DescribeTransformJob answers, bar the two the answer fills itself (the stored request also holds servekit's
    Strict and EndpointUrl, which neither has)."""
    model = service_model("sagemaker")
    described = model.operation_model("DescribeTransformJob").output_shape.members
    created = model.operation_model("CreateTransformJob").input_shape.members
    return tuple(sorted(set(described) & set(created) - {"TransformJobName", "ModelName"}))


TRANSFORM_SESSION_S = 7 * 86400.0  # a run's session outlives any run; it is revoked when the run ends
DEFAULT_ROLE = "SageMakerRole"  # the execution role a home has (services.iam.api.DEFAULT_ROLE)
MODEL_TAG = "servekit:ModelName"  # the plane's model a job created through the API runs (its request has a path)
_SORT = {"Name": "name", "CreationTime": "created", "Status": "status"}


class TransformJobsApi:
    def __init__(
        self,
        jobs: TransformJobs,
        models: Hosting,
        resolve: Callable[[str], str],
        home: Path,
        account: Account | None = None,
        python: str = sys.executable,
        environment: Mapping[str, str] | None = None,
        sessions: SessionKeys | None = None,
        namespaces: bool = False,
        role_documents: RoleDocuments | None = None,
        compose: Callable[[ContainerSpec, str, str], str] | None = None,
    ) -> None:
        """``resolve``: a ModelDataUrl to a local servekit model base (``<base>/<version>/...``), raising with a
        reason when it cannot (the hosting service's resolver). ``environment``: variables the runs get beyond
        this process's (the plane's own S3 endpoint and a key, so a job reads and writes ``s3://`` there);
        ``sessions``: where a run's key is minted instead (a session of its model's ExecutionRoleArn, so the
        model's code never holds the plane's key); ``namespaces``: whether a run of a model created with
        EnableNetworkIsolation gets a network namespace (not where the state database is a server it must reach)."""
        self._environment = dict(environment or {})
        self._sessions = sessions
        self._namespaces = namespaces
        self._role_documents = role_documents
        # what the model's image makes of its artefact where only the image can read it (a first-party algorithm's,
        # TF Serving's layout): the hosting service's FrameworkModels.batch_model_dir
        self._compose = compose
        self._held: dict[str, contextlib.AsyncExitStack] = {}
        self.jobs = jobs
        self.models = models
        self._resolve = resolve
        self.home = home
        self._account = account or Account()
        self._python = python
        self._children: dict[str, asyncio.subprocess.Process] = {}
        self._waiters: set[asyncio.Task[None]] = set()

    def handlers(self) -> dict[str, Handler]:
        return {
            "ListTransformJobs": self.list_transform_jobs,
            "DescribeTransformJob": self.describe_transform_job,
            "CreateTransformJob": self.create_transform_job,
            "StopTransformJob": self.stop_transform_job,
        }

    # ---- background: jobs this plane started end with it -------------------------------------------------------

    def start(self) -> None:
        pass

    async def close(self) -> None:
        """Stop the runs this plane started (SIGINT: each ends Stopped, and a later run resumes it)."""
        await stop_children(self._children.values(), STOP_GRACE_S, group=False)

    # ---- names and status ---------------------------------------------------------------------------------------

    def job_arn(self, name: str) -> str:
        return self._account.arn_of("transform-job", name)

    def _job(self, name: str) -> TransformJobRow:
        row = self.jobs.get(name)
        if row is None:
            raise validation_exception(f"Could not find requested job with name {name}")
        return row

    def status(self, row: TransformJobRow) -> tuple[JobStatus, str]:
        """SageMaker's status and failure reason of a job (CompletedWithErrors is SageMaker's Completed)."""
        status = JobStatus(row.status)
        if status in (JobStatus.IN_PROGRESS, JobStatus.STOPPING) and not self._running(row):
            how = f"its process ({row.owner_pid}) ended before the job finished"
            return JobStatus.FAILED, f"{how}; run it again with the same name to resume it{self._log_tail(row.name)}"
        if status is JobStatus.COMPLETED_WITH_ERRORS:
            return JobStatus.COMPLETED, (
                f"{row.errors} record(s) failed; they are in the *.out.errors.jsonl files under "
                f"{row.request.get('TransformOutput', {}).get('S3OutputPath', 'the output path')}"
            )
        return status, row.failure_reason

    def _running(self, row: TransformJobRow) -> bool:
        child = self._children.get(row.name)
        if child is not None and child.returncode is None:
            return True
        return row.owner_pid is not None and owner_alive(row.owner_pid, row.owner_host)

    def _log(self, name: str) -> Path:
        return self.home / "transform" / "api" / f"{name}.log"

    def _log_tail(self, name: str) -> str:
        path = self._log(name)
        if not path.exists():
            return ""
        last = [line for line in tail_text(str(path), LOG_TAIL_BYTES).splitlines() if line.strip()][-3:]
        return f"; its log ({path}) ends: {' | '.join(last)}" if last else ""

    # ---- reading ------------------------------------------------------------------------------------------------

    async def list_transform_jobs(self, p: dict[str, Any]) -> dict[str, Any]:
        after, before = optional_epoch(p.get("CreationTimeAfter")), optional_epoch(p.get("CreationTimeBefore"))
        mod_after = optional_epoch(p.get("LastModifiedTimeAfter"))
        mod_before = optional_epoch(p.get("LastModifiedTimeBefore"))
        contains = str(p.get("NameContains") or "").lower()
        wanted = p.get("StatusEquals")
        items = []
        for row in self.jobs.list():
            status, reason = self.status(row)
            modified = _modified(row)
            if (
                (contains and contains not in row.name.lower())
                or (wanted and status != wanted)
                or (after is not None and row.created <= after)
                or (before is not None and row.created >= before)
                or (mod_after is not None and modified <= mod_after)
                or (mod_before is not None and modified >= mod_before)
            ):
                continue
            item: dict[str, Any] = {
                "TransformJobName": row.name,
                "TransformJobArn": self.job_arn(row.name),
                "CreationTime": row.created,
                "LastModifiedTime": modified,
                "TransformJobStatus": status,
            }
            if row.ended is not None:
                item["TransformEndTime"] = row.ended
            if reason:
                item["FailureReason"] = reason[:1024]
            items.append(item)
        key = _SORT[p.get("SortBy") or "CreationTime"]
        sort_key = {"name": "TransformJobName", "created": "CreationTime", "status": "TransformJobStatus"}[key]
        items.sort(
            key=lambda i: (i[sort_key], i["TransformJobName"]),
            reverse=(p.get("SortOrder") or "Descending") == "Descending",
        )
        page, token = offset_page(items, p.get("NextToken"), int(p.get("MaxResults") or 10))
        out: dict[str, Any] = {"TransformJobSummaries": list(page)}
        if token is not None:
            out["NextToken"] = token
        return out

    async def describe_transform_job(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._job(p["TransformJobName"])
        status, reason = self.status(row)
        request = row.request
        tags = {str(t.get("Key")): str(t.get("Value", "")) for t in request.get("Tags") or [] if isinstance(t, dict)}
        out: dict[str, Any] = {
            "TransformJobName": row.name,
            "TransformJobArn": self.job_arn(row.name),
            "TransformJobStatus": status,
            # a job the CLI ran names a model directory (or an endpoint URL): that is what it ran
            "ModelName": tags.get(MODEL_TAG) or request.get("ModelName") or request.get("EndpointUrl") or "",
            "CreationTime": row.created,
            **{k: request[k] for k in _described() if request.get(k) not in (None, {})},
        }
        if row.started is not None:
            out["TransformStartTime"] = row.started
        if row.ended is not None:
            out["TransformEndTime"] = row.ended
        if reason:
            out["FailureReason"] = reason[:1024]
        # servekit's extensions (non-strict answers keep them; botocore's parser drops them)
        out["ServekitStatus"] = row.status
        out["ServekitProgress"] = {
            "ObjectsTotal": row.objects_total,
            "ObjectsDone": row.objects_by_status.get("Done", 0),
            "ObjectsFailed": row.objects_by_status.get(ObjectStatus.FAILED, 0),
            "Records": row.records + row.records_live,
            "RecordErrors": row.errors,
        }
        return out

    # ---- running ------------------------------------------------------------------------------------------------

    def _model_version(self, name: str) -> str:
        """The newest version directory of the plane's model ``name`` (what ``servekit transform`` loads)."""
        model = self.models.get_model(name)
        if model is None:
            raise validation_exception(f'Could not find model "{name}".')
        try:
            base = Path(self._resolve(model.container.model_data_url))
        except Exception as exc:  # the resolver's own reason (a missing path, an unreachable bucket)
            raise validation_exception(f"Model {name}'s ModelDataUrl cannot be used: {exc}") from None
        if self._compose is not None:
            try:
                base = Path(self._compose(model.container, str(base), name))
            except (FrameworkError, OSError) as exc:
                raise validation_exception(f"Model {name} cannot be served: {getattr(exc, 'message', exc)}") from None
        versions = [d for d in base.iterdir() if d.is_dir() and d.name.isdigit()] if base.is_dir() else []
        if not versions:
            raise validation_exception(f"Model {name}'s artifacts at {base} have no version directory (<base>/1/...)")
        return str(max(versions, key=lambda d: int(d.name)))

    async def create_transform_job(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["TransformJobName"]
        if self.jobs.get(name) is not None:
            raise validation_exception(f"Job with name {name} already exists; give another name for a new job.")
        request = {k: v for k, v in p.items() if k not in ("ModelName", "Tags", "ExperimentConfig")}
        request["ModelName"] = self._model_version(p["ModelName"])
        request["Tags"] = [*(p.get("Tags") or []), {"Key": MODEL_TAG, "Value": p["ModelName"]}]
        spec = self.home / "transform" / "api" / f"{name}.json"
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_bytes(orjson.dumps(request, option=orjson.OPT_INDENT_2))
        argv = [self._python, "-m", "servekit.cli.main", "transform", "run", "--spec", str(spec)]
        argv += ["--home", str(self.home), "--quiet"]
        log = self._log(name)
        held = contextlib.AsyncExitStack()  # the run's session and network, until it ends
        try:
            env, prefix = await self._contained(held, name, p)
            with log.open("ab") as out:  # the child keeps its own descriptor
                proc = await asyncio.create_subprocess_exec(
                    *prefix,
                    *argv,
                    stdout=out,
                    stderr=asyncio.subprocess.STDOUT,
                    stdin=asyncio.subprocess.DEVNULL,
                    env=env,
                    start_new_session=True,  # a Ctrl-C on servekit up reaches it through close(), not twice
                )
        except BaseException:
            await held.aclose()
            raise
        self._held[name] = held
        self._children[name] = proc
        task = asyncio.create_task(self._reap(name, proc))
        self._waiters.add(task)
        task.add_done_callback(self._waiters.discard)
        deadline = time.monotonic() + STARTED_TIMEOUT_S
        while self.jobs.get(name) is None:
            if proc.returncode is not None:
                raise validation_exception(f"The transform job was not started: {_last_line(log)}")
            if time.monotonic() > deadline:
                proc.kill()
                raise validation_exception(f"The transform run did not record its job in {STARTED_TIMEOUT_S:g}s")
            await asyncio.sleep(0.05)  # another process's progress: the run writes its row
        return {"TransformJobArn": self.job_arn(name)}

    async def _contained(
        self, held: contextlib.AsyncExitStack, name: str, p: Mapping[str, Any]
    ) -> tuple[dict[str, str] | None, list[str]]:
        """The run's environment and command prefix. The model's code runs in the run's process, as a model's
        container does in SageMaker's transform: it gets a session of the model's ExecutionRoleArn (allowed what
        that role's policy allows: services.training.roles; revoked when the run ends), never the plane's key; a
        model created with EnableNetworkIsolation runs in a network namespace where only the plane's signed API
        answers (the run moves its input and output through it), without the internet or any other port."""
        if not self._environment:
            return None, []
        env = {**os.environ, **self._environment}
        model = self.models.get_model(p["ModelName"])
        record = model.record if model is not None else {}
        if self._sessions is not None and "AWS_ACCESS_KEY_ID" in self._environment:
            # a model created without one (servekit's own CreateModel allows it) runs as the default role
            default = f"arn:{self._account.partition}:iam::{self._account.account_id}:role/{DEFAULT_ROLE}"
            role = str(record.get("ExecutionRoleArn") or default)
            try:
                policy = role_policy(self.home, role, p, self._role_documents)
                key = self._sessions.mint(role, f"SageMaker-{name}"[:64], policy, TRANSFORM_SESSION_S)
            except (PolicyError, ValueError) as exc:
                raise validation_exception(f"The model's ExecutionRoleArn {role}: {exc}") from None
            held.callback(self._sessions.revoke, key.access_key_id)
            env.update(
                AWS_ACCESS_KEY_ID=key.access_key_id,
                AWS_SECRET_ACCESS_KEY=key.secret_access_key,
                AWS_SESSION_TOKEN=key.session_token or "",
            )
        if not (record.get("EnableNetworkIsolation") and self._namespaces):
            return env, []
        plane = loopback_address(self._environment.get("AWS_ENDPOINT_URL_S3", ""))
        folder = self.home / "transform" / "api" / f"{name}.net"
        net = await held.enter_async_context(job_network(plane, isolated=False, folder=folder, internet=False))
        return env, list(net.enter) if net is not None else []

    async def _reap(self, name: str, proc: asyncio.subprocess.Process) -> None:
        await proc.wait()
        if self._children.get(name) is proc:
            del self._children[name]
        held = self._held.pop(name, None)
        if held is not None:
            await held.aclose()

    async def stop_transform_job(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._job(p["TransformJobName"])
        status, _ = self.status(row)
        if status is JobStatus.STOPPING:
            return {}
        if status is not JobStatus.IN_PROGRESS or row.owner_pid is None:
            raise conflict(f"Transform job {row.name} is {status}; only an InProgress job stops")
        if row.owner_host and row.owner_host != socket.gethostname():
            raise validation_exception(f"Transform job {row.name} runs on {row.owner_host}; stop it there")
        try:
            os.kill(row.owner_pid, signal.SIGINT)  # the run's Ctrl-C: it marks the job Stopping, then Stopped
        except ProcessLookupError:
            raise conflict(f"Transform job {row.name}'s process has ended; describe it again") from None
        return {}


def _modified(row: TransformJobRow) -> float:
    return max(t for t in (row.created, row.started, row.ended) if t is not None)


def _last_line(path: Path) -> str:
    lines = [line for line in tail_text(str(path), LOG_TAIL_BYTES).splitlines() if line.strip()]
    return lines[-1].removeprefix("servekit: ") if lines else "its process exited without a message"
