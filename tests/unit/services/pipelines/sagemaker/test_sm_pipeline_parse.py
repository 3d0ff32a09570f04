"""Parsing SageMaker pipeline definitions: the SDK's own output (fixtures/, written by
scripts/sagemaker_pipeline_fixtures.py with sagemaker 2.257.7) into typed data, and the shape errors CreatePipeline
refuses with a message naming the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from servekit.services.pipelines.sagemaker import DefinitionError, ParameterType, StepType, parse_definition
from servekit.services.pipelines.sagemaker.model import Comparison, InValues, NotCondition, OrConditions, thaw
from servekit.services.pipelines.sagemaker.parse import parse_duration

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return doc


def test_the_credit_scoring_pipeline_as_the_sdk_writes_it() -> None:
    d = parse_definition((FIXTURES / "credit_scoring.json").read_text())
    assert [(p.name, p.type, p.default) for p in d.parameters] == [
        ("InputData", ParameterType.STRING, "s3://servekit-fixtures/credit/raw.csv"),
        ("ProcessingInstanceCount", ParameterType.INTEGER, 1),
        ("MinAuc", ParameterType.FLOAT, 0.7),
        ("ModelApprovalStatus", ParameterType.STRING, "PendingManualApproval"),
        ("UseSpot", ParameterType.BOOLEAN, False),
    ]
    assert [(s.name, s.type) for s in d.steps] == [
        ("Prep", StepType.PROCESSING),
        ("Train", StepType.TRAINING),
        ("Evaluate", StepType.PROCESSING),
        ("CheckAuc", StepType.CONDITION),
    ]
    prep = d.steps[0]
    assert prep.cache_config is not None and prep.cache_config.enabled
    assert prep.cache_config.expire_after == "P30D" and prep.cache_config.expire_after_seconds == 30 * 86400
    (retry,) = prep.retry_policies
    assert retry.exception_types == ("Step.SERVICE_FAULT",) and retry.max_attempts == 3
    assert retry.backoff_rate == 2.0 and retry.interval_seconds == 1
    evaluate = d.steps[2]
    (report,) = evaluate.property_files
    assert (report.name, report.output_name, report.file_path) == ("EvaluationReport", "evaluation", "evaluation.json")
    check = d.steps[3]
    (cond,) = check.conditions
    assert isinstance(cond, Comparison) and cond.type == "GreaterThanOrEqualTo"
    assert thaw(cond.right) == {"Get": "Parameters.MinAuc"}
    assert [s.name for s in check.if_steps] == ["Register-RegisterModel"]
    assert check.if_steps[0].type is StepType.REGISTER_MODEL
    (fail,) = check.else_steps
    assert fail.type is StepType.FAIL and "Std:Join" in fail.error_message
    assert [s.name for s in d.all_steps()] == [
        "Prep",
        "Train",
        "Evaluate",
        "CheckAuc",
        "Register-RegisterModel",
        "AucTooLow",
    ]
    assert thaw(d.experiment_config) == {
        "ExperimentName": {"Get": "Execution.PipelineName"},
        "TrialName": {"Get": "Execution.PipelineExecutionId"},
    }
    # arguments are the Create* request as written, frozen
    assert thaw(d.step("Train").arguments) == fixture("credit_scoring")["Steps"][1]["Arguments"]
    with pytest.raises(TypeError):
        d.step("Train").arguments["RoleArn"] = "x"  # type: ignore[index]


def test_transform_and_tuning_pipelines() -> None:
    t = parse_definition(fixture("transform"))
    gate = t.step("Gate")
    assert gate.depends_on == ("CreateModel-CreateModel",)
    (either,) = gate.conditions
    assert isinstance(either, OrConditions)
    member, negated = either.conditions
    assert isinstance(member, InValues) and member.values == ("full", "batch")
    assert isinstance(negated, NotCondition) and isinstance(negated.condition, Comparison)
    assert negated.condition.type == "LessThan" and negated.condition.right == 2
    batch = t.step("Batch")
    assert batch.type is StepType.TRANSFORM and batch.cache_config is not None
    assert batch.cache_config.expire_after_seconds == 12 * 3600
    assert gate.else_steps == ()
    tuning = parse_definition(json.dumps(fixture("tuning")))
    assert [s.type for s in tuning.steps] == [StepType.TUNING, StepType.MODEL]


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "must be a JSON object"),
        ('{"Version": "2020-12-01", "Steps": [], "Extra": 1}', "unknown property 'Extra'"),
        ('{"Version": "2021-01-01", "Steps": [{"Name": "A", "Type": "Fail"}]}', "Version must be '2020-12-01'"),
        ('{"Version": "2020-12-01", "Steps": []}', "Steps must be a non-empty list"),
    ],
)
def test_malformed_documents(source: str, message: str) -> None:
    with pytest.raises(DefinitionError, match="Unable to parse pipeline definition") as exc:
        parse_definition(source)
    assert message in str(exc.value)


def _with(mutate: Any, name: str = "credit_scoring") -> dict[str, Any]:
    doc = copy.deepcopy(fixture(name))
    mutate(doc)
    return doc


@pytest.mark.parametrize("step_type", ["Lambda", "Callback", "EMR", "ClarifyCheck", "QualityCheck", "AutoML"])
def test_refused_step_types_name_the_step(step_type: str) -> None:
    doc = _with(lambda d: d["Steps"].append({"Name": "Extra", "Type": step_type, "Arguments": {}}))
    with pytest.raises(DefinitionError, match=f"Step 'Extra' is of type {step_type}, which servekit does not run"):
        parse_definition(doc)


def test_an_unknown_step_type_anywhere_is_named() -> None:
    def inner(d: dict[str, Any]) -> None:
        d["Steps"][3]["Arguments"]["ElseSteps"][0]["Type"] = "Teleport"

    with pytest.raises(DefinitionError, match="Step 'AucTooLow' has unknown type 'Teleport'"):
        parse_definition(_with(inner))


@pytest.mark.parametrize(
    ("parameter", "message"),
    [
        ({"Name": "N", "Type": "Integer", "DefaultValue": "3"}, "Parameter 'N' is of type Integer"),
        ({"Name": "N", "Type": "Integer", "DefaultValue": 1.5}, "is not an Integer"),
        ({"Name": "N", "Type": "Integer", "DefaultValue": True}, "is not an Integer"),
        ({"Name": "F", "Type": "Float", "DefaultValue": "0.5"}, "Parameter 'F' is of type Float"),
        ({"Name": "B", "Type": "Boolean", "DefaultValue": "true"}, "Parameter 'B' is of type Boolean"),
        ({"Name": "S", "Type": "String", "DefaultValue": 3}, "Parameter 'S' is of type String"),
        ({"Name": "T", "Type": "Text"}, "Parameter 'T' has type 'Text'"),
        ({"Name": "E", "Type": "String", "DefaultValue": "c", "EnumValues": ["a", "b"]}, "not one of its EnumValues"),
        ({"Name": "bad name", "Type": "String"}, "Name must be 1-256 letters"),
        ({"Name": "N", "Type": "Integer", "Default": 1}, "unknown property 'Default'"),
    ],
)
def test_parameter_errors(parameter: dict[str, Any], message: str) -> None:
    doc = _with(lambda d: d["Parameters"].append(parameter))
    with pytest.raises(DefinitionError) as exc:
        parse_definition(doc)
    assert message in str(exc.value)


def test_a_float_parameter_takes_an_integer_default_and_a_parameter_may_have_none() -> None:
    d = parse_definition(
        _with(
            lambda d: d["Parameters"].extend(
                [{"Name": "F", "Type": "Float", "DefaultValue": 1}, {"Name": "Req", "Type": "String"}]
            )
        )
    )
    assert d.parameter("F") is not None and d.parameter("F").default == 1.0  # type: ignore[union-attr]
    assert d.parameter("Req") is not None and d.parameter("Req").default is None  # type: ignore[union-attr]


def test_duplicate_parameters() -> None:
    doc = _with(lambda d: d["Parameters"].append({"Name": "MinAuc", "Type": "Float", "DefaultValue": 0.1}))
    with pytest.raises(DefinitionError, match="'MinAuc' is declared twice"):
        parse_definition(doc)


def _step(d: dict[str, Any], name: str) -> dict[str, Any]:
    step: dict[str, Any] = next(s for s in d["Steps"] if s["Name"] == name)
    return step


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: _step(d, "Prep").update(Foo=1), "Step 'Prep': Cannot parse object, unknown property 'Foo'"),
        (lambda d: _step(d, "Prep").update(Arguments=[]), "Step 'Prep': Arguments must be an object"),
        (lambda d: _step(d, "Prep").update(DependsOn="Train"), "DependsOn must be a list of step names"),
        (lambda d: _step(d, "Prep")["CacheConfig"].update(ExpireAfter="30 days"), "not an ISO-8601 duration"),
        (lambda d: _step(d, "Prep")["CacheConfig"].update(Enabled="yes"), "CacheConfig.Enabled must be true or false"),
        (lambda d: _step(d, "Prep")["RetryPolicies"][0].update(ExpireAfterMin=5), "MaxAttempts or ExpireAfterMin"),
        (lambda d: _step(d, "Prep")["RetryPolicies"][0].update(MaxAttempts=21), "MaxAttempts must be a number"),
        (lambda d: _step(d, "Prep")["RetryPolicies"][0].update(ExceptionType=["Oops"]), "unknown ExceptionType"),
        (
            lambda d: _step(d, "Evaluate")["PropertyFiles"][0].update(OutputName="metrics"),
            "PropertyFile 'EvaluationReport' names output 'metrics', which the step does not define",
        ),
        (
            lambda d: _step(d, "Train").update(PropertyFiles=_step(d, "Evaluate")["PropertyFiles"]),
            "PropertyFiles belong to Processing steps, not Training",
        ),
        (
            lambda d: _step(d, "CheckAuc")["Arguments"]["Conditions"][0].update(Type="Within"),
            "unknown condition type 'Within'",
        ),
        (
            lambda d: _step(d, "CheckAuc")["Arguments"]["Conditions"][0].pop("RightValue"),
            "a GreaterThanOrEqualTo condition needs RightValue",
        ),
        (lambda d: _step(d, "CheckAuc")["Arguments"].update(Conditions=[]), "Conditions must be a non-empty list"),
        (
            lambda d: _step(d, "CheckAuc")["Arguments"]["ElseSteps"][0]["Arguments"].update(Message="x"),
            "Step 'AucTooLow': Cannot parse object, unknown property 'Message' in Arguments",
        ),
    ],
)
def test_step_shape_errors(mutate: Any, message: str) -> None:
    with pytest.raises(DefinitionError) as exc:
        parse_definition(_with(mutate))
    assert message in str(exc.value)


def test_durations() -> None:
    assert parse_duration("P30D") == 30 * 86400
    assert parse_duration("PT12H") == 12 * 3600
    assert parse_duration("P1DT1H30M") == 86400 + 5400
    assert parse_duration("PT0.5S") == 0.5
    for bad in ("P", "PT", "30D", "P1H"):
        with pytest.raises(ValueError):
            parse_duration(bad)
