"""The checks across steps that CreatePipeline makes on a SageMaker definition (each message names what is wrong),
and the DAG: upstream steps from DependsOn and every reference, condition branches, a topological order."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from servekit.services.pipelines.sagemaker import DefinitionError, load_definition
from servekit.services.pipelines.sagemaker.expressions import RefKind

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURES / f"{name}.json").read_text())
    return doc


def doc_of(*steps: dict[str, Any], parameters: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"Version": "2020-12-01", "Parameters": parameters or [], "Steps": list(steps)}


def step(name: str, type_: str = "Processing", **fields: Any) -> dict[str, Any]:
    return {"Name": name, "Type": type_, "Arguments": fields.pop("Arguments", {}), **fields}


def get(path: str) -> dict[str, str]:
    return {"Get": path}


def test_the_credit_scoring_dag() -> None:
    definition, dag = load_definition(fixture("credit_scoring"))
    assert dag.order == ("Prep", "Train", "Evaluate", "CheckAuc", "Register-RegisterModel", "AucTooLow")
    assert dag.upstream["Prep"] == frozenset()
    assert dag.upstream["Train"] == {"Prep"}
    assert dag.upstream["Evaluate"] == {"Prep", "Train"}
    assert dag.upstream["CheckAuc"] == {"Evaluate"}  # through Std:JsonGet's property file
    assert dag.upstream["Register-RegisterModel"] == {"CheckAuc", "Train", "Evaluate"}
    assert dag.upstream["AucTooLow"] == {"CheckAuc", "Evaluate"}  # the JsonGet in its Join'ed message
    assert dag.gates == {"Register-RegisterModel": ("CheckAuc", True), "AucTooLow": ("CheckAuc", False)}
    assert dag.branch("CheckAuc", True) == ("Register-RegisterModel",)
    assert dag.branch("CheckAuc", False) == ("AucTooLow",)
    assert dag.downstream("Prep") == {"Train", "Evaluate"}
    assert dag.not_run({"CheckAuc": True}) == {"AucTooLow"}
    assert dag.not_run({"CheckAuc": False}) == {"Register-RegisterModel"}
    assert dag.not_run({}) == frozenset()
    kinds = {(r.kind, r.name) for r in dag.references["CheckAuc"]}
    assert kinds == {(RefKind.PROPERTY_FILE, "Evaluate"), (RefKind.PARAMETER, "MinAuc")}
    assert len(definition.all_steps()) == 6


def test_transform_and_tuning_dags() -> None:
    _, dag = load_definition(fixture("transform"))
    assert dag.order == ("CreateModel-CreateModel", "Gate", "Batch")
    assert dag.upstream["Gate"] == {"CreateModel-CreateModel"}  # DependsOn
    assert dag.upstream["Batch"] == {"Gate", "CreateModel-CreateModel"}
    _, dag = load_definition(fixture("tuning"))
    assert dag.upstream["BestModel-CreateModel"] == {"Tune"}  # Steps.Tune.TrainingJobSummaries[0]... in a Join


def test_order_keeps_definition_order_between_independent_steps() -> None:
    _, dag = load_definition(
        doc_of(step("C", DependsOn=["B"]), step("A"), step("B"), step("D", Arguments={"X": get("Steps.A.Y")}))
    )
    assert dag.order == ("A", "B", "C", "D")


def test_a_cycle_names_its_steps() -> None:
    source = doc_of(
        step("Start"),
        step("A", Arguments={"In": get("Steps.C.ProcessingOutputConfig.Outputs['o'].S3Output.S3Uri")}),
        step("B", DependsOn=["A"]),
        step("C", Arguments={"In": {"Std:Join": {"On": "/", "Values": [get("Steps.B.ProcessingJobArn")]}}}),
    )
    with pytest.raises(DefinitionError) as exc:
        load_definition(source)
    assert "form a cycle: A -> B -> C -> A" in str(exc.value)


def test_a_cycle_through_a_condition_branch() -> None:
    source = doc_of(
        step(
            "Check",
            "Condition",
            Arguments={
                "Conditions": [
                    {"Type": "Equals", "LeftValue": get("Steps.Inner.ProcessingJobStatus"), "RightValue": 1}
                ],
                "IfSteps": [step("Inner")],
                "ElseSteps": [],
            },
        )
    )
    with pytest.raises(DefinitionError, match="form a cycle: Check -> Inner -> Check"):
        load_definition(source)


def _broken(mutate: Any) -> str:
    doc = copy.deepcopy(fixture("credit_scoring"))
    mutate(doc)
    with pytest.raises(DefinitionError) as exc:
        load_definition(doc)
    return str(exc.value)


def _args(doc: dict[str, Any], name: str) -> dict[str, Any]:
    args: dict[str, Any] = next(s for s in doc["Steps"] if s["Name"] == name)["Arguments"]
    return args


def test_a_reference_to_a_step_that_does_not_exist() -> None:
    def mutate(d: dict[str, Any]) -> None:
        _args(d, "Train")["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] = get(
            "Steps.Preprocess.ProcessingOutputConfig.Outputs['train'].S3Output.S3Uri"
        )

    assert _broken(mutate) == (
        "Step 'Train' refers to step 'Preprocess' (Steps.Preprocess.ProcessingOutputConfig.Outputs['train']."
        "S3Output.S3Uri), which is not in the pipeline definition."
    )


def test_depends_on_a_step_that_does_not_exist() -> None:
    message = _broken(lambda d: d["Steps"][1].update(DependsOn=["Prep", "Nope"]))
    assert message == "Step 'Train' depends on step 'Nope', which is not in the pipeline definition."
    assert "depends on itself" in _broken(lambda d: d["Steps"][1].update(DependsOn=["Train"]))


def test_an_undeclared_parameter() -> None:
    def mutate(d: dict[str, Any]) -> None:
        _args(d, "Train")["ResourceConfig"]["InstanceCount"] = get("Parameters.TrainingInstanceCount")

    message = _broken(mutate)
    assert "Step 'Train' refers to parameter 'TrainingInstanceCount'" in message
    assert "does not declare (its parameters: InputData, ProcessingInstanceCount, MinAuc" in message


def test_an_undeclared_property_file_and_an_unknown_execution_variable() -> None:
    def file(d: dict[str, Any]) -> None:
        cond = _args(d, "CheckAuc")["Conditions"][0]
        cond["LeftValue"]["Std:JsonGet"]["PropertyFile"] = get("Steps.Evaluate.PropertyFiles.Report")

    assert "reads property file 'Report' of step 'Evaluate'" in _broken(file)
    assert "its PropertyFiles: EvaluationReport" in _broken(file)

    def variable(d: dict[str, Any]) -> None:
        _args(d, "Prep")["Environment"] = {"RUN": get("Execution.RunId")}

    assert "Step 'Prep' refers to 'Execution.RunId'; execution variables are" in _broken(variable)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (get("Steps.Prep"), "names no property"),
        (get("Parameters"), "invalid Get 'Parameters'"),
        (get("Pipeline.Name"), "invalid Get 'Pipeline.Name'"),
        (get("Steps.Prep.Outputs[train]"), "invalid property reference"),
        (get("Steps.Evaluate.PropertyFiles.EvaluationReport"), "read only by Std:JsonGet"),
        ({"Std:Join": {"On": "/"}}, "Std:Join takes {On: <text>, Values: [<value>...]}"),
        ({"Std:Join": {"On": 1, "Values": []}}, "Std:Join.On must be a string"),
        ({"Std:JsonGet": {"Path": "a"}}, "Std:JsonGet takes {PropertyFile"),
        ({"Std:JsonGet": {"PropertyFile": get("Steps.Prep.ProcessingJobArn"), "Path": "a"}}, "must be Steps.<step>"),
        ({"Std:JsonGet": {"S3Uri": "s3://b/k", "Path": "a..b"}}, "Std:JsonGet.Path: path 'a..b'"),
        ({"Std:Concat": {"Values": []}}, "unknown function 'Std:Concat'"),
    ],
)
def test_malformed_expressions_are_named_with_their_place(expression: Any, message: str) -> None:
    def mutate(d: dict[str, Any]) -> None:
        _args(d, "Train")["Environment"] = {"X": [1, expression]}

    text = _broken(mutate)
    assert text.startswith("Step 'Train'.Environment.X[1]")
    assert message in text


def test_a_step_may_not_read_its_own_properties() -> None:
    def mutate(d: dict[str, Any]) -> None:
        _args(d, "Train")["Environment"] = {"ME": get("Steps.Train.TrainingJobName")}

    assert _broken(mutate) == "Step 'Train' refers to its own properties (Steps.Train.TrainingJobName)."


def test_duplicate_step_names() -> None:
    assert "'Train' is defined twice at the top level" in _broken(lambda d: d["Steps"].append(d["Steps"][1]))

    def twice_in_branches(d: dict[str, Any]) -> None:
        args = _args(d, "CheckAuc")
        args["ElseSteps"].append(copy.deepcopy(args["IfSteps"][0]))

    message = _broken(twice_in_branches)
    assert "step 'Register-RegisterModel' is defined in condition 'CheckAuc''s IfSteps and also in condition" in message


def test_a_branch_step_also_at_the_top_level() -> None:
    def mutate(d: dict[str, Any]) -> None:
        d["Steps"].append(copy.deepcopy(_args(d, "CheckAuc")["ElseSteps"][0]))

    assert _broken(mutate) == (
        "Step names must be unique: step 'AucTooLow' is defined in condition 'CheckAuc''s ElseSteps and also at the"
        " top level; a step in a condition's branch belongs to that branch only."
    )


def test_nested_conditions_gate_their_branches() -> None:
    inner = step(
        "Inner",
        "Condition",
        Arguments={
            "Conditions": [{"Type": "Equals", "LeftValue": get("Parameters.Go"), "RightValue": True}],
            "IfSteps": [step("Deep")],
            "ElseSteps": [],
        },
    )
    outer = step(
        "Outer",
        "Condition",
        Arguments={
            "Conditions": [{"Type": "Equals", "LeftValue": 1, "RightValue": 1}],
            "IfSteps": [inner],
            "ElseSteps": [step("Other")],
        },
    )
    after = step("After", Arguments={"X": get("Steps.Deep.ProcessingJobName")})
    _, dag = load_definition(doc_of(outer, after, parameters=[{"Name": "Go", "Type": "Boolean", "DefaultValue": True}]))
    assert dag.order == ("Outer", "Inner", "Deep", "Other", "After")
    assert dag.gates["Deep"] == ("Inner", True) and dag.gates["Inner"] == ("Outer", True)
    assert dag.not_run({"Outer": False}) == {"Inner", "Deep", "After"}
    assert dag.not_run({"Outer": True, "Inner": False}) == {"Other", "Deep", "After"}


def test_experiment_config_references() -> None:
    doc = copy.deepcopy(fixture("tuning"))
    doc["PipelineExperimentConfig"]["TrialName"] = get("Steps.Tune.BestTrainingJob.TrainingJobName")
    with pytest.raises(DefinitionError, match="PipelineExperimentConfig may refer to parameters and execution"):
        load_definition(doc)
