"""Evaluating a SageMaker definition's expressions and conditions over an execution's context: parameters with
PipelineParameters overrides, Execution.*, finished steps' Describe*-shaped properties, Std:Join, Std:JsonGet over a
property file read through the injected reader; errors that fail the step with a message saying what is missing."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from servekit.services.pipelines.sagemaker import (
    Context,
    EvaluationError,
    Evaluator,
    ParameterValueError,
    execution_variables,
    load_definition,
    outcome,
    resolve_parameters,
)
from servekit.services.pipelines.sagemaker.conditions import compare, equal
from servekit.services.pipelines.sagemaker.model import Definition
from servekit.services.pipelines.sagemaker.paths import PathNotFound, PathSyntaxError, follow, parse_path

FIXTURES = Path(__file__).parent / "fixtures"
EXEC_ARN = "arn:aws:sagemaker:us-east-1:123456789012:pipeline/credit-scoring/execution/abc123def456"
PREP_OUT = "s3://servekit-fixtures/credit-scoring/abc123def456/Prep/output"
EVAL_OUT = "s3://servekit-fixtures/credit-scoring/abc123def456/Evaluate/output/evaluation"


def definition(name: str = "credit_scoring") -> Definition:
    d, _ = load_definition((FIXTURES / f"{name}.json").read_text())
    return d


def processing_properties(name: str, outputs: dict[str, str]) -> dict[str, Any]:
    """A DescribeProcessingJob response's shape."""
    return {
        "ProcessingJobName": name,
        "ProcessingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:processing-job/{name}",
        "ProcessingJobStatus": "Completed",
        "ProcessingOutputConfig": {
            "Outputs": [
                {"OutputName": n, "S3Output": {"S3Uri": uri, "LocalPath": f"/opt/ml/processing/{n}"}}
                for n, uri in outputs.items()
            ]
        },
        "CreationTime": datetime(2026, 12, 1, 10, 0, tzinfo=UTC),
    }


PROPERTIES: dict[str, dict[str, Any]] = {
    "Prep": processing_properties("pipelines-abc-Prep", {"train": f"{PREP_OUT}/train", "test": f"{PREP_OUT}/test"}),
    "Train": {
        "TrainingJobName": "pipelines-abc-Train",
        "ModelArtifacts": {"S3ModelArtifacts": "s3://servekit-fixtures/credit/abc123def456/job/output/model.tar.gz"},
        "FinalMetricDataList": [{"MetricName": "validation:auc", "Value": 0.91}],
        "HyperParameters": {"max_depth": "5"},
    },
    "Evaluate": processing_properties("pipelines-abc-Evaluate", {"evaluation": EVAL_OUT}),
}


class Files:
    """The injected reader: S3 objects by URI, and the URIs it was asked for."""

    def __init__(self, objects: dict[str, str | bytes]) -> None:
        self.objects = objects
        self.read: list[str] = []

    def __call__(self, uri: str) -> str | bytes:
        self.read.append(uri)
        if uri not in self.objects:
            raise FileNotFoundError(f"NoSuchKey: {uri}")
        return self.objects[uri]


def context(
    d: Definition,
    overrides: Any = (),
    steps: dict[str, dict[str, Any]] | None = None,
    files: Files | None = None,
) -> Context:
    start = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    variables = execution_variables(
        pipeline_name="credit-scoring",
        pipeline_arn="arn:aws:sagemaker:us-east-1:123456789012:pipeline/credit-scoring",
        execution_arn=EXEC_ARN,
        start=start,
    )
    return Context(d, resolve_parameters(d, overrides), variables, steps if steps is not None else PROPERTIES, files)


def evaluation_report(auc: Any) -> Files:
    return Files({f"{EVAL_OUT}/evaluation.json": json.dumps({"metrics": {"auc": {"value": auc}}})})


# --- parameters -----------------------------------------------------------------------------------------------------


def test_defaults_and_overrides_coerced_to_the_declared_type() -> None:
    d = definition()
    assert resolve_parameters(d) == {
        "InputData": "s3://servekit-fixtures/credit/raw.csv",
        "ProcessingInstanceCount": 1,
        "MinAuc": 0.7,
        "ModelApprovalStatus": "PendingManualApproval",
        "UseSpot": False,
    }
    wire = [
        {"Name": "ProcessingInstanceCount", "Value": "2"},
        {"Name": "MinAuc", "Value": "0.95"},
        {"Name": "UseSpot", "Value": "True"},  # the SDK sends str(True)
        {"Name": "InputData", "Value": "s3://other/raw.csv"},
    ]
    values = resolve_parameters(d, wire)
    assert values["ProcessingInstanceCount"] == 2 and values["MinAuc"] == 0.95 and values["UseSpot"] is True
    assert values["InputData"] == "s3://other/raw.csv"
    assert resolve_parameters(d, {"MinAuc": 1, "UseSpot": True})["MinAuc"] == 1.0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            [{"Name": "ProcessingInstanceCount", "Value": "two"}],
            "Parameter 'ProcessingInstanceCount' is of type Integer",
        ),
        ([{"Name": "ProcessingInstanceCount", "Value": "1.5"}], "the value '1.5' is not an Integer"),
        ([{"Name": "MinAuc", "Value": "high"}], "Parameter 'MinAuc' is of type Float; the value 'high' is not a Float"),
        ([{"Name": "MinAuc", "Value": "nan"}], "is not a Float"),
        ([{"Name": "UseSpot", "Value": "yes"}], "Parameter 'UseSpot' is of type Boolean"),
        ({"InputData": 3}, "Parameter 'InputData' is of type String"),
        ({"ProcessingInstanceCount": True}, "is not an Integer"),
        ([{"Name": "Epochs", "Value": "3"}], "PipelineParameters names 'Epochs', which the pipeline does not declare"),
        ([{"Name": "MinAuc", "Value": "0.1"}, {"Name": "MinAuc", "Value": "0.2"}], "gives parameter 'MinAuc' twice"),
        ([{"Name": "MinAuc"}], "Each of PipelineParameters is {Name, Value}"),
    ],
)
def test_bad_overrides_are_refused(overrides: Any, message: str) -> None:
    with pytest.raises(ParameterValueError) as exc:
        resolve_parameters(definition(), overrides)
    assert message in str(exc.value)


def test_a_parameter_without_default_must_be_given_and_enum_values_hold() -> None:
    d, _ = load_definition(
        {
            "Version": "2020-12-01",
            "Parameters": [
                {"Name": "Data", "Type": "String"},
                {"Name": "Mode", "Type": "String", "DefaultValue": "a", "EnumValues": ["a", "b"]},
            ],
            "Steps": [{"Name": "S", "Type": "Fail", "Arguments": {"ErrorMessage": {"Get": "Parameters.Data"}}}],
        }
    )
    with pytest.raises(ParameterValueError, match="Parameter 'Data' has no DefaultValue"):
        resolve_parameters(d)
    with pytest.raises(ParameterValueError, match=r"Parameter 'Mode' takes one of \['a', 'b'\], not 'c'"):
        resolve_parameters(d, {"Data": "x", "Mode": "c"})
    assert resolve_parameters(d, {"Data": "x", "Mode": "b"}) == {"Data": "x", "Mode": "b"}


# --- expressions ----------------------------------------------------------------------------------------------------


def test_a_training_steps_arguments_become_its_create_request() -> None:
    d = definition()
    args = Evaluator(context(d)).arguments(d.step("Train"))
    channel = args["InputDataConfig"][0]["DataSource"]["S3DataSource"]
    assert channel["S3Uri"] == f"{PREP_OUT}/train"  # Outputs['train'] picks the output by its OutputName
    assert args["OutputDataConfig"]["S3OutputPath"] == "s3://servekit-fixtures/credit/abc123def456"
    assert args["HyperParameters"] == {"max_depth": "5", "objective": "binary:logistic", "num_round": "50"}
    json.dumps(args)  # plain JSON, ready for CreateTrainingJob


def test_processing_arguments_with_parameters_and_execution_joins() -> None:
    d = definition()
    args = Evaluator(context(d, [{"Name": "ProcessingInstanceCount", "Value": "3"}])).arguments(d.step("Prep"))
    assert args["ProcessingResources"]["ClusterConfig"]["InstanceCount"] == 3
    assert args["ProcessingInputs"][0]["S3Input"]["S3Uri"] == "s3://servekit-fixtures/credit/raw.csv"
    outputs = {o["OutputName"]: o["S3Output"]["S3Uri"] for o in args["ProcessingOutputConfig"]["Outputs"]}
    assert outputs == {"train": f"{PREP_OUT}/train", "test": f"{PREP_OUT}/test"}


def test_register_model_arguments() -> None:
    d = definition()
    args = Evaluator(context(d)).arguments(d.step("Register-RegisterModel"))
    assert args["ModelApprovalStatus"] == "PendingManualApproval"
    assert args["InferenceSpecification"]["Containers"][0]["ModelDataUrl"].endswith("/job/output/model.tar.gz")
    assert args["ModelMetrics"]["ModelQuality"]["Statistics"]["S3Uri"] == f"{EVAL_OUT}/evaluation.json"


def test_execution_variables_and_property_paths() -> None:
    d = definition()
    ev = Evaluator(context(d))
    assert ev.value({"Get": "Execution.PipelineExecutionId"}) == "abc123def456"
    assert ev.value({"Get": "Execution.PipelineExecutionArn"}) == EXEC_ARN
    assert ev.value({"Get": "Execution.StartDateTime"}) == "2026-12-01T09:30:00+00:00"
    assert ev.value({"Get": "Steps.Train.FinalMetricDataList['validation:auc'].Value"}) == 0.91
    assert ev.value({"Get": "Steps.Train.FinalMetricDataList[0].MetricName"}) == "validation:auc"
    assert ev.value({"Get": "Steps.Train.HyperParameters['max_depth']"}) == "5"
    assert ev.value({"Get": "Steps.Prep.CreationTime"}) == "2026-12-01T10:00:00+00:00"
    joined = {"Std:Join": {"On": ",", "Values": [1, 0.5, True, None, "x", {"Get": "Parameters.UseSpot"}, [1, 2]]}}
    assert ev.value(joined) == "1,0.5,true,null,x,false,[1,2]"
    assert ev.value({"Std:Join": {"Values": ["a", "b"]}}) == "ab"


def test_tuning_summaries_by_index() -> None:
    d = definition("tuning")
    steps = {"Tune": {"TrainingJobSummaries": [{"TrainingJobName": "tune-003"}, {"TrainingJobName": "tune-001"}]}}
    args = Evaluator(context(d, steps=steps)).arguments(d.step("BestModel-CreateModel"))
    assert args["PrimaryContainer"]["ModelDataUrl"] == "s3://servekit-fixtures/tuning/tune-003/output/model.tar.gz"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            {"Get": "Steps.Train.ModelArtifacts.S3ModelArtifact"},
            "Unable to resolve property 'Steps.Train.ModelArtifacts.S3ModelArtifact': step 'Train' has no property"
            " 'ModelArtifacts.S3ModelArtifact' (no 'S3ModelArtifact' there (after 'ModelArtifacts'))",
        ),
        ({"Get": "Steps.Prep.ProcessingOutputConfig.Outputs['valid'].S3Output.S3Uri"}, "no element named 'valid'"),
        ({"Get": "Steps.Train.FinalMetricDataList[3].Value"}, "index 3 is out of range for a list of 1"),
        ({"Get": "Steps.Train.TrainingJobName[0]"}, "[0] indexes a list, but the value is a string"),
        ({"Get": "Steps.Evaluate.ProcessingJobName.Value"}, "the value is a string"),
        ({"Get": "Steps.CheckAuc.Outcome"}, "step 'CheckAuc' has not succeeded in this execution"),
        ({"Get": "Execution.TrainingJobName"}, "no execution variable 'TrainingJobName' here"),
    ],
)
def test_missing_properties_fail_with_what_is_missing(expression: Any, message: str) -> None:
    with pytest.raises(EvaluationError) as exc:
        Evaluator(context(definition())).value({"Nested": [expression]})
    assert message in str(exc.value)
    assert exc.value.error_types == ()  # never retried


# --- JsonGet and conditions -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("auc", "min_auc", "expected"),
    [(0.75, "0.7", True), (0.7, "0.7", True), (0.65, "0.7", False), ("0.8", "0.7", True)],
)
def test_the_condition_on_json_get(auc: Any, min_auc: str, expected: bool) -> None:
    d = definition()
    files = evaluation_report(auc)
    ev = Evaluator(context(d, [{"Name": "MinAuc", "Value": min_auc}], files=files))
    assert outcome(d.step("CheckAuc"), ev) is expected
    assert files.read == [f"{EVAL_OUT}/evaluation.json"]


def test_the_fail_message_and_a_file_read_once() -> None:
    d = definition()
    files = evaluation_report(0.61)
    ev = Evaluator(context(d, {"MinAuc": 0.9}, files=files))
    assert not outcome(d.step("CheckAuc"), ev)
    assert ev.error_message(d.step("AucTooLow")) == "AUC 0.61 is below 0.9"
    assert len(files.read) == 1


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            Files({f"{EVAL_OUT}/evaluation.json": '{"metrics": {"accuracy": {"value": 0.9}}}'}),
            "Std:JsonGet failed: the JSON path 'metrics.auc.value' was not found in property file 'EvaluationReport'"
            f" of step 'Evaluate' ({EVAL_OUT}/evaluation.json): no 'auc' there (after 'metrics')",
        ),
        (Files({}), "unable to read property file 'EvaluationReport' of step 'Evaluate'"),
        (Files({f"{EVAL_OUT}/evaluation.json": b"{nope"}), "is not valid JSON"),
        (None, "no reader for property file"),
    ],
)
def test_json_get_errors(files: Files | None, message: str) -> None:
    d = definition()
    with pytest.raises(EvaluationError) as exc:
        outcome(d.step("CheckAuc"), Evaluator(context(d, files=files)))
    assert message in str(exc.value)


def test_json_get_before_the_step_has_its_output() -> None:
    d = definition()
    steps = {**PROPERTIES, "Evaluate": processing_properties("e", {"other": "s3://b/o"})}
    with pytest.raises(EvaluationError, match="the step has no output 'evaluation' with an S3Uri"):
        Evaluator(context(d, steps=steps, files=evaluation_report(1))).error_message(d.step("AucTooLow"))


def test_json_get_over_an_s3_uri_and_json_paths() -> None:
    files = Files({"s3://b/doc.json": json.dumps({"a": {"b": [10, {"c d": "x"}]}, "top": True})})
    ev = Evaluator(context(definition(), files=files))
    assert ev.value({"Std:JsonGet": {"S3Uri": "s3://b/doc.json", "Path": "a.b[0]"}}) == 10
    assert ev.value({"Std:JsonGet": {"S3Uri": "s3://b/doc.json", "Path": "$.a.b[1]['c d']"}}) == "x"
    assert ev.value({"Std:JsonGet": {"S3Uri": "s3://b/doc.json", "Path": "$['top']"}}) is True
    assert ev.value({"Std:JsonGet": {"S3Uri": "s3://b/doc.json", "Path": "a"}}) == {"b": [10, {"c d": "x"}]}
    assert files.read == ["s3://b/doc.json"]


def test_the_transform_gate_with_in_not_or() -> None:
    d = definition("transform")
    gate = d.step("Gate")
    steps = {"CreateModel-CreateModel": {"ModelName": "m-1"}}
    assert outcome(gate, Evaluator(context(d, steps=steps)))  # Mode full is In [full, batch]
    assert outcome(gate, Evaluator(context(d, {"Mode": "none", "Threshold": "5"}, steps)))  # Not(5 < 2)
    assert not outcome(gate, Evaluator(context(d, {"Mode": "none", "Threshold": "1"}, steps)))
    args = Evaluator(context(d, steps=steps)).arguments(d.step("Batch"))
    assert args["ModelName"] == "m-1"
    assert args["TransformInput"]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://servekit-fixtures/batch/input"


def test_comparison_semantics() -> None:
    assert equal(1, 1.0) and equal("0.5", 0.5) and equal("a", "a") and not equal("a", "b")
    assert equal(True, True) and equal(True, "True") and not equal(True, 1) and not equal(False, 0)
    assert equal(None, None) and not equal(None, "")
    assert compare("GreaterThan", 2, 1.5) and compare("LessThanOrEqualTo", "3", 3)
    assert compare("LessThan", "10", "9") is False  # two numbers spelled as text compare as numbers
    assert compare("GreaterThan", "2026-12-02", "2026-12-01")  # text compares as text
    for left, right in ((True, 1), (None, 1), ("abc", 1), ([1], [2])):
        with pytest.raises(EvaluationError, match="cannot compare"):
            compare("GreaterThan", left, right)


def test_paths() -> None:
    assert follow({"a": [{"Name": "x", "v": 1}]}, parse_path("a['x'].v")) == 1
    assert follow({"a": [1, 2, 3]}, parse_path("a[-1]")) == 3
    with pytest.raises(PathNotFound, match="no key 'k' there"):
        follow({"m": {}}, parse_path("m['k']"))
    for bad in ("a..b", "a.", "a[x]", ".a", ""):
        with pytest.raises(PathSyntaxError):
            parse_path(bad)


def test_the_experiment_config_and_steps_that_call_no_service() -> None:
    d = definition()
    ev = Evaluator(context(d))
    assert ev.value(d.experiment_config) == {"ExperimentName": "credit-scoring", "TrialName": "abc123def456"}
    for name in ("CheckAuc", "AucTooLow"):
        with pytest.raises(TypeError, match="calls no service"):
            ev.arguments(d.step(name))
