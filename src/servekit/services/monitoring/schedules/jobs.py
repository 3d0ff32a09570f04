"""What one monitoring execution runs and what it found: a job definition's request read into a :class:`JobSpec`,
the ``servekit monitor`` command line for an analysis window, and its output files read back into an
:class:`Outcome` with the metrics to record — all without importing the monitor (the control plane knows no
tensors and no statistics: the monitor runs as a subprocess and speaks through its documented files).

How SageMaker's job definition maps onto servekit's monitor:

- ``*BaselineConfig.ConstraintsResource.S3Uri`` (or ``StatisticsResource``): a baseline made by
  ``servekit monitor baseline`` — its folder, a version folder, or the ``constraints.json``/``statistics.json``
  inside one (its folder is used) — or the output of a baselining job of Model Monitor's analyzer image
  (``DefaultModelMonitor.suggest_baseline``), which is such a version folder; in servekit up's own S3 store too
  (``s3://``, read from the store's files). Or SageMaker's own ``statistics.json`` and/or ``constraints.json``
  (:mod:`~servekit.services.monitoring.schedules.baselines`). Data quality without a baseline computes the window's
  statistics only (``statistics.json``, no checks), as SageMaker does.
- ``*JobInput.EndpointInput.EndpointName``: the endpoint whose capture is read: the ``DataCaptureConfig``
  destination of its endpoint config at run time, ``<DestinationS3Uri>/<endpoint>/``. ``StartTimeOffset`` and
  ``EndTimeOffset`` (model quality's label delay) replace the schedule's ``DataAnalysis*Time``.
- ``DataQualityJobInput.BatchTransformInput``: a batch transform job's capture under ``DataCapturedDestinationS3Uri``
  instead of an endpoint's (:mod:`~servekit.services.monitoring.schedules.batch`), data quality only.
- ``*JobOutputConfig.MonitoringOutputs[0].S3Output.S3Uri``: where each execution writes, under
  ``<uri>/<endpoint>/<schedule>/yyyy/mm/dd/hh/`` as SageMaker does (time-compressed schedules add ``/MMSS``); an
  ``s3://`` URI of servekit up's own store is written locally, then put into the store
  (:mod:`~servekit.services.monitoring.schedules.locations`).
- ``*AppSpecification.ContainerArguments``: more flags for the ``servekit monitor`` command (e.g.
  ``["--min-window-rows", "50"]``); the flags the scheduler sets itself are refused. ``ImageUri`` is required by
  the API and not used (servekit runs its own monitor). ``Environment["publish_cloudwatch_metrics"] =
  "Disabled"`` records no metrics.
- ``StoppingCondition.MaxRuntimeInSeconds`` (default 3600): an execution running longer is stopped and Failed.
- Model quality: ``ModelQualityJobInput.GroundTruthS3Input.S3Uri`` is a label store (``servekit monitor labels
  --store``; labels join captured requests by inference id), ``ModelQualityAppSpecification.ProblemType`` the
  problem type, ``EndpointInput.InferenceAttribute``/``ProbabilityAttribute``/``ProbabilityThresholdAttribute``
  where the prediction is in the captured answer, and the baseline a model-quality ``constraints.json``.

Locations are local: a path or ``file://`` URI (the monitor runs on this machine); a baseline, an output and a batch
transform's capture may also be ``s3://`` URIs of servekit up's own store (:data:`ObjectPaths`), another bucket is
refused. Record preprocessor and post-analytics scripts and ``ContainerEntrypoint`` are refused with what to do
instead.
"""

from __future__ import annotations

import enum
import json
import math
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from servekit.services.monitoring.schedules.baselines import STAGED, BaselineSource
from servekit.services.monitoring.schedules.baselines import resolve as resolve_baseline
from servekit.services.monitoring.schedules.batch import BatchInput, batch_input
from servekit.services.monitoring.schedules.lifecycle import ExecutionStatus
from servekit.services.monitoring.schedules.locations import JobSpecError as JobSpecError
from servekit.services.monitoring.schedules.locations import ObjectPaths as ObjectPaths
from servekit.services.monitoring.schedules.locations import local_path as local_path
from servekit.services.monitoring.schedules.locations import no_objects as no_objects
from servekit.services.monitoring.schedules.locations import output_location, own_bucket

DEFAULT_MAX_RUNTIME_S = 3600
PUBLISH_ENV = "publish_cloudwatch_metrics"
# The flags the scheduler sets on ``servekit monitor run``: a job definition may not override them.
RESERVED_FLAGS = frozenset(
    {
        "--baseline",
        "--data",
        "--out",
        "--output",
        "--since",
        "--until",
        "--window",
        "--step",
        "--capture",
        "--labels",
        "--publish-url",
        "--home",
        "--endpoint-name",
        "--problem-type",
    }
)
# Where each execution's metrics go (besides servekit's own namespace, which monitor --publish-url also uses).
SERVEKIT_NAMESPACE = "servekit"
DATA_METRICS_NAMESPACE = "aws/sagemaker/Endpoints/data-metrics"
MODEL_METRICS_NAMESPACE = "aws/sagemaker/Endpoints/model-metrics"
NO_DATA = "Job inputs had no data"
# What an execution without a baseline runs: the window's statistics.json (SageMaker's shape), no checks.
WINDOW_STATISTICS = "servekit.services.monitoring.baseline.window_statistics"


class MonitoringType(enum.StrEnum):
    DATA_QUALITY = "DataQuality"
    MODEL_QUALITY = "ModelQuality"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A monitoring job definition, checked: everything an execution needs besides the window."""

    type: MonitoringType
    endpoint_name: str  # "" when the input is a batch transform's capture
    baseline: str | None  # a local folder: a servekit baseline (or one of its versions); None: see below
    output: str  # a local folder: executions write under it
    output_uri: str = ""  # the s3:// URI of servekit up's store the output folder's files are put under ("": none)
    batch: BatchInput | None = None  # BatchTransformInput: the batch transform capture monitored
    extra_args: tuple[str, ...] = ()
    max_runtime_s: int = DEFAULT_MAX_RUNTIME_S
    publish_metrics: bool = True
    start_offset: str | None = None  # EndpointInput's, replacing the schedule's DataAnalysisStartTime
    end_offset: str | None = None
    ground_truth: str | None = None  # model quality: the labels store (a local folder or file)
    problem_type: str | None = None
    inference_attribute: str | None = None
    probability_attribute: str | None = None
    probability_threshold: float | None = None
    image_uri: str = ""
    role_arn: str = ""
    resources: dict[str, Any] = field(default_factory=dict)
    environment: dict[str, str] = field(default_factory=dict)
    # data quality: SageMaker's own baseline files (local paths; either may be None), when ``baseline`` is None; with
    # neither, executions compute the window's statistics only
    sagemaker_baseline: BaselineSource | None = None

    @property
    def statistics_only(self) -> bool:
        return self.type is MonitoringType.DATA_QUALITY and self.baseline is None and self.sagemaker_baseline is None


def baseline_folder(uri: str, where: str, objects: ObjectPaths = no_objects) -> str:
    """The servekit baseline folder ``uri`` names (its folder when it names constraints.json/statistics.json): a
    local one, or one in servekit up's own S3 store (``objects``)."""
    if uri.startswith("s3://"):
        prefix = uri.rsplit("/", 1)[0] if uri.endswith(".json") else uri.rstrip("/")
        found = objects(prefix + "/")
        if found is None:
            raise JobSpecError(
                f"{where} {uri!r} is not in servekit up's own S3 store (no such bucket or prefix): servekit reads a "
                "baseline from this machine: a local path, a file:// URI or an s3:// URI of its own store."
            )
        path = found
    else:
        path = Path(local_path(uri, where))
        if path.suffix == ".json":
            path = path.parent
    if not ((path / "CURRENT").is_file() or (path / "baseline.json").is_file()):
        raise JobSpecError(
            f"{where} {uri!r} is not a baseline made by servekit monitor baseline or by a baselining job of Model "
            f"Monitor's analyzer image (DefaultModelMonitor.suggest_baseline): no CURRENT or baseline.json in "
            f"{path}; servekit judges drift against its own baseline summaries."
        )
    return str(path)


def spec_from_definition(
    type_: MonitoringType, request: Mapping[str, Any], objects: ObjectPaths = no_objects, scratch: Path | None = None
) -> JobSpec:
    """A Create{DataQuality,ModelQuality}JobDefinition request as a :class:`JobSpec` (``objects``: where ``s3://``
    URIs of servekit up's own store are on disk; ``scratch``: where executions whose output is such a URI write
    before their files go to the store; without it an ``s3://`` output is refused)."""
    prefix = type_.value
    job_input = request.get(f"{prefix}JobInput") or {}
    app = request.get(f"{prefix}AppSpecification") or {}
    return _spec(
        type_,
        baseline_config=request.get(f"{prefix}BaselineConfig") or {},
        app=app,
        environment=app.get("Environment") or {},
        job_input=job_input,
        input_where=f"{prefix}JobInput",
        output=request.get(f"{prefix}JobOutputConfig") or {},
        output_where=f"{prefix}JobOutputConfig",
        request=request,
        resources=request.get("JobResources") or {},
        objects=objects,
        scratch=scratch,
    )


def spec_from_inline(
    definition: Mapping[str, Any],
    type_: MonitoringType,
    objects: ObjectPaths = no_objects,
    scratch: Path | None = None,
) -> JobSpec:
    """A schedule's inline ``MonitoringJobDefinition`` as a :class:`JobSpec`."""
    inputs = definition.get("MonitoringInputs") or []
    if len(inputs) != 1:
        raise JobSpecError("MonitoringJobDefinition.MonitoringInputs takes exactly one input.")
    return _spec(
        type_,
        baseline_config=definition.get("BaselineConfig") or {},
        app=definition.get("MonitoringAppSpecification") or {},
        environment=definition.get("Environment") or {},
        job_input=inputs[0],
        input_where="MonitoringJobDefinition.MonitoringInputs[0]",
        output=definition.get("MonitoringOutputConfig") or {},
        output_where="MonitoringJobDefinition.MonitoringOutputConfig",
        request=definition,
        resources=definition.get("MonitoringResources") or {},
        objects=objects,
        scratch=scratch,
    )


def _spec(
    type_: MonitoringType,
    *,
    baseline_config: Mapping[str, Any],
    app: Mapping[str, Any],
    environment: Mapping[str, str],
    job_input: Mapping[str, Any],
    input_where: str,
    output: Mapping[str, Any],
    output_where: str,
    request: Mapping[str, Any],
    resources: Mapping[str, Any],
    objects: ObjectPaths,
    scratch: Path | None,
) -> JobSpec:
    given_batch = job_input.get("BatchTransformInput")
    if bool(given_batch) == bool(job_input.get("EndpointInput")):
        raise JobSpecError(f"{input_where} takes exactly one of EndpointInput and BatchTransformInput.")
    batch = None
    if given_batch:
        if type_ is not MonitoringType.DATA_QUALITY:
            raise JobSpecError(
                f"servekit monitors a batch transform's capture for data quality only: give {input_where}."
                "EndpointInput (model quality joins labels to an endpoint's captured predictions by inference id)."
            )
        batch = batch_input(given_batch, input_where)
        _batch_source(batch.destination, f"{input_where}.BatchTransformInput.DataCapturedDestinationS3Uri", objects)
    # the offsets and attributes an execution reads are the same fields in either input
    endpoint_input = given_batch or job_input["EndpointInput"]
    for key in ("RecordPreprocessorSourceUri", "PostAnalyticsProcessorSourceUri", "ContainerEntrypoint"):
        if app.get(key):
            raise JobSpecError(
                f"servekit runs its own monitor and no scripts or entry points of yours: {key} is not supported "
                "(ContainerArguments are passed to servekit monitor as flags)."
            )
    args = tuple(str(a) for a in app.get("ContainerArguments") or ())
    reserved = sorted({a.split("=", 1)[0] for a in args} & RESERVED_FLAGS)
    if reserved:
        raise JobSpecError(
            f"ContainerArguments may not set {', '.join(reserved)}: the schedule sets them from the job definition "
            "and the analysis window."
        )
    outputs = output.get("MonitoringOutputs") or []
    if len(outputs) != 1:
        raise JobSpecError(f"{output_where}.MonitoringOutputs takes exactly one output.")
    out, out_uri = output_location(
        str(outputs[0]["S3Output"]["S3Uri"]), f"{output_where}.MonitoringOutputs[0].S3Output.S3Uri", objects, scratch
    )
    resource = baseline_config.get("ConstraintsResource") or baseline_config.get("StatisticsResource") or {}
    where = f"{type_.value}BaselineConfig" if input_where.endswith("JobInput") else "BaselineConfig"
    baseline = None
    sagemaker_baseline = None
    if type_ is MonitoringType.DATA_QUALITY:
        # None: no baseline; the executions compute statistics only (SageMaker accepts that too)
        source = resolve_baseline(baseline_config, where, objects)
        if source is not None and source.folder is not None:
            baseline = source.folder
        else:
            sagemaker_baseline = source
    elif resource.get("S3Uri"):  # model quality's baseline is its constraints.json itself
        uri = str(resource["S3Uri"])
        baseline = local_path(uri, f"{where}.ConstraintsResource.S3Uri")
        if not Path(baseline).exists():
            raise JobSpecError(f"{where}.ConstraintsResource.S3Uri {uri!r}: no such file.")
    else:
        raise JobSpecError(
            f"servekit judges model quality against constraints: give {where}.ConstraintsResource.S3Uri (the "
            "constraints.json of servekit monitor quality-baseline, or one of your own)."
        )
    ground_truth = problem_type = None
    if type_ is MonitoringType.MODEL_QUALITY:
        truth = (job_input.get("GroundTruthS3Input") or {}).get("S3Uri")
        if not truth:
            raise JobSpecError("Model quality needs ground truth: give ModelQualityJobInput.GroundTruthS3Input.S3Uri.")
        ground_truth = local_path(str(truth), "ModelQualityJobInput.GroundTruthS3Input.S3Uri")
        problem_type = app.get("ProblemType")
        if not problem_type:
            raise JobSpecError(
                "Model quality needs ModelQualityAppSpecification.ProblemType (BinaryClassification, "
                "MulticlassClassification or Regression)."
            )
    publish = str(environment.get(PUBLISH_ENV, "Enabled"))
    if publish not in ("Enabled", "Disabled"):
        raise JobSpecError(f"Environment {PUBLISH_ENV} must be Enabled or Disabled, not {publish!r}.")
    threshold = endpoint_input.get("ProbabilityThresholdAttribute")
    return JobSpec(
        type=type_,
        endpoint_name="" if batch else str(endpoint_input["EndpointName"]),
        baseline=baseline,
        output=out,
        output_uri=out_uri,
        batch=batch,
        extra_args=args,
        max_runtime_s=int((request.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds") or DEFAULT_MAX_RUNTIME_S),
        publish_metrics=publish == "Enabled",
        start_offset=endpoint_input.get("StartTimeOffset"),
        end_offset=endpoint_input.get("EndTimeOffset"),
        ground_truth=ground_truth,
        problem_type=problem_type,
        inference_attribute=endpoint_input.get("InferenceAttribute"),
        probability_attribute=endpoint_input.get("ProbabilityAttribute"),
        probability_threshold=None if threshold is None else float(threshold),
        image_uri=str(app.get("ImageUri", "")),
        role_arn=str(request.get("RoleArn", "")),
        resources=dict(resources),
        environment={str(k): str(v) for k, v in environment.items()},
        sagemaker_baseline=sagemaker_baseline,
    )


def _batch_source(uri: str, where: str, objects: ObjectPaths) -> None:
    """A batch transform capture must be where an execution can read it: on this machine or in servekit up's own
    store (it may not exist yet: the transform job may run later)."""
    if uri.startswith("s3://"):
        if not own_bucket(uri, objects):
            raise JobSpecError(
                f"{where} {uri!r} is not in servekit up's own S3 store (no such bucket): servekit reads a batch "
                "transform's capture from this machine: a local path, a file:// URI or an s3:// URI of its own store."
            )
    else:
        local_path(uri, where)


# ---------------------------------------------------------------------------------------------- running
def iso(t: float) -> str:
    """Epoch seconds as the monitor's ISO 8601 (whole seconds, UTC)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def output_folder(spec: JobSpec, schedule: str, fire: float, compressed: bool) -> str:
    """``<output>/<endpoint>/<schedule>/yyyy/mm/dd/hh`` (``/MMSS`` more when hours are compressed); for a batch
    transform's capture the last segment of its ``DataCapturedDestinationS3Uri`` (the transform job's capture folder)
    stands for the endpoint."""
    t = datetime.fromtimestamp(fire, UTC)
    parts = t.strftime("%Y/%m/%d/%H/%M%S" if compressed else "%Y/%m/%d/%H")
    source = spec.endpoint_name or (spec.batch.destination.rstrip("/").rsplit("/", 1)[-1] if spec.batch else "batch")
    return f"{spec.output.rstrip('/')}/{source}/{schedule}/{parts}"


def monitor_command(
    spec: JobSpec, data: str, out: str, since: float, until: float, python: str = sys.executable
) -> list[str]:
    """The ``servekit monitor`` command of one execution over ``[since, until)`` of the capture under ``data``.

    Each judges exactly one window: ``--window`` is the whole span and ``--step`` a divisor of both the span and
    ``until`` (windows end on multiples of the step since the epoch), so the one window that fits in
    ``[since, until)`` is that span."""
    start, end = math.floor(since), math.floor(until)
    span = max(1, end - start)
    step = math.gcd(end, span) or span
    base = [python, "-m", "servekit.cli.main", "monitor"]
    if spec.statistics_only:
        # the job's ContainerArguments are monitor run's flags: they do not apply to statistics alone
        return [python, "-m", WINDOW_STATISTICS, "--data", data, "--out", out, "--since", iso(start), "--until",
                iso(end)]  # fmt: skip
    if spec.type is MonitoringType.DATA_QUALITY:
        # SageMaker's files: the execution copies them into <out>/.baseline first (baselines.stage)
        baseline = spec.baseline if spec.baseline is not None else f"{out.rstrip('/')}/{STAGED}"
        return [
            *base,
            "run",
            "--baseline",
            baseline,
            "--data",
            data,
            "--out",
            out,
            "--since",
            iso(start),
            "--until",
            iso(end),
            "--window",
            f"{span}s",
            "--step",
            f"{step}s",
            *spec.extra_args,
        ]
    assert spec.ground_truth is not None and spec.baseline is not None
    cmd = [*base, "quality", "run", "--capture", data, "--labels", spec.ground_truth, "--baseline", spec.baseline]
    cmd += ["--output", out, "--since", iso(start), "--until", iso(end), "--window", f"{span}s", "--step", f"{step}s"]
    for flag, value in (
        ("--problem-type", spec.problem_type),
        ("--inference-attribute", spec.inference_attribute),
        ("--probability-attribute", spec.probability_attribute),
        ("--probability-threshold", spec.probability_threshold),
    ):
        if value is not None:
            cmd += [flag, str(value)]
    return [*cmd, *spec.extra_args]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an execution found, from its files."""

    status: ExecutionStatus
    exit_message: str = ""
    failure_reason: str = ""
    rows: int = 0
    judged: bool = False
    counts: dict[str, float] = field(default_factory=dict)  # servekit's metrics (DriftedFeatures …)
    features: dict[str, float] = field(default_factory=dict)  # feature -> its drift distance (KS or JS)
    quality: dict[str, float] = field(default_factory=dict)  # model quality metrics by SageMaker's names
    violations_uri: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "judged": self.judged,
            "counts": self.counts,
            "features": self.features,
            "quality": self.quality,
            "violations_uri": self.violations_uri,
        }


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _finished(violations: int, uri: str, rows: int, **kw: Any) -> Outcome:
    if violations:
        return Outcome(
            ExecutionStatus.COMPLETED_WITH_VIOLATIONS,
            f"CompletedWithViolations: Job completed successfully with {violations} violations.",
            rows=rows,
            violations_uri=uri,
            **kw,
        )
    return Outcome(
        ExecutionStatus.COMPLETED, "Completed: Job completed successfully with no violations.", rows=rows,
        violations_uri=uri, **kw
    )  # fmt: skip


def read_data_quality(out: Path) -> Outcome:
    """The outcome of ``servekit monitor run`` in ``out`` (its ``metrics.json`` and the window's
    ``constraint_violations.json``, copied to ``out/constraint_violations.json`` where SageMaker puts it).

    Drifted features count as ``servekit monitor run --publish-url`` counts them: in the judged window, the
    features whose ``drifted`` is true (missing-value jumps are data quality, not drift)."""
    doc = _load(out / "metrics.json")
    windows = doc.get("windows") or []
    if not windows or not any(w.get("rows") for w in windows):
        return Outcome(ExecutionStatus.FAILED, failure_reason=f"{NO_DATA}: no captured request in the window.")
    window = windows[-1]
    source = out / "windows" / str(window["end"]).replace(":", "-") / "constraint_violations.json"
    report = out / "constraint_violations.json"
    entries: list[Any] = []
    if source.is_file():
        shutil.copyfile(source, report)
        entries = list(_load(report).get("violations") or [])
    rows = int(window.get("rows") or 0)
    features = window.get("features") or {}
    if window.get("status") != "ok":
        return Outcome(
            ExecutionStatus.COMPLETED,
            f"Completed: {rows} rows in the window, too few to judge (--min-window-rows).",
            rows=rows,
            violations_uri=f"file://{report}" if report.is_file() else "",
        )
    distances: dict[str, float] = {}
    for name, f in features.items():
        metrics = f.get("metrics") or {}
        value = metrics.get("ks_statistic", metrics.get("js_distance"))
        if isinstance(value, (int, float)) and math.isfinite(value):
            distances[str(name)] = float(value)
    counts = {
        "DriftedFeatures": float(sum(1 for f in features.values() if f.get("drifted"))),
        "DataQualityViolations": float(len(entries)),
        "DriftAlarms": float(len(doc.get("alarms") or [])),
    }
    return _finished(
        len(entries), f"file://{report}" if report.is_file() else "", rows, judged=True, counts=counts,
        features=distances
    )  # fmt: skip


def read_statistics_only(out: Path) -> Outcome:
    """The outcome of an execution without a baseline (``window_statistics``'s ``window.json`` and
    ``statistics.json``): Completed with the window's statistics, nothing judged; Failed when the window had no rows."""
    doc = _load(out / "window.json")
    rows = int(doc.get("rows") or 0)
    if not rows:
        return Outcome(ExecutionStatus.FAILED, failure_reason=f"{NO_DATA}: no captured request in the window.")
    return Outcome(
        ExecutionStatus.COMPLETED,
        f"Completed: Job completed successfully: statistics of {rows} rows, no baseline to check them against.",
        rows=rows,
    )


def read_model_quality(out: Path) -> Outcome:
    """The outcome of ``servekit monitor quality run`` in ``out``: the window of its ``quality_metrics.json`` (its
    metrics already carry SageMaker's model-quality names: ``accuracy``, ``f1``, ``auc``, ``weighted_f1``, ``mae``,
    ``rmse``, ``r2``…) and ``constraint_violations.json`` (the judged window's, where SageMaker puts it)."""
    doc = _load(out / "quality_metrics.json")
    windows = doc.get("windows") or []
    window = windows[-1] if windows else {}
    predictions, labelled = int(window.get("predictions") or 0), int(window.get("labelled") or 0)
    if not predictions:
        return Outcome(ExecutionStatus.FAILED, failure_reason=f"{NO_DATA}: no captured prediction in the window.")
    if not labelled:
        return Outcome(
            ExecutionStatus.FAILED,
            failure_reason=f"{NO_DATA}: no ground truth label joined the window's {predictions} captured predictions "
            "(labels are joined by inference id; add them with servekit monitor labels).",
        )
    report = out / "constraint_violations.json"
    uri = f"file://{report}" if report.is_file() else ""
    if window.get("status") != "ok":
        return Outcome(
            ExecutionStatus.COMPLETED,
            f"Completed: {labelled} labelled predictions in the window, too few to judge (--min-window-rows).",
            rows=labelled,
            violations_uri=uri,
        )
    quality = {
        str(name): float(value)
        for name, value in (window.get("metrics") or {}).items()
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    }
    entries = list(_load(report).get("violations") or []) if report.is_file() else []
    counts = {"ModelQualityViolations": float(len(entries))}
    return _finished(len(entries), uri, labelled, judged=True, counts=counts, quality=quality)


def metric_data(
    outcome: Outcome, endpoint: str, schedule: str, type_: MonitoringType
) -> list[tuple[str, str, tuple[tuple[str, str], ...], float]]:
    """(namespace, metric, dimensions, value) to record for a finished execution; nothing unless a window was
    judged. servekit's counts go under ``EndpointName`` (what an alarm written for ``monitor run --publish-url``
    watches) and under ``EndpointName``+``MonitoringSchedule``; SageMaker's per-feature drift and quality metrics
    under its own namespaces and dimensions (``Endpoint``, ``MonitoringSchedule``)."""
    if not outcome.judged:
        return []
    ours = ((("EndpointName", endpoint),), (("EndpointName", endpoint), ("MonitoringSchedule", schedule)))
    sagemaker = (("Endpoint", endpoint), ("MonitoringSchedule", schedule))
    out: list[tuple[str, str, tuple[tuple[str, str], ...], float]] = []
    for name, value in outcome.counts.items():
        out += [(SERVEKIT_NAMESPACE, name, dims, value) for dims in ours]
    if type_ is MonitoringType.DATA_QUALITY:
        out += [
            (DATA_METRICS_NAMESPACE, f"feature_baseline_drift_{name}", sagemaker, v)
            for name, v in outcome.features.items()
        ]
    else:
        out += [(MODEL_METRICS_NAMESPACE, name, sagemaker, v) for name, v in outcome.quality.items()]
    return out


def last_line(text: str, limit: int = 1024) -> str:
    """The last non-empty line of a command's output (its one-line error), cut to FailureReason's 1024."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return (lines[-1] if lines else "")[:limit]
