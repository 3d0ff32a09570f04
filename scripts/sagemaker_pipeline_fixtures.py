"""Write the SageMaker pipeline definitions that tests/unit/services/pipelines/sagemaker/ parses, as the real SageMaker Python
SDK emits them. Run by hand with the SDK's venv (no AWS call: every step is built under a PipelineSession):

    AWS_DEFAULT_REGION=us-east-1 SAGEMAKER_SUPPRESS_V2_WARNING=1 \
        SAGEMAKER_USER_CONFIG_OVERRIDE=<a config.yaml with TelemetryOptOut: true> \
        build/sdk-venv/bin/python scripts/sagemaker_pipeline_fixtures.py tests/unit/services/pipelines/sagemaker/fixtures

Each fixture is ``Pipeline.definition()`` re-indented; the SDK's version is recorded in ``Metadata`` by the SDK
itself where it does so, and in the file name of none (regenerate after an SDK upgrade and diff)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import boto3
from sagemaker.estimator import Estimator
from sagemaker.inputs import TrainingInput
from sagemaker.model import Model
from sagemaker.model_metrics import MetricsSource, ModelMetrics
from sagemaker.processing import ProcessingInput, ProcessingOutput, ScriptProcessor
from sagemaker.transformer import Transformer
from sagemaker.tuner import ContinuousParameter, HyperparameterTuner, IntegerParameter
from sagemaker.workflow.condition_step import ConditionStep
from sagemaker.workflow.conditions import (
    ConditionGreaterThanOrEqualTo,
    ConditionIn,
    ConditionLessThan,
    ConditionNot,
    ConditionOr,
)
from sagemaker.workflow.execution_variables import ExecutionVariables
from sagemaker.workflow.fail_step import FailStep
from sagemaker.workflow.functions import Join, JsonGet
from sagemaker.workflow.model_step import ModelStep
from sagemaker.workflow.parameters import ParameterBoolean, ParameterFloat, ParameterInteger, ParameterString
from sagemaker.workflow.pipeline import Pipeline
from sagemaker.workflow.pipeline_context import PipelineSession
from sagemaker.workflow.properties import PropertyFile
from sagemaker.workflow.retry import StepExceptionTypeEnum, StepRetryPolicy
from sagemaker.workflow.steps import CacheConfig, ProcessingStep, TrainingStep, TransformStep, TuningStep

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
BUCKET = "servekit-fixtures"
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
XGB = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"


def session() -> PipelineSession:
    boto = boto3.Session(region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    sess = PipelineSession(boto_session=boto, default_bucket=BUCKET)
    sess._default_bucket = BUCKET  # default_bucket() would check (and create) the bucket through S3
    return sess


def credit_scoring() -> Pipeline:
    """processing (two outputs) → training (a Get) → evaluation (PropertyFile) → condition on JsonGet →
    ModelStep registering the model, or a FailStep with a Join."""
    sess = session()
    input_data = ParameterString("InputData", default_value=f"s3://{BUCKET}/credit/raw.csv")
    instance_count = ParameterInteger("ProcessingInstanceCount", default_value=1)
    min_auc = ParameterFloat("MinAuc", default_value=0.7)
    approval = ParameterString("ModelApprovalStatus", default_value="PendingManualApproval")
    use_spot = ParameterBoolean("UseSpot", default_value=False)
    cache = CacheConfig(enable_caching=True, expire_after="P30D")

    processor = ScriptProcessor(
        image_uri=IMAGE,
        command=["python3"],
        role=ROLE,
        instance_type="ml.m5.xlarge",
        instance_count=instance_count,
        sagemaker_session=sess,
        base_job_name="credit-prep",
    )
    prep = ProcessingStep(
        name="Prep",
        step_args=processor.run(
            code=f"s3://{BUCKET}/code/prep.py",
            inputs=[ProcessingInput(source=input_data, destination="/opt/ml/processing/input")],
            outputs=[
                ProcessingOutput(output_name="train", source="/opt/ml/processing/train"),
                ProcessingOutput(output_name="test", source="/opt/ml/processing/test"),
            ],
        ),
        cache_config=cache,
        retry_policies=[StepRetryPolicy(exception_types=[StepExceptionTypeEnum.SERVICE_FAULT], max_attempts=3)],
    )

    estimator = Estimator(
        image_uri=XGB,
        role=ROLE,
        instance_type="ml.m5.xlarge",
        instance_count=1,
        output_path=Join(on="/", values=[f"s3://{BUCKET}", "credit", ExecutionVariables.PIPELINE_EXECUTION_ID]),
        sagemaker_session=sess,
        hyperparameters={"max_depth": 5, "objective": "binary:logistic", "num_round": 50},
    )
    train = TrainingStep(
        name="Train",
        step_args=estimator.fit(
            inputs={
                "train": TrainingInput(
                    s3_data=prep.properties.ProcessingOutputConfig.Outputs["train"].S3Output.S3Uri,
                    content_type="text/csv",
                )
            }
        ),
    )

    evaluation = PropertyFile(name="EvaluationReport", output_name="evaluation", path="evaluation.json")
    evaluate = ProcessingStep(
        name="Evaluate",
        step_args=processor.run(
            code=f"s3://{BUCKET}/code/evaluate.py",
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
        property_files=[evaluation],
    )

    model = Model(
        image_uri=XGB, model_data=train.properties.ModelArtifacts.S3ModelArtifacts, role=ROLE, sagemaker_session=sess
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
            model_package_group_name="credit-scoring",
            approval_status=approval,
            model_metrics=metrics,
        ),
    )
    auc = JsonGet(step_name=evaluate.name, property_file=evaluation, json_path="metrics.auc.value")
    fail = FailStep(
        name="AucTooLow",
        error_message=Join(on=" ", values=["AUC", auc, "is below", min_auc]),
    )
    check = ConditionStep(
        name="CheckAuc",
        conditions=[ConditionGreaterThanOrEqualTo(left=auc, right=min_auc)],
        if_steps=[register],
        else_steps=[fail],
    )
    return Pipeline(
        name="credit-scoring",
        parameters=[input_data, instance_count, min_auc, approval, use_spot],
        steps=[prep, train, evaluate, check],
        sagemaker_session=sess,
    )


def transform() -> Pipeline:
    """CreateModel (ModelStep) → TransformStep, with a condition using In, Not, Or and a DependsOn."""
    sess = session()
    model_data = ParameterString("ModelData", default_value=f"s3://{BUCKET}/models/model.tar.gz")
    batch_input = ParameterString("BatchInput", default_value=f"s3://{BUCKET}/batch/input")
    mode = ParameterString("Mode", default_value="full")
    threshold = ParameterInteger("Threshold", default_value=3)
    model = Model(image_uri=XGB, model_data=model_data, role=ROLE, sagemaker_session=sess)
    create = ModelStep(name="CreateModel", step_args=model.create(instance_type="ml.m5.large"))
    transformer = Transformer(
        model_name=create.properties.ModelName,
        instance_type="ml.m5.large",
        instance_count=1,
        output_path=f"s3://{BUCKET}/batch/output",
        sagemaker_session=sess,
    )
    batch = TransformStep(
        name="Batch",
        step_args=transformer.transform(data=batch_input, content_type="text/csv", split_type="Line"),
        cache_config=CacheConfig(enable_caching=True, expire_after="PT12H"),
    )
    gate = ConditionStep(
        name="Gate",
        depends_on=[create],
        conditions=[
            ConditionOr(
                conditions=[
                    ConditionIn(value=mode, in_values=["full", "batch"]),
                    ConditionNot(expression=ConditionLessThan(left=threshold, right=2)),
                ]
            )
        ],
        if_steps=[batch],
        else_steps=[],
    )
    return Pipeline(
        name="batch-transform",
        parameters=[model_data, batch_input, mode, threshold],
        steps=[create, gate],
        sagemaker_session=sess,
    )


def tuning() -> Pipeline:
    """A TuningStep, and a model made from its best training job (``get_top_model_s3_uri``)."""
    sess = session()
    train_data = ParameterString("TrainData", default_value=f"s3://{BUCKET}/credit/train")
    estimator = Estimator(
        image_uri=XGB,
        role=ROLE,
        instance_type="ml.m5.xlarge",
        instance_count=1,
        output_path=f"s3://{BUCKET}/tuning",
        sagemaker_session=sess,
        hyperparameters={"objective": "binary:logistic", "num_round": 50},
    )
    tuner = HyperparameterTuner(
        estimator,
        objective_metric_name="validation:auc",
        hyperparameter_ranges={"max_depth": IntegerParameter(2, 8), "eta": ContinuousParameter(0.05, 0.5)},
        metric_definitions=[{"Name": "validation:auc", "Regex": "validation-auc:([0-9.]+)"}],
        max_jobs=4,
        max_parallel_jobs=2,
    )
    tune = TuningStep(name="Tune", step_args=tuner.fit(inputs={"train": TrainingInput(s3_data=train_data)}))
    best = Model(
        image_uri=XGB,
        model_data=tune.get_top_model_s3_uri(top_k=0, s3_bucket=BUCKET, prefix="tuning"),
        role=ROLE,
        sagemaker_session=sess,
    )
    create = ModelStep(name="BestModel", step_args=best.create(instance_type="ml.m5.large"))
    return Pipeline(name="tuning", parameters=[train_data], steps=[tune, create], sagemaker_session=sess)


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    # code is given as S3 URIs: a local path would be uploaded to S3 while the definition compiles
    for name, build in (("credit_scoring", credit_scoring), ("transform", transform), ("tuning", tuning)):
        definition = json.loads(build().definition())
        (out / f"{name}.json").write_text(json.dumps(definition, indent=2, sort_keys=False) + "\n")
        print("wrote", out / f"{name}.json")


if __name__ == "__main__":
    main()
