"""SageMaker's training-job operations on ``servekit up``: CreateTrainingJob (checked, recorded, run by
:class:`~servekit.services.training.runner.TrainingRunner` as a task of the plane), DescribeTrainingJob,
ListTrainingJobs,
StopTrainingJob. Describe answers in botocore's output shape: the request's members, the job's statuses, times,
transitions, artifacts and final metrics."""

from __future__ import annotations

from typing import Any

from servekit.aws.errors import ApiError, validation_exception
from servekit.aws.front import Handler
from servekit.aws.models import service_model
from servekit.aws.names import Account
from servekit.errors import ConfigError
from servekit.services.training import contract
from servekit.services.training.images import unknown_image
from servekit.services.training.inputs import SUPPORTED_DATA_TYPES
from servekit.services.training.jobs import JobTasks, fail_unfinished, list_page, when
from servekit.services.training.lifecycle import SecondaryStatus, TrainingJobStatus
from servekit.services.training.metrics import regex_problem
from servekit.services.training.runner import KIND, TrainingRunner
from servekit.services.training.store import JobExists, SageMakerJobRow, SageMakerJobs

_UNFINISHED = (TrainingJobStatus.IN_PROGRESS.value, TrainingJobStatus.STOPPING.value)


def _described_members() -> frozenset[str]:
    shape = service_model("sagemaker").operation_model("DescribeTrainingJob").output_shape
    return frozenset(shape.members) if shape is not None else frozenset()


class TrainingJobsApi:
    def __init__(self, jobs: SageMakerJobs, runner: TrainingRunner, account: Account) -> None:
        self.jobs = jobs
        self.runner = runner
        self.account = account
        self._tasks = JobTasks()
        self._members = _described_members()

    def handlers(self) -> dict[str, Handler]:
        return {
            "CreateTrainingJob": self.create_training_job,
            "DescribeTrainingJob": self.describe_training_job,
            "ListTrainingJobs": self.list_training_jobs,
            "StopTrainingJob": self.stop_training_job,
        }

    # ---- the plane's background ------------------------------------------------------------------------------
    def start(self) -> None:
        fail_unfinished(self.jobs, KIND, _UNFINISHED, secondary=SecondaryStatus.FAILED.value)

    async def close(self) -> None:
        await self._tasks.close()

    # ---- operations ------------------------------------------------------------------------------------------
    async def create_training_job(self, p: dict[str, Any]) -> dict[str, Any]:
        return self.launch(p)

    async def wait(self, name: str) -> SageMakerJobRow:
        """The job's row once it has ended (a tuning job waits on its training jobs this way)."""
        await self._tasks.wait(name)
        return self._row(name)

    def launch(self, p: dict[str, Any], tuning_arn: str | None = None) -> dict[str, Any]:
        """Check, record and start a training job (``tuning_arn``: the tuning job that launched it)."""
        name = p["TrainingJobName"]
        spec = p.get("AlgorithmSpecification") or {}
        image = spec.get("TrainingImage")
        if not image:
            raise validation_exception(
                "AlgorithmSpecification.TrainingImage is required: servekit does not run AlgorithmName or "
                "marketplace algorithms"
            )
        try:
            resolved = self.runner.images.resolve(image)
        except ConfigError as exc:
            raise validation_exception(str(exc)) from None
        if resolved is None:
            raise validation_exception(unknown_image(image))
        if resolved.own:  # the user's program reads /opt/ml/input/config itself
            pass
        elif contract.script_of(p.get("HyperParameters") or {}) is None and resolved.framework == "xgboost":
            if "num_round" not in (p.get("HyperParameters") or {}):
                raise validation_exception("Missing required hyperparameter: num_round (SageMaker's built-in XGBoost)")
        elif contract.script_of(p.get("HyperParameters") or {}) is None:
            raise validation_exception(
                f"{image} runs in script mode here: give the job a sagemaker_program hyperparameter (the SDK's "
                "entry_point) and its sagemaker_submit_directory; of SageMaker's built-in algorithms servekit runs "
                "XGBoost"
            )
        for d in spec.get("MetricDefinitions") or []:
            problem = regex_problem(str(d.get("Regex", "")))
            if problem:
                raise validation_exception(f"MetricDefinitions {d.get('Name')}: {problem}")
        for ch in p.get("InputDataConfig") or []:
            source = (ch.get("DataSource") or {}).get("S3DataSource")
            if source is None:
                raise validation_exception(f"Channel {ch.get('ChannelName')}: only S3DataSource channels are supported")
            if not str(source.get("S3Uri", "")).startswith("s3://"):
                raise validation_exception(f"Channel {ch.get('ChannelName')}: S3Uri must be an s3:// URI")
            if source.get("S3DataType", "S3Prefix") not in SUPPORTED_DATA_TYPES:
                raise validation_exception(
                    f"Channel {ch.get('ChannelName')}: S3DataType {source.get('S3DataType')} is not supported here "
                    "(S3Prefix and ManifestFile are)"
                )
        if not str(p["OutputDataConfig"].get("S3OutputPath", "")).startswith("s3://"):
            raise validation_exception("OutputDataConfig.S3OutputPath must be an s3:// URI")
        arn = self.account.arn_of("training-job", name)
        try:
            self.jobs.create(KIND, name, arn, p, TrainingJobStatus.IN_PROGRESS.value, SecondaryStatus.STARTING.value)
        except JobExists:
            raise ApiError(
                "ResourceInUse",
                "Training job names must be unique within an AWS account and region, and a "
                f"training job with this name already exists ({arn})",
                400,
            ) from None
        starting = {
            "Status": SecondaryStatus.STARTING.value,
            "StartTime": self.runner.clock(),
            "StatusMessage": "Preparing the instances for training",
        }
        extra = {"TuningJobArn": tuning_arn} if tuning_arn else {}
        self.jobs.update(KIND, name, details={"SecondaryStatusTransitions": [starting], **extra})
        self._tasks.start(name, self.runner.run(name))
        return {"TrainingJobArn": arn}

    def _row(self, name: str) -> SageMakerJobRow:
        row = self.jobs.get(KIND, name)
        if row is None:
            raise validation_exception(f"Requested resource not found: training job {name} does not exist")
        return row

    async def describe_training_job(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._row(p["TrainingJobName"])
        return self.describe(row)

    def describe(self, row: SageMakerJobRow) -> dict[str, Any]:
        req, d = row.request, row.details
        base = str((req.get("OutputDataConfig") or {}).get("S3OutputPath", "")).rstrip("/")
        out: dict[str, Any] = {k: v for k, v in req.items() if k in self._members and k != "Tags"}
        out.update(
            TrainingJobName=row.name,
            TrainingJobArn=row.arn,
            TrainingJobStatus=row.status,
            SecondaryStatus=row.secondary,
            CreationTime=when(row.created),
            LastModifiedTime=when(row.modified),
            ModelArtifacts=d.get("ModelArtifacts") or {"S3ModelArtifacts": f"{base}/{row.name}/output/model.tar.gz"},
            StoppingCondition=req.get("StoppingCondition") or {"MaxRuntimeInSeconds": 86400},
        )
        out.setdefault("ResourceConfig", {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 30})
        # AWS says an output with no KMS key as an empty KmsKeyId (the SDK's attach() reads it)
        out["OutputDataConfig"] = {"KmsKeyId": "", **(out.get("OutputDataConfig") or {})}
        for key in ("TrainingStartTime", "TrainingEndTime"):
            if d.get(key) is not None:
                out[key] = when(d[key])
        for key in ("TrainingTimeInSeconds", "BillableTimeInSeconds"):
            if d.get(key) is not None:
                out[key] = d[key]
        if row.failure_reason:
            out["FailureReason"] = row.failure_reason
        if d.get("TuningJobArn"):
            out["TuningJobArn"] = d["TuningJobArn"]
        transitions = d.get("SecondaryStatusTransitions") or []
        out["SecondaryStatusTransitions"] = [
            {k: (when(v) if k.endswith("Time") else v) for k, v in t.items()} for t in transitions
        ]
        if d.get("FinalMetricDataList"):
            out["FinalMetricDataList"] = [{**m, "Timestamp": when(m["Timestamp"])} for m in d["FinalMetricDataList"]]
        return out

    async def list_training_jobs(self, p: dict[str, Any]) -> dict[str, Any]:
        page = list_page(self.jobs, KIND, p)
        summaries = [
            {
                "TrainingJobName": r.name,
                "TrainingJobArn": r.arn,
                "CreationTime": when(r.created),
                "TrainingEndTime": when(r.ended),
                "LastModifiedTime": when(r.modified),
                "TrainingJobStatus": r.status,
                "SecondaryStatus": r.secondary,
            }
            for r in page.items
        ]
        out: dict[str, Any] = {
            "TrainingJobSummaries": [{k: v for k, v in s.items() if v is not None} for s in summaries]
        }
        if page.next_token:
            out["NextToken"] = page.next_token
        return out

    async def stop_training_job(self, p: dict[str, Any]) -> dict[str, Any]:
        row = self._row(p["TrainingJobName"])
        status = TrainingJobStatus(row.status)
        if status is TrainingJobStatus.STOPPING:
            return {}
        if status is not TrainingJobStatus.IN_PROGRESS:
            raise validation_exception(f"The training job {row.name} is {status}; only an InProgress job stops")
        self.jobs.update(
            KIND, row.name, status=TrainingJobStatus.STOPPING.value, secondary=SecondaryStatus.STOPPING.value
        )
        self.runner.stop(row.name, "Stopped by the user")
        return {}
