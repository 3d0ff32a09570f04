"""What a monitoring schedule runs, read from its MonitoringScheduleConfig: the job definition (named or inline) as a
:class:`~servekit.services.monitoring.schedules.jobs.JobSpec`, the schedule expression, the analysis window's offsets
and the
time compression; and where the endpoint it watches captures. Shared by the API (which refuses a config that does not
make a plan) and the scheduler (which runs the plan stored with the schedule)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servekit.aws.errors import validation_exception
from servekit.aws.names import Account
from servekit.services.hosting.store import Hosting
from servekit.services.monitoring.schedules.cron import (
    HOUR_S,
    MonitoringCron,
    Offsets,
    ScheduleExpressionError,
    parse_expression,
    parse_offsets,
)
from servekit.services.monitoring.schedules.jobs import (
    JobSpec,
    JobSpecError,
    MonitoringType,
    ObjectPaths,
    local_path,
    no_objects,
    spec_from_definition,
    spec_from_inline,
)
from servekit.services.monitoring.schedules.locations import PutObject, store_folder
from servekit.services.monitoring.schedules.store import Monitoring

HOUR_TAG = "servekit:hour-seconds"
# A processing job's name -> its first output's S3Uri (None: no such job), handed in by the composition root.
BaseliningOutput = Callable[[str], str | None]


@dataclass(frozen=True, slots=True)
class Plan:
    """A schedule as the scheduler runs it: when, on what, and how compressed."""

    cron: MonitoringCron
    offsets: Offsets
    hour_s: int
    spec: JobSpec


class Planner:
    def __init__(
        self,
        repo: Monitoring,
        hosting: Hosting,
        account: Account | None = None,
        objects: ObjectPaths = no_objects,
        *,
        put: PutObject | None = None,
        scratch: Path | None = None,
        baselining_output: BaseliningOutput | None = None,
    ) -> None:
        """``objects``: an ``s3://`` URI of servekit up's own S3 store as the file or folder holding it (a baseline
        there, such as a baselining job's output, is read from disk; an endpoint's capture there is read from its
        folder). ``put`` puts a file into that store as an object and ``scratch`` is the folder executions whose
        output is an ``s3://`` URI of the store write in first: without both such an output is refused.
        ``baselining_output``: a processing job's (a baselining job's) first output ``S3Uri`` by its name, for a
        ``DataQualityBaselineConfig`` that names only its ``BaseliningJobName``; without it such a name is ignored."""
        self.repo = repo
        self._hosting = hosting
        self._account = account or Account()
        self.objects = objects
        self.put = put
        self._scratch = scratch if put is not None else None
        self._baselining_output = baselining_output

    def with_baselining_job(self, type_: MonitoringType, request: Mapping[str, Any]) -> dict[str, Any]:
        """``request`` with the files of its ``BaseliningJobName`` as ``StatisticsResource``/``ConstraintsResource``
        when it names the job and neither file: the SDK's ``create_monitoring_schedule()`` after ``suggest_baseline``
        sends only the name, SageMaker uses that job's outputs and DescribeDataQualityJobDefinition answers them."""
        key = f"{type_.value}BaselineConfig"
        config = dict(request.get(key) or {})
        job = config.get("BaseliningJobName")
        if (
            type_ is not MonitoringType.DATA_QUALITY
            or not job
            or config.get("StatisticsResource")
            or config.get("ConstraintsResource")
            or self._baselining_output is None
        ):
            return dict(request)
        output = self._baselining_output(str(job))
        if output is None:
            raise validation_exception(f"{key}.BaseliningJobName: no processing job {job} with an output.")
        root = output.rstrip("/")
        config["StatisticsResource"] = {"S3Uri": f"{root}/statistics.json"}
        config["ConstraintsResource"] = {"S3Uri": f"{root}/constraints.json"}
        return {**request, key: config}

    def definition_spec(self, type_: MonitoringType, request: Mapping[str, Any]) -> JobSpec:
        """A Create*JobDefinition request as a :class:`JobSpec` (JobSpecError when servekit cannot run it)."""
        return spec_from_definition(type_, request, self.objects, self._scratch)

    def plan(self, config: Mapping[str, Any], tags: Mapping[str, str]) -> tuple[MonitoringType, str | None, Plan]:
        """A MonitoringScheduleConfig (and the schedule's tags) checked: its type, job definition name and plan."""
        by_name = config.get("MonitoringJobDefinitionName")
        inline = config.get("MonitoringJobDefinition")
        if bool(by_name) == bool(inline):
            raise validation_exception(
                "MonitoringScheduleConfig needs exactly one of MonitoringJobDefinitionName (with MonitoringType) and "
                "MonitoringJobDefinition."
            )
        given = config.get("MonitoringType")
        if given is not None and given not in set(MonitoringType):
            raise validation_exception(f"servekit runs DataQuality and ModelQuality monitoring, not {given}.")
        try:
            if by_name:
                row = self.repo.get_definition(str(by_name))
                if row is None:
                    raise validation_exception(f"Job definition {by_name} does not exist.")
                type_ = MonitoringType(row.type)
                if given is not None and given != type_.value:
                    raise validation_exception(
                        f"Job definition {by_name} is a {type_.value} job definition, not {given}."
                    )
                spec = spec_from_definition(type_, row.request, self.objects, self._scratch)
                definition_name: str | None = row.name
            else:
                type_ = MonitoringType(given or MonitoringType.DATA_QUALITY)
                spec = spec_from_inline(inline or {}, type_, self.objects, self._scratch)
                definition_name = None
            schedule_config = config.get("ScheduleConfig") or {}
            cron = parse_expression(schedule_config.get("ScheduleExpression"))
            start = spec.start_offset or schedule_config.get("DataAnalysisStartTime")
            end = spec.end_offset or schedule_config.get("DataAnalysisEndTime")
            offsets = parse_offsets(start, end, cron, "ScheduleConfig")
        except (JobSpecError, ScheduleExpressionError) as exc:
            raise validation_exception(str(exc)) from None
        return type_, definition_name, Plan(cron, offsets, _hour_seconds(tags), spec)

    def check_input(self, spec: JobSpec) -> None:
        """ValidationException unless the schedule's input can be read: its endpoint captures (a batch transform's
        capture is checked when the job definition is read, and may come later)."""
        if spec.batch is None:
            self.capture_dir(spec.endpoint_name)

    def capture_uri(self, endpoint: str) -> str:
        """``<DestinationS3Uri>/<endpoint>`` of the endpoint's capture as configured (what DescribeProcessingJob
        names as the execution's input); "" when it captures nothing."""
        capture = self._capture(endpoint)
        if capture is None:
            return ""
        destination = str(capture["DestinationS3Uri"])
        if not destination.startswith(("s3://", "file://")):
            destination = f"file://{destination}"
        return f"{destination.rstrip('/')}/{endpoint}"

    def _capture(self, endpoint: str) -> Mapping[str, Any] | None:
        row = self._hosting.get_endpoint(endpoint)
        if row is None:
            return None
        config = self._hosting.get_endpoint_config(row.config_name)
        capture = config.data_capture if config is not None else None
        if not capture or not capture.get("EnableCapture", True) or not capture.get("DestinationS3Uri"):
            return None
        return capture

    def capture_dir(self, endpoint: str) -> str:
        """Where ``endpoint`` captures now (``<DestinationS3Uri>/<endpoint>``: a local folder, or the folder of
        servekit up's own S3 store a prefix there is kept in); ValidationException if it does not exist or captures
        nothing."""
        row = self._hosting.get_endpoint(endpoint)
        if row is None:
            arn = self._account.arn_of("endpoint", endpoint)  # unchecked: it names what is missing
            raise validation_exception(f'Could not find endpoint "{arn}".')
        config = self._hosting.get_endpoint_config(row.config_name)
        capture = config.data_capture if config is not None else None
        if not capture or not capture.get("EnableCapture", True) or not capture.get("DestinationS3Uri"):
            raise validation_exception(
                f"Endpoint {endpoint} does not capture data: its endpoint config needs a DataCaptureConfig with "
                "EnableCapture and a DestinationS3Uri for a monitoring schedule to read."
            )
        destination = str(capture["DestinationS3Uri"])
        if destination.startswith("s3://"):
            # the endpoint's instances put their capture files into the store through its S3 API: read its folder
            folder = store_folder(f"{destination.rstrip('/')}/{endpoint}", self.objects)
            if folder is None:
                raise validation_exception(
                    f"Endpoint {endpoint} captures to {destination}, which is not in servekit up's own S3 store: "
                    "servekit monitors a capture on this machine (a local path, a file:// URI or its own store)."
                )
            return str(folder)
        try:
            root = local_path(destination, "DataCaptureConfig.DestinationS3Uri")
        except JobSpecError as exc:
            raise validation_exception(str(exc)) from None
        return f"{root.rstrip('/')}/{endpoint}"


def _hour_seconds(tags: Mapping[str, str]) -> int:
    text = tags.get(HOUR_TAG)
    if text is None:
        return HOUR_S
    if not text.isdigit() or not 1 <= int(text) <= HOUR_S:
        raise validation_exception(
            f"Tag {HOUR_TAG} compresses the schedule's hours: an integer number of seconds from 1 to 3600, not "
            f"{text!r}."
        )
    return int(text)
