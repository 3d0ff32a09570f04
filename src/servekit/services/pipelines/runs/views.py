"""A run as SageMaker shapes it (DescribePipelineExecution plus ListPipelineExecutionSteps' items), from the state
alone: no user code is imported, so any run can be described. For the CLI now and the API later."""

from __future__ import annotations

import time
from typing import Any

from servekit.services.pipelines.runs.repo import Pipelines, RunRow, StepRow


def _iso(t: float | None) -> str | None:
    return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def run_summary(run: RunRow) -> dict[str, Any]:
    return {
        "PipelineExecutionId": run.run_id,
        "PipelineExecutionArn": run.arn,
        "PipelineName": run.pipeline,
        "PipelineExecutionStatus": run.status,
        "FailureReason": run.failure_reason,
        "CreationTime": _iso(run.created),
        "LastModifiedTime": _iso(run.modified),
        "EndTime": _iso(run.ended),
    }


def _step_item(row: StepRow, kind: str) -> dict[str, Any]:
    item: dict[str, Any] = {
        "StepName": row.step,
        "StepType": kind,
        "StepStatus": row.status,
        "AttemptCount": row.attempts,
        "StartTime": _iso(row.started),
        "EndTime": _iso(row.ended),
        "FailureReason": row.failure_reason,
        "Metadata": dict(row.metadata or {}),
        "Outputs": dict(row.outputs or {}),
        "CodeHash": row.code_hash,
    }
    if row.cache_source_run:
        item["CacheHitResult"] = (row.metadata or {}).get("CacheHitResult", {})
    return item


def describe_run(repo: Pipelines, run: RunRow) -> dict[str, Any]:
    """The run and every step of its definition in order; a step that never started says why."""
    rows = {r.step: r for r in repo.steps(run.run_id)}
    steps_doc = run.definition.get("Steps", [])
    gates: dict[str, tuple[str, bool]] = {}
    for s in steps_doc:
        if s.get("Type") == "Condition":
            args = s.get("Arguments", {})
            for name in args.get("IfSteps", []):
                gates[name] = (s["Name"], True)
            for name in args.get("ElseSteps", []):
                gates[name] = (s["Name"], False)
    steps = []
    for s in steps_doc:
        name, kind = s["Name"], s["Type"]
        row = rows.get(name)
        if row is not None:
            steps.append(_step_item(row, kind))
            continue
        why = "not started"
        gate = gates.get(name)
        if gate is not None and gate[0] in rows:
            outcome = (rows[gate[0]].metadata or {}).get("Condition", {}).get("Outcome")
            if outcome is not None and (outcome == "True") is not gate[1]:
                why = f"not run: condition {gate[0]!r} was {outcome}"
        steps.append({"StepName": name, "StepType": kind, "StepStatus": None, "Note": why})
    return {**run_summary(run), "Parameters": run.parameters, "ArtifactRoot": run.artifact_root, "Steps": steps}
