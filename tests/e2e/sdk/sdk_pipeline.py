"""The seeds' pipeline written with the SageMaker SDK's workflow classes, run unchanged (make test-sdk) against
servekit up after `eval "$(servekit env)"`: ProcessingStep (two outputs) -> TrainingStep (reading one through the
step's properties) -> evaluation ProcessingStep with a PropertyFile -> ConditionStep on JsonGet against a
ParameterFloat -> ModelStep registering the model, or a FailStep with a Join'ed message. Then a second pipeline with
a TuningStep, a ModelStep creating a model and a TransformStep. Prints ``STEP <name> <json>`` lines."""

import json
import sys
from pathlib import Path

import botocore.exceptions
import sagemaker
from sagemaker import image_uris
from sagemaker.inputs import TrainingInput
from sagemaker.model import Model
from sagemaker.model_metrics import MetricsSource, ModelMetrics
from sagemaker.processing import ProcessingInput, ProcessingOutput
from sagemaker.s3 import S3Downloader
from sagemaker.sklearn import SKLearn, SKLearnModel
from sagemaker.sklearn.processing import SKLearnProcessor
from sagemaker.transformer import Transformer
from sagemaker.tuner import ContinuousParameter, HyperparameterTuner
from sagemaker.workflow.condition_step import ConditionStep
from sagemaker.workflow.conditions import ConditionGreaterThanOrEqualTo
from sagemaker.workflow.fail_step import FailStep
from sagemaker.workflow.functions import Join, JsonGet
from sagemaker.workflow.model_step import ModelStep
from sagemaker.workflow.parameters import ParameterFloat, ParameterString
from sagemaker.workflow.pipeline import Pipeline
from sagemaker.workflow.pipeline_context import PipelineSession
from sagemaker.workflow.properties import PropertyFile
from sagemaker.workflow.steps import CacheConfig, ProcessingStep, TrainingStep, TransformStep, TuningStep

ROLE = "arn:aws:iam::000000000000:role/servekit-sdk-test"


def step(name, value):
    print("STEP", name, json.dumps(value, default=str), flush=True)


def steps_of(execution):
    return {s["StepName"]: s for s in execution.list_steps()}


train_py, tune_py, prep_py, evaluate_py, model_tar, inference_py, work = (Path(a) for a in sys.argv[1:8])
session = PipelineSession()
bucket = session.default_bucket()
raw = work / "raw"
raw.mkdir(parents=True)
(raw / "raw.csv").write_text("".join(f"{2 * x + 1},{x}\n" for x in range(20)) + "7,\n")
raw_uri = sagemaker.Session().upload_data(str(raw), key_prefix="sdk-pipeline/raw")

input_data = ParameterString(name="InputData", default_value=raw_uri)
min_r2 = ParameterFloat(name="MinR2", default_value=0.9)

processor = SKLearnProcessor(
    framework_version="1.2-1", role=ROLE, instance_type="ml.m5.large", instance_count=1, sagemaker_session=session
)
prep = ProcessingStep(
    name="Prep",
    step_args=processor.run(
        code=str(prep_py),
        inputs=[ProcessingInput(source=input_data, destination="/opt/ml/processing/input")],
        outputs=[
            ProcessingOutput(output_name="train", source="/opt/ml/processing/train"),
            ProcessingOutput(output_name="test", source="/opt/ml/processing/test"),
        ],
    ),
    cache_config=CacheConfig(enable_caching=True, expire_after="P1D"),
)
estimator = SKLearn(
    entry_point=str(train_py),
    framework_version="1.2-1",
    instance_type="ml.m5.large",
    instance_count=1,
    role=ROLE,
    sagemaker_session=session,
)
train = TrainingStep(
    name="Train",
    step_args=estimator.fit(
        {
            "train": TrainingInput(
                s3_data=prep.properties.ProcessingOutputConfig.Outputs["train"].S3Output.S3Uri,
                content_type="text/csv",
            )
        }
    ),
)
report = PropertyFile(name="EvaluationReport", output_name="evaluation", path="evaluation.json")
evaluate = ProcessingStep(
    name="Evaluate",
    step_args=processor.run(
        code=str(evaluate_py),
        inputs=[
            ProcessingInput(
                source=train.properties.ModelArtifacts.S3ModelArtifacts, destination="/opt/ml/processing/model"
            ),
            ProcessingInput(
                source=prep.properties.ProcessingOutputConfig.Outputs["test"].S3Output.S3Uri,
                destination="/opt/ml/processing/test",
            ),
        ],
        outputs=[ProcessingOutput(output_name="evaluation", source="/opt/ml/processing/evaluation")],
    ),
    property_files=[report],
)
image = image_uris.retrieve("sklearn", session.boto_region_name, version="1.2-1")
model = Model(
    image_uri=image,
    model_data=train.properties.ModelArtifacts.S3ModelArtifacts,
    role=ROLE,
    sagemaker_session=session,
)
metrics = ModelMetrics(
    model_statistics=MetricsSource(
        s3_uri=Join(
            on="/",
            values=[
                evaluate.properties.ProcessingOutputConfig.Outputs["evaluation"].S3Output.S3Uri,
                "evaluation.json",
            ],
        ),
        content_type="application/json",
    )
)
register = ModelStep(
    name="Register",
    step_args=model.register(
        content_types=["text/csv"],
        response_types=["text/csv"],
        inference_instances=["ml.m5.large"],
        transform_instances=["ml.m5.large"],
        model_package_group_name="sdk-pipeline-models",
        approval_status="PendingManualApproval",
        model_metrics=metrics,
    ),
)
too_weak = FailStep(name="TooWeak", error_message=Join(on=" ", values=["r2 below", min_r2]))
check = ConditionStep(
    name="CheckR2",
    conditions=[
        ConditionGreaterThanOrEqualTo(
            left=JsonGet(step_name=evaluate.name, property_file=report, json_path="regression_metrics.r2.value"),
            right=min_r2,
        )
    ],
    if_steps=[register],
    else_steps=[too_weak],
)
pipeline = Pipeline(
    name="sdk-credit", parameters=[input_data, min_r2], steps=[prep, train, evaluate, check], sagemaker_session=session
)
pipeline.upsert(role_arn=ROLE)
pipeline.upsert(role_arn=ROLE, description="upserted twice: UpdatePipeline")  # the SDK's update path
step("described", pipeline.describe()["PipelineDescription"])

first = pipeline.start()
first.wait(delay=1, max_attempts=600)
listed = steps_of(first)
step("first_status", first.describe()["PipelineExecutionStatus"])
step("first_steps", {name: s["StepStatus"] for name, s in listed.items()})
package_arn = listed["Register-RegisterModel"]["Metadata"]["RegisterModel"]["Arn"]
package = session.sagemaker_client.describe_model_package(ModelPackageName=package_arn)
step("approval", package["ModelApprovalStatus"])
step("statistics", package["ModelMetrics"]["ModelQuality"]["Statistics"]["S3Uri"])
step("condition", listed["CheckR2"]["Metadata"])

second = pipeline.start(parameters={"MinR2": 1.5})
try:
    second.wait(delay=1, max_attempts=600)
    step("second_raised", None)
except botocore.exceptions.WaiterError as exc:
    step("second_raised", type(exc).__name__)
described = second.describe()
step("second", {"status": described["PipelineExecutionStatus"], "reason": described.get("FailureReason")})
again = steps_of(second)
step("second_fail", again["TooWeak"]["Metadata"])
step("second_cache", again["Prep"].get("CacheHitResult", {}).get("SourcePipelineExecutionArn") == first.arn)
step("second_registered", "Register-RegisterModel" in again)
versions = session.sagemaker_client.list_model_packages(ModelPackageGroupName="sdk-pipeline-models")
step("versions", len(versions["ModelPackageSummaryList"]))

# a TuningStep, then a ModelStep creating the best model and a TransformStep through it
tuned = SKLearn(
    entry_point=str(tune_py),
    framework_version="1.2-1",
    instance_type="ml.m5.large",
    role=ROLE,
    sagemaker_session=session,
)
tuner = HyperparameterTuner(
    tuned,
    objective_metric_name="score",
    hyperparameter_ranges={"alpha": ContinuousParameter(0.0, 1.0)},
    metric_definitions=[{"Name": "score", "Regex": "score=([-0-9.]+)"}],
    objective_type="Maximize",
    strategy="Random",
    max_jobs=2,
    max_parallel_jobs=2,
)
tune = TuningStep(name="Tune", step_args=tuner.fit({"train": TrainingInput(s3_data=raw_uri, content_type="text/csv")}))
served = SKLearnModel(
    model_data=sagemaker.Session().upload_data(str(model_tar), key_prefix="sdk-pipeline/model"),
    role=ROLE,
    entry_point=str(inference_py),
    framework_version="1.2-1",
    sagemaker_session=session,
)
create = ModelStep(name="CreateModel", step_args=served.create(instance_type="ml.m5.large"))
rows = work / "rows"
rows.mkdir()
(rows / "rows.jsonl").write_text("[1.0, 2.0]\n[3.0, 4.0]\n")
rows_uri = sagemaker.Session().upload_data(str(rows), key_prefix="sdk-pipeline/rows")
transformer = Transformer(
    model_name=create.properties.ModelName,
    instance_count=1,
    instance_type="ml.m5.large",
    accept="application/json",
    assemble_with="Line",
    output_path=f"s3://{bucket}/sdk-pipeline/transform",
    sagemaker_session=session,
)
transform = TransformStep(
    name="Transform",
    step_args=transformer.transform(data=rows_uri, content_type="application/json", split_type="Line"),
)
more = Pipeline(name="sdk-more", steps=[tune, create, transform], sagemaker_session=session)
more.upsert(role_arn=ROLE)
execution = more.start()
try:
    execution.wait(delay=1, max_attempts=600)
except botocore.exceptions.WaiterError:
    pass
ran = steps_of(execution)
step("more_status", execution.describe())
step("more_steps", {name: [s["StepStatus"], s.get("FailureReason", "")] for name, s in ran.items()})
step("tune_metadata", sorted(ran["Tune"]["Metadata"]))
step("transform_out", S3Downloader.read_file(f"s3://{bucket}/sdk-pipeline/transform/rows.jsonl.out").split())
