"""SageMaker's CreateInferenceRecommendationsJob, DescribeInferenceRecommendationsJob and
ListInferenceRecommendationsJobs on ``servekit up``: a job measures a CreateModel'd model on the instance types its
``EndpointConfigurations`` name, in the background, and keeps its recommendations in the state.

How SageMaker's request maps onto a recommendation (``RecommendSpec``):

- ``InputConfig.ModelName``: the model (its ``ModelDataUrl`` resolved like an endpoint's); model packages are refused.
- ``InputConfig.EndpointConfigurations[].InstanceType``: the types; ``EnvironmentParameterRanges`` with a categorical
  range named ``SERVEKIT_BATCHING`` lists the batching settings to try (``off``, ``SIZE:MICROS``; default
  ``off,8:1000,32:4000``).
- ``StoppingConditions.MaxInvocations`` (per minute) is the target load Q = MaxInvocations / 60 (SageMaker's "maximum
  number of requests per minute expected for the endpoint"); ``ModelLatencyThresholds[0]`` (``P95``/``P99``) the SLO
  (default P99 100 ms).
- ``InputConfig.TrafficPattern.Phases``: each phase's ``InitialNumberOfUsers`` is a closed-loop concurrency of the
  throughput sweep; the shortest ``DurationInSeconds`` is every phase's length (default 5 s).
- ``InputConfig.ResourceLimit.MaxNumberOfTests``: the most search phases per setting.
- ``ContainerConfig.PayloadConfig.SamplePayloadUrl``: a local file of bodies, one per line (or a ``.tar.gz`` whose
  files are one body each); ``SupportedContentTypes[0]`` their type.
- Tag ``servekit:utilization``: the target utilisation (default 0.7).

The job runs on a thread of its own with its own event loop, so load generation neither slows the API nor is
slowed by it; stopping ``servekit up`` cancels it (its instances are stopped). A job left unfinished by a previous
``servekit up`` is marked Failed when the next one starts.
"""

from __future__ import annotations

import asyncio
import logging
import tarfile
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from servekit.aws.errors import ApiError, resource_in_use, validation_exception
from servekit.aws.front import Handler
from servekit.aws.names import Account
from servekit.aws.timestamps import optional_epoch
from servekit.errors import ConfigError
from servekit.services.hosting.instance_types import InstanceTypes
from servekit.services.hosting.store import Hosting
from servekit.tools.recommend.lifecycle import UNFINISHED, RecommendJobStatus, check_transition
from servekit.tools.recommend.run import recommend
from servekit.tools.recommend.spec import DEFAULT_BATCHING, DEFAULT_CONCURRENCY, RecommendSpec, parse_batching
from servekit.tools.recommend.store import JobExists, RecommendJobRow, RecommendJobs

log = logging.getLogger(__name__)
_S = RecommendJobStatus

Runner = Callable[[RecommendSpec, InstanceTypes, Path, str], Coroutine[Any, Any, dict[str, Any]]]
BATCHING_PARAMETER = "SERVEKIT_BATCHING"
UTILIZATION_TAG = "servekit:utilization"
DEFAULT_SLO_MS = 100.0
DEFAULT_PHASE_S = 5.0


async def _default_runner(spec: RecommendSpec, table: InstanceTypes, out_dir: Path, job: str) -> dict[str, Any]:
    return await recommend(spec, table, out_dir, lambda line: log.info("recommendation job %s: %s", job, line), job)


class RecommendationJobs:
    def __init__(
        self,
        repo: RecommendJobs,
        models: Hosting,
        resolve_model: Callable[[str], str],
        table: InstanceTypes,
        work_dir: Path,
        account: Account | None = None,
        runner: Runner = _default_runner,
    ) -> None:
        self.repo = repo
        self._models = models
        self._resolve_model = resolve_model
        self._table = table
        self._work_dir = work_dir
        self._account = account or Account()
        self._runner = runner
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._loops: dict[str, tuple[asyncio.AbstractEventLoop, asyncio.Task[dict[str, Any]]]] = {}
        stale = repo.fail_unfinished(UNFINISHED, _S.FAILED, "servekit up stopped while the job ran")
        if stale:
            log.warning("recommendation jobs left unfinished by a previous servekit up marked Failed: %s", stale)

    def handlers(self) -> dict[str, Handler]:
        return {
            "CreateInferenceRecommendationsJob": self.create,
            "DescribeInferenceRecommendationsJob": self.describe,
            "ListInferenceRecommendationsJobs": self.list,
        }

    def _arn(self, name: str) -> str:
        return self._account.arn_of("inference-recommendations-job", name)

    # ---- operations ----------------------------------------------------------------------------------------------
    async def create(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["JobName"]
        if self.repo.get(name) is not None:
            raise resource_in_use(f"Inference recommendations job {name} already exists.")
        spec = await self._spec(p)
        request = {k: v for k, v in p.items() if k != "Tags"}
        try:
            self.repo.create(
                name, self._arn(name), spec.model_name, _jsonable(request), check_transition(None, _S.PENDING)
            )
        except JobExists:
            raise resource_in_use(f"Inference recommendations job {name} already exists.") from None
        self._tasks[name] = asyncio.get_running_loop().create_task(self._run(name, spec))
        return {"JobArn": self._arn(name)}

    async def describe(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self.repo.get(p["JobName"])
        if row is None:
            raise ApiError("ResourceNotFound", f"Inference recommendations job {p['JobName']} does not exist.", 400)
        out = {**_summary(row), "InputConfig": row.request.get("InputConfig", {})}
        del out["ModelName"]  # ListInferenceRecommendationsJobs' member, not Describe's
        if row.request.get("StoppingConditions"):
            out["StoppingConditions"] = row.request["StoppingConditions"]
        if row.result:
            out["InferenceRecommendations"] = row.result.get("InferenceRecommendations", [])
            out["EndpointPerformances"] = row.result.get("EndpointPerformances", [])
        return out

    async def list(self, p: dict[str, Any]) -> dict[str, Any]:
        try:
            page = self.repo.list(
                name_contains=p.get("NameContains"),
                status=p.get("StatusEquals"),
                model_name=p.get("ModelNameEquals"),
                created_after=optional_epoch(p.get("CreationTimeAfter")),
                created_before=optional_epoch(p.get("CreationTimeBefore")),
                sort_by=p.get("SortBy") or "CreationTime",
                sort_order=p.get("SortOrder") or "Descending",
                max_results=int(p.get("MaxResults") or 10),
                next_token=p.get("NextToken"),
            )
        except ValueError as exc:
            raise validation_exception(str(exc)) from None
        out: dict[str, Any] = {"InferenceRecommendationsJobs": [_summary(r) for r in page.items]}
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    # ---- the job -------------------------------------------------------------------------------------------------
    async def _spec(self, p: dict[str, Any]) -> RecommendSpec:
        """The request as a RecommendSpec; ValidationException for what servekit cannot measure."""
        ic = p["InputConfig"]
        if ic.get("ModelPackageVersionArn") or not ic.get("ModelName"):
            raise validation_exception(
                "servekit recommends for a model made with CreateModel: give InputConfig.ModelName "
                "(model packages are not supported)."
            )
        model = self._models.get_model(ic["ModelName"])
        if model is None:
            raise validation_exception(f'Could not find model "{ic["ModelName"]}".')
        configs = ic.get("EndpointConfigurations") or []
        if not configs or any(not c.get("InstanceType") for c in configs):
            raise validation_exception(
                "servekit measures the instance types you name: give InputConfig.EndpointConfigurations with an "
                "InstanceType each (serverless is not supported)."
            )
        types = tuple(dict.fromkeys(c["InstanceType"] for c in configs))
        unknown = [t for t in types if t not in self._table]
        if unknown:
            raise validation_exception(
                f"Unknown instance type(s) {', '.join(unknown)}; this control plane knows "
                f"{', '.join(self._table.names())} (add your own with servekit up --instance-types FILE)."
            )
        stopping = p.get("StoppingConditions") or {}
        if not stopping.get("MaxInvocations"):
            raise validation_exception(
                "servekit sizes the fleet for StoppingConditions.MaxInvocations (requests per minute expected for "
                "the endpoint): give it."
            )
        thresholds = stopping.get("ModelLatencyThresholds") or [{}]
        percentile = str(thresholds[0].get("Percentile") or "P99").lower()
        phases = (ic.get("TrafficPattern") or {}).get("Phases") or []
        payload_config = (ic.get("ContainerConfig") or {}).get("PayloadConfig") or {}
        tags = {t.get("Key"): t.get("Value") for t in p.get("Tags") or []}
        try:
            batching = parse_batching(
                ",".join(
                    v
                    for c in configs
                    for r in ((c.get("EnvironmentParameterRanges") or {}).get("CategoricalParameterRanges") or [])
                    if r.get("Name") == BATCHING_PARAMETER
                    for v in r.get("Value") or []
                )
                or DEFAULT_BATCHING
            )
            limit = (ic.get("ResourceLimit") or {}).get("MaxNumberOfTests")
            model_dir = await asyncio.to_thread(self._resolve_model, model.container.model_data_url)
            payload = await asyncio.to_thread(self._payload, payload_config.get("SamplePayloadUrl"), p["JobName"])
            return RecommendSpec(
                model_dir=model_dir,
                model_name=model.name,
                instance_types=types,
                target_qps=float(stopping["MaxInvocations"]) / 60.0,
                slo_ms=float(thresholds[0].get("ValueInMilliseconds") or DEFAULT_SLO_MS),
                slo_percentile=percentile,
                utilization=float(tags.get(UTILIZATION_TAG) or 0.7),
                payload=payload,
                content_type=(payload_config.get("SupportedContentTypes") or ["application/json"])[0],
                concurrency=tuple(int(ph["InitialNumberOfUsers"]) for ph in phases) or DEFAULT_CONCURRENCY,
                batching=batching,
                phase_s=float(min((ph["DurationInSeconds"] for ph in phases), default=DEFAULT_PHASE_S)),
                max_trials=int(limit) if limit else 8,
            )
        except (ConfigError, ValueError, OSError, tarfile.TarError) as exc:
            raise validation_exception(str(exc)) from None

    def _payload(self, url: str | None, job: str) -> str | None:
        """A local body file for the job: the file itself, or a tar.gz's files written one body per line."""
        if not url:
            return None
        path = Path(url.removeprefix("file://"))
        if not path.is_file():
            raise ConfigError(f"SamplePayloadUrl {url}: no such file (servekit reads a local path or file:// URI)")
        if not path.name.endswith((".tar.gz", ".tgz")):
            return str(path)
        bodies: list[bytes] = []
        with tarfile.open(path, "r:gz") as tar:
            for member in tar.getmembers():
                f = tar.extractfile(member) if member.isfile() else None
                if f is not None:
                    bodies.append(b" ".join(f.read().split(b"\n")).strip())
        out = self._work_dir / job / "payload.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(b"\n".join(b for b in bodies if b) + b"\n")
        return str(out)

    def _move(
        self, name: str, to: RecommendJobStatus, *, reason: str = "", result: dict[str, Any] | None = None
    ) -> None:
        """The job to ``to``, a legal edge from its stored status (IllegalTransition otherwise)."""
        row = self.repo.get(name)
        check_transition(RecommendJobStatus(row.status) if row is not None else None, to)
        self.repo.set_status(name, to, reason=reason, result=result, final=to.final)

    async def _run(self, name: str, spec: RecommendSpec) -> None:
        self._move(name, _S.IN_PROGRESS)
        out_dir = self._work_dir / name
        try:
            report = await asyncio.to_thread(self._in_thread, name, spec, out_dir)
        except asyncio.CancelledError:
            self._move(name, _S.FAILED, reason="servekit up stopped while the job ran")
            raise
        except Exception as exc:
            log.exception("recommendation job %s failed", name)
            self._move(name, _S.FAILED, reason=str(exc) or type(exc).__name__)
            return
        finally:
            self._tasks.pop(name, None)
        result = {
            "InferenceRecommendations": report["InferenceRecommendations"],
            "EndpointPerformances": report["EndpointPerformances"],
            "Report": str(out_dir),
        }
        if not report["InferenceRecommendations"]:
            reasons = "; ".join(f"{f['name']}: {f['reason']}" for f in report["types"])
            self._move(name, _S.FAILED, reason=f"no instance type met the SLO ({reasons}); report in {out_dir}")
            return
        self._move(name, _S.COMPLETED, result=result)

    def _in_thread(self, name: str, spec: RecommendSpec, out_dir: Path) -> dict[str, Any]:
        loop = asyncio.new_event_loop()
        try:
            task = loop.create_task(self._runner(spec, self._table, out_dir, name))
            self._loops[name] = (loop, task)
            return loop.run_until_complete(task)
        finally:
            self._loops.pop(name, None)
            loop.close()

    async def close(self) -> None:
        """Cancel running jobs (each stops its instances) and wait for them."""
        for loop, task in list(self._loops.values()):
            loop.call_soon_threadsafe(task.cancel)
        tasks = list(self._tasks.values())
        await asyncio.gather(*tasks, return_exceptions=True)

    # the control plane starts its background loops after recovery; nothing to start here
    def start(self) -> None:
        return None


def _jsonable(value: Any) -> Any:
    """The request as JSON (the API hands timestamps as datetimes)."""
    if isinstance(value, Mapping):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, datetime):
        return value.timestamp()
    return value


def _summary(row: RecommendJobRow) -> dict[str, Any]:
    out: dict[str, Any] = {
        "JobName": row.name,
        "JobDescription": row.request.get("JobDescription", ""),
        "JobType": row.request.get("JobType", "Default"),
        "JobArn": row.arn,
        "RoleArn": row.request.get("RoleArn", ""),
        "Status": row.status,
        "CreationTime": row.created,
        "LastModifiedTime": row.modified,
        "ModelName": row.model_name,
    }
    if row.completed is not None:
        out["CompletionTime"] = row.completed
    if row.failure_reason:
        out["FailureReason"] = row.failure_reason
    return out
