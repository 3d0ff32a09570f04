"""SelectiveExecutionConfig (pure): which steps of a new execution run, and which take their results from an earlier
execution of the same pipeline. The selected steps run; a step they wait for (directly or further up) that is not
selected reuses its result from the source execution, which it must have succeeded in (else StartPipelineExecution
refuses the selection, naming it); every other step is neither run nor shown."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from servekit.services.pipelines.runs.repo import StepRow
from servekit.services.pipelines.runs.status import StepStatus
from servekit.services.pipelines.sagemaker import Dag, Definition


class SelectionError(ValueError):
    """The selection cannot run (the message says which step and why): a ValidationException at Start."""


@dataclass(frozen=True, slots=True)
class Selection:
    reused: tuple[str, ...]  # upstream of a selected step: its row and properties carried over from the source
    skipped: tuple[str, ...]  # neither selected nor needed: not run, not shown


def select(
    definition: Definition, dag: Dag, source_rows: Mapping[str, StepRow], selected: Collection[str]
) -> Selection:
    names = {s.name for s in definition.all_steps()}
    unknown = sorted(set(selected) - names)
    if unknown:
        raise SelectionError(f"SelectedSteps names {unknown[0]!r}, which is no step of the pipeline")
    if not selected:
        raise SelectionError("SelectedSteps must name at least one step")
    needed: set[str] = set()
    stack = [u for name in selected for u in dag.upstream[name]]
    while stack:
        up = stack.pop()
        if up not in needed:
            needed.add(up)
            stack.extend(dag.upstream[up])
    reused, skipped = [], []
    for name in dag.order:
        if name in selected:
            continue
        if name not in needed:
            skipped.append(name)
            continue
        row = source_rows.get(name)
        if row is None or row.status != StepStatus.SUCCEEDED:
            waiting = sorted(s for s in selected if name in dag.upstream[s]) or sorted(selected)
            raise SelectionError(
                f"Step {waiting[0]!r} needs step {name!r}, which is not selected and did not succeed in the source "
                f"execution: select {name!r} too, or choose a source execution where it succeeded"
            )
        reused.append(name)
    return Selection(tuple(reused), tuple(skipped))
