"""The DAG a pipeline's references imply (pure): edges, their checks, a topological order and the condition gates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from servekit.services.pipelines.definition.refs import EXECUTION_FIELDS, references
from servekit.services.pipelines.definition.steps import Step
from servekit.services.pipelines.errors import PipelineError


@dataclass(frozen=True, slots=True)
class Dag:
    order: tuple[str, ...]  # every step, each after all it depends on (ties by definition order)
    upstream: Mapping[str, frozenset[str]]  # step -> the steps it waits for
    gates: Mapping[str, tuple[str, bool]]  # step -> (condition step, the outcome it runs on)

    def downstream(self, name: str) -> set[str]:
        return {s for s, ups in self.upstream.items() if name in ups}


def step_values(step: Step) -> list[object]:
    """Everything in a step that may hold references."""
    values: list[object] = [dict(step.arguments), list(step.reads), list(step.command)]
    for cond in step.conditions:
        values += list(cond.refs())
    return values


def build_dag(steps: Sequence[Step], parameters: Sequence[str]) -> Dag:
    """Check every reference and name, then order the steps. Raises :class:`PipelineError` for a duplicate step
    name, a reference to an unknown step, parameter or output, a condition branch naming an unknown step, and a
    cycle (naming its steps in order)."""
    by_name: dict[str, Step] = {}
    for s in steps:
        if s.name in by_name:
            raise PipelineError(f"two steps are named {s.name!r}; step names must be unique in a pipeline")
        by_name[s.name] = s
    upstream: dict[str, set[str]] = {s.name: set() for s in steps}
    gates: dict[str, tuple[str, bool]] = {}
    for s in steps:
        for ref in (r for v in step_values(s) for r in references(v)):
            _check_ref(s.name, ref.path, ref.parts, by_name, parameters)
            if ref.step is not None:
                upstream[s.name].add(ref.step)
        for dep in s.depends_on:
            if dep not in by_name:
                raise PipelineError(f"step {s.name!r}: DependsOn names {dep!r}, which is not a step of this pipeline")
            upstream[s.name].add(dep)
        for branch, names in ((True, s.if_steps), (False, s.else_steps)):
            for target in names:
                if target not in by_name:
                    which = "IfSteps" if branch else "ElseSteps"
                    raise PipelineError(f"condition {s.name!r}: {which} names {target!r}, which is not a step")
                if target == s.name:
                    raise PipelineError(f"condition {s.name!r} lists itself in its branches")
                if target in gates:
                    other = gates[target][0]
                    raise PipelineError(
                        f"step {target!r} is in a branch of both {other!r} and {s.name!r}"
                        if other != s.name
                        else f"condition {s.name!r} lists {target!r} in both IfSteps and ElseSteps"
                    )
                gates[target] = (s.name, branch)
                upstream[target].add(s.name)
    for name, ups in upstream.items():
        if name in ups:
            raise PipelineError(f"step {name!r} refers to itself")
    order = _topological(steps, upstream)
    return Dag(tuple(order), {k: frozenset(v) for k, v in upstream.items()}, gates)


def _check_ref(owner: str, path: str, parts: list[str], steps: Mapping[str, Step], parameters: Sequence[str]) -> None:
    where = f"step {owner!r}: reference {path!r}"
    head = parts[0]
    if head == "Parameters":
        if len(parts) != 2 or parts[1] not in parameters:
            raise PipelineError(f"{where} names no parameter; parameters: {list(parameters)}")
    elif head == "Execution":
        if len(parts) != 2 or parts[1] not in EXECUTION_FIELDS:
            raise PipelineError(f"{where}: known Execution fields are {', '.join(EXECUTION_FIELDS)}")
    elif head == "Steps":
        if len(parts) < 3:
            raise PipelineError(f"{where} is too short: Steps.<step>.<property>")
        target = steps.get(parts[1])
        if target is None:
            raise PipelineError(f"{where} names step {parts[1]!r}, which is not a step; steps: {sorted(steps)}")
        why = target.exposes(parts[2:])
        if why is not None:
            raise PipelineError(f"{where}: {why}")
    else:
        raise PipelineError(f"{where} must start with Steps., Parameters. or Execution.")


def _topological(steps: Sequence[Step], upstream: Mapping[str, set[str]]) -> list[str]:
    position = {s.name: i for i, s in enumerate(steps)}
    state: dict[str, int] = {}  # 1 = on the path, 2 = done
    order: list[str] = []
    path: list[str] = []

    def visit(name: str) -> None:
        state[name] = 1
        path.append(name)
        for up in sorted(upstream[name], key=position.__getitem__):
            if state.get(up) == 1:
                cycle = [*path[path.index(up) :], up]
                raise PipelineError(f"the steps form a cycle: {' -> '.join(reversed(cycle))}")
            if up not in state:
                visit(up)
        path.pop()
        state[name] = 2
        order.append(name)

    for s in steps:
        if s.name not in state:
            visit(s.name)
    return order
