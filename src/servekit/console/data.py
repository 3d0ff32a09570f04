"""What each console page reads, through the public API only (:data:`~servekit.console.client.ApiCall`); the
charts' queries and series come from :mod:`servekit.console.charts`."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servekit.console.charts import (
    QUALITY_METRICS,
    Chart,
    build_charts,
    instance_charts,
    instance_queries,
    metric_queries,
    period_for,
    quality_chart,
)
from servekit.console.client import ApiCall, ApiFailure


async def _pages(api: ApiCall, service: str, operation: str, params: dict[str, Any], items: str) -> list[Any]:
    """Every item of a paginated List/Describe operation (NextToken)."""
    out: list[Any] = []
    token: str | None = None
    while True:
        answer = await api(service, operation, {**params, **({"NextToken": token} if token else {})}, None)
        out.extend(answer.get(items, []))
        token = answer.get("NextToken")
        if not token:
            return out


async def endpoint_summaries(api: ApiCall) -> list[dict[str, Any]]:
    """DescribeEndpoint and its DescribeEndpointConfig for every endpoint, by name."""
    listed = await _pages(api, "sagemaker", "ListEndpoints", {"SortBy": "Name", "SortOrder": "Ascending"}, "Endpoints")
    found = await asyncio.gather(*(_endpoint(api, e["EndpointName"]) for e in listed))
    return [f for f in found if f is not None]


async def _endpoint(api: ApiCall, name: str) -> dict[str, Any] | None:
    try:
        described = await api("sagemaker", "DescribeEndpoint", {"EndpointName": name}, None)
    except ApiFailure as exc:
        if exc.code == "ValidationException":  # deleted between the list and the describe
            return None
        raise
    config: dict[str, Any] = {}
    try:
        config = await api(
            "sagemaker", "DescribeEndpointConfig", {"EndpointConfigName": described["EndpointConfigName"]}, None
        )
    except ApiFailure:
        pass  # a config deleted under a running endpoint: the page shows the endpoint without instance types
    return {"endpoint": described, "config": config}


def watched_alarms(described: dict[str, Any]) -> list[str]:
    """The alarms the endpoint's running deployment (or, with none running, its last one) rolls back on."""
    deployment = described.get("LastDeploymentConfig") or {}
    alarms = (deployment.get("AutoRollbackConfiguration") or {}).get("Alarms") or []
    return [str(a["AlarmName"]) for a in alarms if a.get("AlarmName")]


MAX_ALARM_HISTORIES = 10


def endpoint_alarms(alarms: Sequence[dict[str, Any]], endpoint: str, watched: Sequence[str]) -> list[dict[str, Any]]:
    """The alarms the endpoint's deployment watches (named in DescribeEndpoint's LastDeploymentConfig, which is
    the running deployment's while one runs) and, for context, every alarm on the endpoint's own metrics
    (dimension EndpointName), the watched ones first."""
    picked = []
    for a in alarms:
        dims = {d.get("Name"): d.get("Value") for d in a.get("Dimensions", [])}
        if a.get("AlarmName") in watched or dims.get("EndpointName") == endpoint:
            picked.append({**a, "Watched": a.get("AlarmName") in watched})
    return sorted(picked, key=lambda a: (not a["Watched"], str(a.get("AlarmName"))))


async def endpoint_detail(api: ApiCall, name: str) -> dict[str, Any] | None:
    """Everything the endpoint page shows except the charts: the endpoint, its config, the alarms its deployment
    watches with their state histories, and its variants' scaling targets and activities."""
    found = await _endpoint(api, name)
    if found is None:
        return None
    alarms = endpoint_alarms(
        await _pages(api, "cloudwatch", "DescribeAlarms", {}, "MetricAlarms"),
        name,
        watched_alarms(found["endpoint"]),
    )
    history: list[dict[str, Any]] = []
    for alarm in alarms[:MAX_ALARM_HISTORIES]:
        answer = await api(
            "cloudwatch",
            "DescribeAlarmHistory",
            {"AlarmName": alarm["AlarmName"], "HistoryItemType": "StateUpdate", "MaxRecords": 20},
            None,
        )
        history.extend(answer.get("AlarmHistoryItems", []))
    history.sort(key=lambda h: h.get("Timestamp", 0), reverse=True)
    variants = [v["VariantName"] for v in found["endpoint"].get("ProductionVariants", [])]
    components = await endpoint_components(api, name)
    resource_ids = [f"endpoint/{name}/variant/{v}" for v in variants]
    resource_ids += [f"inference-component/{c['InferenceComponentName']}" for c in components]
    targets: list[dict[str, Any]] = []
    activities: list[dict[str, Any]] = []
    if resource_ids:
        targets = (
            await api(
                "application-autoscaling",
                "DescribeScalableTargets",
                {"ServiceNamespace": "sagemaker", "ResourceIds": resource_ids},
                None,
            )
        ).get("ScalableTargets", [])
        for rid in [t["ResourceId"] for t in targets]:
            answer = await api(
                "application-autoscaling",
                "DescribeScalingActivities",
                {"ServiceNamespace": "sagemaker", "ResourceId": rid, "MaxResults": 20},
                None,
            )
            activities.extend(answer.get("ScalingActivities", []))
        activities.sort(key=lambda a: a.get("StartTime", 0), reverse=True)
    return {**found, "alarms": alarms, "alarm_history": history, "targets": targets, "activities": activities,
            "components": components}  # fmt: skip


async def endpoint_components(api: ApiCall, name: str) -> list[dict[str, Any]]:
    """DescribeInferenceComponent of each inference component on the endpoint (none on most), by name."""
    listed = await _pages(
        api, "sagemaker", "ListInferenceComponents",
        {"EndpointNameEquals": name, "SortBy": "Name", "SortOrder": "Ascending"}, "InferenceComponents",
    )  # fmt: skip

    async def describe(component: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await api(
                "sagemaker", "DescribeInferenceComponent", {"InferenceComponentName": component}, None
            )
        except ApiFailure:  # deleted between the list and the describe
            return None
        return found

    found = await asyncio.gather(*(describe(c["InferenceComponentName"]) for c in listed))
    return [f for f in found if f is not None]


async def endpoint_charts(
    api: ApiCall,
    name: str,
    variants: Sequence[str],
    range_s: int,
    resolution_s: int,
    now: float,
    activities: Sequence[dict[str, Any]] = (),
) -> tuple[int, list[Chart], list[Chart]]:
    """The traffic charts and the instance-count charts of the last ``range_s`` seconds (one GetMetricData,
    ascending) and the period they use."""
    period = period_for(range_s, resolution_s)
    end = (math.floor(now / period) + 1) * period  # the current, still filling, period included: live means now
    start = end - range_s
    if not variants:
        return period, build_charts([], [], start, end, period), []
    answer = await api(
        "cloudwatch",
        "GetMetricData",
        {
            "MetricDataQueries": metric_queries(name, variants, period) + instance_queries(name, variants, period),
            "StartTime": start,
            "EndTime": end,
            "ScanBy": "TimestampAscending",
        },
        None,
    )
    results = answer.get("MetricDataResults", [])
    return (
        period,
        build_charts(results, variants, start, end, period),
        instance_charts(results, variants, activities, name, start, end, period),
    )


async def registry(api: ApiCall) -> list[dict[str, Any]]:
    """Model package groups, each with its versions (ListModelPackages, newest first)."""
    groups = await _pages(
        api,
        "sagemaker",
        "ListModelPackageGroups",
        {"SortBy": "Name", "SortOrder": "Ascending"},
        "ModelPackageGroupSummaryList",
    )
    out = []
    for g in groups:
        packages = await _pages(
            api,
            "sagemaker",
            "ListModelPackages",
            {"ModelPackageGroupName": g["ModelPackageGroupName"], "SortBy": "CreationTime", "SortOrder": "Descending"},
            "ModelPackageSummaryList",
        )
        out.append({"group": g, "packages": packages})
    return out


async def model_package(api: ApiCall, arn_or_name: str) -> dict[str, Any]:
    return await api("sagemaker", "DescribeModelPackage", {"ModelPackageName": arn_or_name}, None)


def package_data_url(package: dict[str, Any]) -> str:
    containers = (package.get("InferenceSpecification") or {}).get("Containers") or [{}]
    return str(containers[0].get("ModelDataUrl", ""))


async def package_lineage(api: ApiCall, package: dict[str, Any]) -> dict[str, Any]:
    """Where a model package came from and where it runs, from the public API as ``servekit lineage`` tells it:
    the pipeline execution its ``MetadataProperties.GeneratedBy`` names (DescribePipelineExecution) with its steps
    (ListPipelineExecutionSteps: which one registered it), and the endpoints serving it now."""
    generated_by = str((package.get("MetadataProperties") or {}).get("GeneratedBy", ""))
    out: dict[str, Any] = {"generated_by": generated_by, "run": None, "steps": [], "run_error": ""}
    if ":pipeline/" in generated_by and "/execution/" in generated_by:
        try:
            found = await pipeline_execution(api, generated_by)
            out["run"], out["steps"] = found["execution"], found["steps"]
        except ApiFailure as exc:
            out["run_error"] = exc.message
    out["endpoints"] = await serving_endpoints(api, str(package.get("ModelPackageArn", "")), package_data_url(package))
    return out


async def serving_endpoints(api: ApiCall, package_arn: str, data_url: str) -> list[dict[str, Any]]:
    """Endpoint variants whose model was made from the package (a container's ``ModelPackageName``) or from its
    model data (``ModelDataUrl``), as ``servekit lineage`` matches them (DescribeEndpoint, DescribeEndpointConfig,
    DescribeModel)."""
    summaries = await endpoint_summaries(api)
    # an IC-based endpoint's variant names no model (its inference components do)
    names = sorted(
        {
            str(v["ModelName"])
            for s in summaries
            for v in s["config"].get("ProductionVariants", [])
            if v.get("ModelName")
        }
    )

    async def describe(name: str) -> dict[str, Any]:
        try:
            return await api("sagemaker", "DescribeModel", {"ModelName": name}, None)
        except ApiFailure:
            return {}  # a model deleted under a running endpoint: nothing to match

    models = dict(zip(names, await asyncio.gather(*(describe(n) for n in names)), strict=True))
    out = []
    for s in summaries:
        endpoint = s["endpoint"]
        for variant in s["config"].get("ProductionVariants", []):
            if not variant.get("ModelName"):
                continue
            model = models.get(str(variant["ModelName"]), {})
            containers = [model.get("PrimaryContainer") or {}, *(model.get("Containers") or [])]
            via = next(
                (
                    how
                    for c in containers
                    for how, hit in (
                        # SageMaker lower-cases names in ARNs
                        ("ModelPackageName", str(c.get("ModelPackageName", "")).lower() == package_arn.lower()),
                        ("ModelDataUrl", bool(data_url) and c.get("ModelDataUrl") == data_url),
                    )
                    if hit
                ),
                None,
            )
            if via is not None:
                out.append(
                    {
                        "EndpointName": endpoint["EndpointName"],
                        "EndpointStatus": endpoint.get("EndpointStatus"),
                        "EndpointConfigName": endpoint.get("EndpointConfigName"),
                        "VariantName": variant["VariantName"],
                        "ModelName": variant["ModelName"],
                        "MatchedBy": via,
                    }
                )
    return out


async def monitoring(api: ApiCall) -> dict[str, Any]:
    schedules = await _pages(api, "sagemaker", "ListMonitoringSchedules", {}, "MonitoringScheduleSummaries")
    executions = (
        await api(
            "sagemaker",
            "ListMonitoringExecutions",
            {"SortBy": "ScheduledTime", "SortOrder": "Descending", "MaxResults": 50},
            None,
        )
    ).get("MonitoringExecutionSummaries", [])
    data_runs = [x for x in executions if x.get("MonitoringType") != "ModelQuality"]
    quality_runs = [x for x in executions if x.get("MonitoringType") == "ModelQuality"]
    return {
        "schedules": schedules,
        "executions": executions,
        "drift": await drift(api, data_runs),
        "quality": await quality(api, quality_runs),
    }


MAX_JOBS = 50  # the newest jobs of a kind a jobs page shows (each costs one Describe*)


def missing(exc: ApiFailure) -> bool:
    """Whether an API error says the named thing does not exist, in any of the ways SageMaker's Describe* say it
    (ValidationException "Could not find requested job…" / "Requested resource not found…", ResourceNotFound)."""
    if exc.code in ("ResourceNotFound", "ResourceNotFoundException"):
        return True
    text = exc.message.lower()
    return exc.code == "ValidationException" and any(
        words in text for words in ("could not find", "not found", "does not exist")
    )


async def describe_job(api: ApiCall, operation: str, key: str, name: str) -> dict[str, Any] | None:
    """A Describe*Job's answer, or ``None`` when there is no such job."""
    try:
        return await api("sagemaker", operation, {key: name}, None)
    except ApiFailure as exc:
        if missing(exc):
            return None
        raise


async def _newest_jobs(api: ApiCall, listing: str, items: str, describe: str, key: str) -> list[dict[str, Any]]:
    """The newest ``MAX_JOBS`` jobs a List*Jobs operation lists, each as its Describe* answers it; a job deleted
    between the list and the describe is left out."""
    params = {"SortBy": "CreationTime", "SortOrder": "Descending", "MaxResults": MAX_JOBS}
    listed = (await api("sagemaker", listing, params, None)).get(items, [])
    found = await asyncio.gather(*(describe_job(api, describe, key, j[key]) for j in listed))
    return [f for f in found if f is not None]


async def transform_jobs(api: ApiCall) -> list[dict[str, Any]]:
    """The newest transform jobs, each as DescribeTransformJob answers it (with ``ServekitProgress``)."""
    return await _newest_jobs(
        api, "ListTransformJobs", "TransformJobSummaries", "DescribeTransformJob", "TransformJobName"
    )


async def training_jobs(api: ApiCall) -> list[dict[str, Any]]:
    """The newest training jobs (a tuning job's among them), each as DescribeTrainingJob answers it."""
    return await _newest_jobs(api, "ListTrainingJobs", "TrainingJobSummaries", "DescribeTrainingJob", "TrainingJobName")


async def processing_jobs(api: ApiCall) -> list[dict[str, Any]]:
    """The newest processing jobs, each as DescribeProcessingJob answers it."""
    return await _newest_jobs(
        api, "ListProcessingJobs", "ProcessingJobSummaries", "DescribeProcessingJob", "ProcessingJobName"
    )


async def tuning_jobs(api: ApiCall) -> list[dict[str, Any]]:
    """The newest hyperparameter tuning jobs, each as DescribeHyperParameterTuningJob answers it (with its best
    training job)."""
    return await _newest_jobs(
        api,
        "ListHyperParameterTuningJobs",
        "HyperParameterTuningJobSummaries",
        "DescribeHyperParameterTuningJob",
        "HyperParameterTuningJobName",
    )


async def tuning_job(api: ApiCall, name: str) -> dict[str, Any] | None:
    """DescribeHyperParameterTuningJob and every training job it launched, newest first
    (ListTrainingJobsForHyperParameterTuningJob), or ``None`` when there is no such tuning job."""
    described = await describe_job(api, "DescribeHyperParameterTuningJob", "HyperParameterTuningJobName", name)
    if described is None:
        return None
    launched = await _pages(
        api,
        "sagemaker",
        "ListTrainingJobsForHyperParameterTuningJob",
        {"HyperParameterTuningJobName": name, "SortBy": "CreationTime", "SortOrder": "Descending", "MaxResults": 100},
        "TrainingJobSummaries",
    )
    return {"job": described, "training_jobs": launched}


EXECUTIONS_PER_PIPELINE = 10


async def pipelines(api: ApiCall) -> list[dict[str, Any]]:
    """Every pipeline (by name) with its newest executions (ListPipelineExecutions, newest first)."""
    found = await _pages(
        api, "sagemaker", "ListPipelines", {"SortBy": "Name", "SortOrder": "Ascending"}, "PipelineSummaries"
    )

    async def executions(name: str) -> list[dict[str, Any]]:
        answer = await api(
            "sagemaker",
            "ListPipelineExecutions",
            {"PipelineName": name, "SortOrder": "Descending", "MaxResults": EXECUTIONS_PER_PIPELINE},
            None,
        )
        return list(answer.get("PipelineExecutionSummaries", []))

    runs = await asyncio.gather(*(executions(p["PipelineName"]) for p in found))
    return [{"pipeline": p, "executions": r} for p, r in zip(found, runs, strict=True)]


async def pipeline_execution(api: ApiCall, arn: str) -> dict[str, Any]:
    """DescribePipelineExecution, its steps in the order they started (ListPipelineExecutionSteps) and the definition
    it runs (DescribePipelineDefinitionForExecution; {} when there is none yet)."""
    described = await api("sagemaker", "DescribePipelineExecution", {"PipelineExecutionArn": arn}, None)
    steps = await _pages(
        api,
        "sagemaker",
        "ListPipelineExecutionSteps",
        {"PipelineExecutionArn": arn, "SortOrder": "Ascending"},
        "PipelineExecutionSteps",
    )
    try:  # the DAG's shape; an execution still starting has no definition to show yet
        shown = await api("sagemaker", "DescribePipelineDefinitionForExecution", {"PipelineExecutionArn": arn}, None)
        definition = json.loads(str(shown.get("PipelineDefinition") or "{}"))
    except (ApiFailure, ValueError):
        definition = {}
    return {"execution": described, "steps": steps, "definition": definition}


DRIFT_EXECUTIONS = 12  # the newest judged executions per endpoint the drift heatmap shows
_JUDGED = ("Completed", "CompletedWithViolations")


def job_name(processing_job_arn: str) -> str:
    return processing_job_arn.rsplit("/", 1)[-1]


async def output_folder(api: ApiCall, job: str) -> Path | None:
    """The local output folder of a monitoring execution's processing job (DescribeProcessingJob's S3Output), or
    ``None`` when it is not on this machine's file system (an ``s3://`` output)."""
    described = await api("sagemaker", "DescribeProcessingJob", {"ProcessingJobName": job}, None)
    outputs = (described.get("ProcessingOutputConfig") or {}).get("Outputs") or []
    uri = str(((outputs[0] if outputs else {}).get("S3Output") or {}).get("S3Uri", ""))
    if uri.startswith("file://"):
        return Path(uri.removeprefix("file://"))
    if uri.startswith("/"):
        return Path(uri)
    return None


def _json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


def judged_window(metrics: Any) -> dict[str, Any] | None:
    """The last window a run judged (status ``ok``) in its ``metrics.json``."""
    windows = metrics.get("windows") if isinstance(metrics, dict) else None
    judged = [w for w in windows or [] if isinstance(w, dict) and w.get("status") == "ok"]
    return judged[-1] if judged else None


async def drift(api: ApiCall, executions: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per endpoint, its newest judged executions (oldest first), each with the drift verdict of every feature in
    the last window it judged (``metrics.json``), its violations (``constraint_violations.json``) and which
    report files exist; read from the output folder DescribeProcessingJob names."""
    by_endpoint = _picked(executions)

    async def read(x: dict[str, Any]) -> dict[str, Any]:
        job = job_name(str(x["ProcessingJobArn"]))
        try:
            folder = await output_folder(api, job)
        except ApiFailure:
            folder = None
        window = judged_window(_json_file(folder / "metrics.json")) if folder else None
        violations = _json_file(folder / "constraint_violations.json") if folder else None
        return {
            "execution": x,
            "job": job,
            "local": folder is not None,
            "window": window,
            "violations": (violations or {}).get("violations", []) if isinstance(violations, dict) else [],
            "report": bool(folder and (folder / "report.html").is_file()),
        }

    out: dict[str, dict[str, Any]] = {}
    for endpoint, picked in sorted(by_endpoint.items()):
        runs = list(reversed(await asyncio.gather(*(read(x) for x in picked))))  # oldest first, left to right
        features = sorted({f for r in runs if r["window"] for f in (r["window"].get("features") or {})})
        out[endpoint] = {"runs": runs, "features": features}
    return out


def _picked(executions: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The newest judged executions with an output, per endpoint (newest first, as listed)."""
    by_endpoint: dict[str, list[dict[str, Any]]] = {}
    for x in executions:
        if x.get("MonitoringExecutionStatus") in _JUDGED and x.get("EndpointName") and x.get("ProcessingJobArn"):
            picked = by_endpoint.setdefault(str(x["EndpointName"]), [])
            if len(picked) < DRIFT_EXECUTIONS:
                picked.append(x)
    return by_endpoint


async def quality(api: ApiCall, executions: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per endpoint, its newest judged model-quality executions (oldest first), each with the last window it
    judged in its ``quality_metrics.json`` (read from the output folder DescribeProcessingJob names), and the
    chart of the problem type's two metrics per execution (x: the execution's ScheduledTime)."""

    async def read(x: dict[str, Any]) -> dict[str, Any]:
        job = job_name(str(x["ProcessingJobArn"]))
        try:
            folder = await output_folder(api, job)
        except ApiFailure:
            folder = None
        metrics = _json_file(folder / "quality_metrics.json") if folder else None
        violations = _json_file(folder / "constraint_violations.json") if folder else None
        return {
            "execution": x,
            "job": job,
            "local": folder is not None,
            "problem_type": str(metrics.get("problem_type", "")) if isinstance(metrics, dict) else "",
            "window": judged_window(metrics),
            "violations": (violations or {}).get("violations", []) if isinstance(violations, dict) else [],
            "report": bool(folder and (folder / "report.html").is_file()),
        }

    out: dict[str, dict[str, Any]] = {}
    for endpoint, picked in sorted(_picked(executions).items()):
        runs = list(reversed(await asyncio.gather(*(read(x) for x in picked))))
        problem = next((r["problem_type"] for r in reversed(runs) if r["problem_type"] in QUALITY_METRICS), "")
        names = QUALITY_METRICS.get(problem, ())
        out[endpoint] = {"runs": runs, "problem_type": problem, "metrics": names}
        if names:
            out[endpoint]["chart"] = quality_chart(endpoint, problem, runs)
    return out
