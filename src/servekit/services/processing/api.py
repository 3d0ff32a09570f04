"""SageMaker's processing-job operations on ``servekit up``: CreateProcessingJob (checked, recorded, run by
:class:`~servekit.services.processing.runner.ProcessingRunner`), DescribeProcessingJob, ListProcessingJobs,
StopProcessingJob, in botocore's shapes."""

from __future__ import annotations

from typing import Any

from servekit.aws.errors import ApiError, validation_exception
from servekit.aws.front import Handler
from servekit.aws.models import service_model
from servekit.aws.names import Account
from servekit.errors import ConfigError
from servekit.services.processing.lifecycle import ProcessingJobStatus
from servekit.services.processing.runner import DEFAULT_MAX_RUNTIME_S, KIND, ProcessingRunner, local_path_problem
from servekit.services.training.inputs import SUPPORTED_DATA_TYPES
from servekit.services.training.jobs import JobTasks, fail_unfinished, list_page, when
from servekit.services.training.store import JobExists, SageMakerJobRow, SageMakerJobs

_UNFINISHED = (ProcessingJobStatus.IN_PROGRESS.value, ProcessingJobStatus.STOPPING.value)


class ProcessingJobsApi:
    def __init__(
        self,
        jobs: SageMakerJobs,
        runner: ProcessingRunner,
        account: Account,
        describe_other: Handler | None = None,
    ) -> None:
        """``describe_other``: DescribeProcessingJob of processing jobs servekit runs elsewhere (Model Monitor's
        executions), asked for a name that is not one of these jobs."""
        self._describe_other = describe_other
        self.jobs = jobs
        self.runner = runner
        self.account = account
        self._tasks = JobTasks()
        shape = service_model("sagemaker").operation_model("DescribeProcessingJob").output_shape
        self._members = frozenset(shape.members) if shape is not None else frozenset()

    def handlers(self) -> dict[str, Handler]:
        return {
            "CreateProcessingJob": self.create_processing_job,
            "DescribeProcessingJob": self.describe_processing_job,
            "ListProcessingJobs": self.list_processing_jobs,
            "StopProcessingJob": self.stop_processing_job,
        }

    def start(self) -> None:
        fail_unfinished(self.jobs, KIND, _UNFINISHED)

    async def close(self) -> None:
        await self._tasks.close()

    async def create_processing_job(self, p: dict[str, Any]) -> dict[str, Any]:
        name = p["ProcessingJobName"]
        for item in p.get("ProcessingInputs") or []:
            s3 = item.get("S3Input")
            if s3 is None:
                raise validation_exception(f"Input {item.get('InputName')}: only S3Input inputs are supported")
            problem = local_path_problem(str(s3.get("LocalPath", "")))
            if problem:
                raise validation_exception(f"Input {item.get('InputName')}: {problem}")
            if not str(s3.get("S3Uri", "")).startswith("s3://"):
                raise validation_exception(f"Input {item.get('InputName')}: S3Uri must be an s3:// URI")
            if s3.get("S3DataType", "S3Prefix") not in SUPPORTED_DATA_TYPES:
                raise validation_exception(
                    f"Input {item.get('InputName')}: S3DataType {s3.get('S3DataType')} is not supported here "
                    "(S3Prefix and ManifestFile are)"
                )
        for item in (p.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
            s3 = item.get("S3Output")
            if s3 is None:
                raise validation_exception(f"Output {item.get('OutputName')}: only S3Output outputs are supported")
            problem = local_path_problem(str(s3.get("LocalPath", "")))
            if problem:
                raise validation_exception(f"Output {item.get('OutputName')}: {problem}")
        if not (p["AppSpecification"].get("ContainerEntrypoint")):
            uri = str(p["AppSpecification"].get("ImageUri") or "")
            try:
                image = self.runner.images.resolve(uri)
            except ConfigError as exc:
                raise validation_exception(str(exc)) from None
            if image is None or not image.own:
                raise validation_exception(
                    "AppSpecification.ContainerEntrypoint is required here: servekit runs the command the job names "
                    f"(an image's own entrypoint is not known without the image), or the command you map the image "
                    f"to: servekit images add {uri} --command 'python3 /path/to/program.py'"
                )
        arn = self.account.arn_of("processing-job", name)
        try:
            self.jobs.create(KIND, name, arn, p, ProcessingJobStatus.IN_PROGRESS.value, "")
        except JobExists:
            raise ApiError(
                "ResourceInUse",
                f"Processing job names must be unique within an AWS account and region; {arn} exists",
                400,
            ) from None
        self._tasks.start(name, self.runner.run(name))
        return {"ProcessingJobArn": arn}

    def _row(self, name: str) -> SageMakerJobRow:
        row = self.jobs.get(KIND, name)
        if row is None:
            raise validation_exception(f"Could not find requested job with name {name}")
        return row

    async def describe_processing_job(self, p: dict[str, Any]) -> dict[str, Any]:
        if self._describe_other is not None and self.jobs.get(KIND, p["ProcessingJobName"]) is None:
            return await self._describe_other(p)
        row = self._row(p["ProcessingJobName"])
        d = row.details
        out: dict[str, Any] = {k: v for k, v in row.request.items() if k in self._members and k != "Tags"}
        out.setdefault("StoppingCondition", {"MaxRuntimeInSeconds": DEFAULT_MAX_RUNTIME_S})  # AWS's default, said
        out.update(
            ProcessingJobName=row.name,
            ProcessingJobArn=row.arn,
            ProcessingJobStatus=row.status,
            CreationTime=when(row.created),
            LastModifiedTime=when(row.modified),
        )
        for key in ("ProcessingStartTime", "ProcessingEndTime"):
            if d.get(key) is not None:
                out[key] = when(d[key])
        if row.failure_reason:
            out["FailureReason" if row.status == ProcessingJobStatus.FAILED else "ExitMessage"] = row.failure_reason
        return out

    async def list_processing_jobs(self, p: dict[str, Any]) -> dict[str, Any]:
        page = list_page(self.jobs, KIND, p)
        out: dict[str, Any] = {
            "ProcessingJobSummaries": [
                {
                    k: v
                    for k, v in {
                        "ProcessingJobName": r.name,
                        "ProcessingJobArn": r.arn,
                        "CreationTime": when(r.created),
                        "ProcessingEndTime": when(r.ended),
                        "LastModifiedTime": when(r.modified),
                        "ProcessingJobStatus": r.status,
                        "FailureReason": r.failure_reason or None,
                    }.items()
                    if v is not None
                }
                for r in page.items
            ]
        }
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    async def stop_processing_job(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._row(p["ProcessingJobName"])
        status = ProcessingJobStatus(row.status)
        if status is ProcessingJobStatus.STOPPING:
            return {}
        if status is not ProcessingJobStatus.IN_PROGRESS:
            raise validation_exception(f"The processing job {row.name} is {status}; only an InProgress job stops")
        self.jobs.update(KIND, row.name, status=ProcessingJobStatus.STOPPING.value)
        self.runner.stop(row.name, "Stopped by the user")
        return {}
