"""Pipeline definitions in Python and YAML: references make the DAG, and bad definitions fail at the edge with
messages that name the step and what is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servekit.services.pipelines import (
    GreaterThanOrEqualTo,
    Param,
    Pipeline,
    PipelineError,
    RetryPolicy,
    StepKind,
    command,
    condition,
    evaluation,
    fail,
    parameter,
    processing,
    register_model,
    training,
)
from servekit.services.pipelines.definition.conditions import evaluate
from servekit.services.pipelines.definition.loading import load_pipeline, pipeline_from_document
from servekit.services.pipelines.definition.refs import Get
from servekit.services.pipelines.definition.steps import parse_duration
from servekit.services.pipelines.engine.scheduler import Node, NodeState, schedule


def _noop(ctx: Any, **_: Any) -> None:
    return None


def _pipeline() -> Pipeline:
    make = processing(name="make-data", inputs={"rows": Param("rows")}, outputs=["data"])(_noop)
    other = processing(name="other-data", outputs=["data"])(_noop)
    train = training(name="train", inputs={"data": make.output("data")}, outputs=["model"], cache=True)(_noop)
    ev = evaluation(name="evaluate", inputs={"model": train.output("model"), "extra": other.output("data")})(_noop)
    reg = register_model("register", group="g", model_data=train.output("model"), metrics=ev.output("metrics"))
    stop = fail("too-bad", "accuracy too low")
    check = condition("check", [GreaterThanOrEqualTo(ev.metric("accuracy"), Param("min_accuracy"))], [reg], [stop])
    return Pipeline(
        "demo",
        (make, other, train, ev, check, reg, stop),
        (parameter("rows", 100), parameter("min_accuracy", 0.8)),
    )


def test_references_make_the_dag() -> None:
    p = _pipeline()
    assert p.dag.upstream["train"] == {"make-data"}
    assert p.dag.upstream["evaluate"] == {"train", "other-data"}
    assert p.dag.upstream["register"] == {"check", "train", "evaluate"}
    assert p.dag.gates == {"register": ("check", True), "too-bad": ("check", False)}
    order = list(p.dag.order)
    assert order.index("make-data") < order.index("train") < order.index("evaluate") < order.index("check")
    assert p.step("evaluate").outputs == ("metrics",)


def test_document_round_trips_through_the_loader(tmp_path: Path) -> None:
    doc = _pipeline().to_document()
    again = pipeline_from_document(doc, base=tmp_path, where="doc")
    assert again.to_document() == doc


def test_parameters_bind_with_defaults_and_parse_text() -> None:
    p = _pipeline()
    assert p.bind({}) == {"rows": 100, "min_accuracy": 0.8}
    assert p.bind({"rows": "7", "min_accuracy": "0.5"}) == {"rows": 7, "min_accuracy": 0.5}
    with pytest.raises(PipelineError, match=r"parameter 'rows' is Integer, and 'many' is not one"):
        p.bind({"rows": "many"})
    with pytest.raises(PipelineError, match=r"no parameter\(s\) \['nope'\]"):
        p.bind({"nope": "1"})


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda: Pipeline("p", (command("a", ["true"]), command("a", ["true"]))),
            "two steps are named 'a'",
        ),
        (
            lambda: Pipeline("p", (command("a", ["echo", Get("Steps.missing.Outputs.x")]),)),
            r"step 'a': reference 'Steps.missing.Outputs.x' names step 'missing', which is not a step",
        ),
        (
            lambda: Pipeline("p", (command("a", ["echo", Param("nope")]),)),
            r"reference 'Parameters.nope' names no parameter",
        ),
        (
            lambda: Pipeline(
                "p",
                (
                    command("a", ["echo", Get("Steps.b.Outputs.o")], outputs=["o"]),
                    command("b", ["echo", Get("Steps.a.Outputs.o")], outputs=["o"]),
                ),
            ),
            r"the steps form a cycle: (a -> b -> a|b -> a -> b)",
        ),
        (
            lambda: Pipeline(
                "p", (command("a", ["true"], outputs=["o"]), command("b", ["echo", Get("Steps.a.Outputs.z")]))
            ),
            r"step 'b': reference 'Steps.a.Outputs.z': step 'a' has outputs \['o'\]",
        ),
        (
            lambda: Pipeline("p", (condition("c", [GreaterThanOrEqualTo(1, 0)], ["ghost"]),)),
            "condition 'c': IfSteps names 'ghost', which is not a step",
        ),
        (
            lambda: Pipeline("p", (command("a", ["true"], depends_on=["zz"]),)),
            "DependsOn names 'zz'",
        ),
    ],
)
def test_bad_definitions_fail_with_clear_errors(build: Any, message: str) -> None:
    with pytest.raises(PipelineError, match=message):
        build()


def test_step_level_checks() -> None:
    make = processing(name="make", outputs=["data"])(_noop)
    with pytest.raises(PipelineError, match=r"step 'make' has no output 'model'; its outputs: \['data'\]"):
        make.output("model")
    with pytest.raises(PipelineError, match="only Evaluation steps have metrics"):
        make.metric("accuracy")
    with pytest.raises(PipelineError, match="MaxAttempts must be 1-20"):
        RetryPolicy(("OSError",), max_attempts=50)
    assert parse_duration("P1DT2H", "x") == 86400 + 7200
    with pytest.raises(PipelineError, match="not an ISO-8601 duration"):
        parse_duration("10 minutes", "x")


def test_yaml_definition(tmp_path: Path) -> None:
    (tmp_path / "steps.py").write_text("def make(ctx, rows):\n    return {'rows': rows}\n")
    (tmp_path / "p.yaml").write_text(
        """
Name: from-yaml
Parameters:
  - {Name: Rows, Type: Integer, DefaultValue: 5}
  - {Name: Min, Type: Float, DefaultValue: 0.5}
Steps:
  - Name: make
    Type: Processing
    Function: steps.py:make
    Arguments: {rows: {Get: Parameters.Rows}}
    Outputs: [data]
    TimeoutSeconds: 30
    RetryPolicies: [{ExceptionType: [ConnectionError], IntervalSeconds: 2, MaxAttempts: 3}]
    CacheConfig: {Enabled: true, ExpireAfter: PT1H}
  - Name: score
    Type: Evaluation
    Command: [python, -c, "print(1)", {Get: Steps.make.Outputs.data}]
  - Name: check
    Type: Condition
    Arguments:
      Conditions:
        - {Type: GreaterThanOrEqualTo, LeftValue: {Get: Steps.score.Metrics.acc}, RightValue: {Get: Parameters.Min}}
      IfSteps: []
      ElseSteps: [stop]
  - Name: stop
    Type: Fail
    Arguments: {ErrorMessage: {"Std:Join": {On: " ", Values: [too low, {Get: Steps.score.Metrics.acc}]}}}
"""
    )
    p = load_pipeline(str(tmp_path / "p.yaml"))
    make = p.step("make")
    assert make.kind is StepKind.PROCESSING and make.function is not None
    assert make.function(None, rows=3) == {"rows": 3}
    assert make.retry[0].delay(2) == 4.0 and make.cache is not None and make.cache.expire_after_s == 3600
    assert p.dag.upstream["stop"] == {"check", "score"}
    with pytest.raises(PipelineError, match=r"Type 'Lambda' is not a step type"):
        pipeline_from_document({"Name": "x", "Steps": [{"Name": "a", "Type": "Lambda"}]}, base=tmp_path, where="doc")


def test_conditions_evaluate_resolved_values() -> None:
    values = {"Steps.e.Metrics.acc": 0.9, "Parameters.min": 0.8}
    cond = GreaterThanOrEqualTo(Get("Steps.e.Metrics.acc"), Get("Parameters.min"))
    assert evaluate(cond, lambda ref: values[ref.path]) is True
    values["Steps.e.Metrics.acc"] = 0.5
    assert evaluate(cond, lambda ref: values[ref.path]) is False
    with pytest.raises(PipelineError, match=r"cannot compare 'x' with 0\.8"):
        evaluate(cond, lambda ref: "x" if ref.path.startswith("Steps") else 0.8)


def test_scheduler_runs_independent_steps_together_and_skips_the_other_branch() -> None:
    p = _pipeline()
    nodes: dict[str, Node] = {}
    plan = schedule(p.dag, nodes, now=0.0, max_parallel=4)
    assert set(plan.ready) == {"make-data", "other-data"}  # independent: both start at once
    assert schedule(p.dag, nodes, now=0.0, max_parallel=1).ready == ("make-data",)
    for name in ("make-data", "other-data", "train", "evaluate"):
        nodes[name] = Node(NodeState.SUCCEEDED)
    assert schedule(p.dag, nodes, now=0.0, max_parallel=4).ready == ("check",)
    nodes["check"] = Node(NodeState.SUCCEEDED, outcome=False)
    plan = schedule(p.dag, nodes, now=0.0, max_parallel=4)
    assert plan.ready == ("too-bad",) and plan.skipped == {"register"}
    nodes["too-bad"] = Node(NodeState.FAILED)
    plan = schedule(p.dag, nodes, now=0.0, max_parallel=4)
    assert plan.finished and plan.failed


def test_scheduler_waits_out_a_retry_backoff() -> None:
    p = Pipeline("p", (command("a", ["true"]), command("b", ["true"], depends_on=["a"])))
    nodes = {"a": Node(NodeState.PENDING, not_before=10.0)}
    plan = schedule(p.dag, nodes, now=5.0, max_parallel=2)
    assert plan.ready == () and plan.wake_at == 10.0 and not plan.finished
    assert schedule(p.dag, nodes, now=10.0, max_parallel=2).ready == ("a",)
