"""The console's drawing of a pipeline execution's DAG, from the definition JSON as the SDK writes it: edges from
Get references, DependsOn and condition branches; each step's status on its box; links to the jobs steps started."""

from __future__ import annotations

import json
from pathlib import Path

from servekit.console.pages.pipeline_dag import dag_svg, graph, job_link

FIXTURE = (
    Path(__file__).resolve().parents[1] / "services" / "pipelines" / "sagemaker" / "fixtures" / "credit_scoring.json"
)


def test_edges_come_from_references_depends_on_and_condition_branches() -> None:
    order, upstream = graph(json.loads(FIXTURE.read_text()))
    assert order == ["Prep", "Train", "Evaluate", "CheckAuc", "Register-RegisterModel", "AucTooLow"]
    assert upstream["Prep"] == set()
    assert upstream["Train"] == {"Prep"}  # Steps.Prep.ProcessingOutputConfig.Outputs['train']...
    assert upstream["Evaluate"] == {"Prep", "Train"}
    assert upstream["CheckAuc"] == {"Evaluate"}  # Std:JsonGet over Evaluate's property file
    assert "Train" in upstream["Register-RegisterModel"] and "CheckAuc" in upstream["Register-RegisterModel"]
    assert upstream["AucTooLow"] >= {"CheckAuc"}
    doc = {"Steps": [{"Name": "A", "Arguments": {}}, {"Name": "B", "DependsOn": ["A", "Gone"], "Arguments": {}}]}
    assert graph(doc)[1] == {"A": set(), "B": {"A"}}  # a name that is no step draws no edge


def test_boxes_carry_each_steps_status_and_link_its_job() -> None:
    doc = json.loads(FIXTURE.read_text())
    steps = [
        {
            "StepName": "Prep",
            "StepStatus": "Succeeded",
            "Metadata": {"ProcessingJob": {"Arn": "arn:aws:sagemaker:us-east-1:0:processing-job/pipelines-x-prep-1"}},
        },
        {"StepName": "Train", "StepStatus": "Failed", "Metadata": {}},
    ]
    running = dag_svg(doc, steps, finished=False)
    assert 'data-step="Prep" data-status="Succeeded"' in running
    assert 'data-step="Train" data-status="Failed"' in running
    assert 'data-step="Evaluate" data-status="Not started"' in running
    assert 'href="/console/processing/pipelines-x-prep-1"' in running
    assert running.count("<line ") == 9  # one arrow per edge
    assert 'data-step="Evaluate" data-status="Not run"' in dag_svg(doc, steps, finished=True)
    assert dag_svg({}, [], finished=True) == ""


def test_job_links_per_step_type() -> None:
    arn = "arn:aws:sagemaker:us-east-1:0:"
    assert job_link({"Metadata": {"TrainingJob": {"Arn": arn + "training-job/t-1"}}}) == "/console/training/t-1"
    assert job_link({"Metadata": {"TuningJob": {"Arn": arn + "hyper-parameter-tuning-job/h"}}}) == "/console/tuning/h"
    package = arn + "model-package/credit/1"
    assert job_link({"Metadata": {"RegisterModel": {"Arn": package}}}).startswith("/console/registry/package?arn=")
    assert job_link({"Metadata": {"Condition": {"Outcome": "True"}}}) == ""
