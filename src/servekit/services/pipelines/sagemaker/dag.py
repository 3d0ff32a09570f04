"""The DAG of a SageMaker pipeline definition (pure): the checks across steps that CreatePipeline makes, each step's
upstream steps, the condition branches and a topological order.

A step waits for (its upstream):
- every step named in its ``DependsOn``;
- every step whose properties it reads: ``{"Get": "Steps.X..."}`` anywhere in its Arguments, a condition's values,
  a fail message, and ``Std:JsonGet`` over ``Steps.X.PropertyFiles.F``;
- for a step in a condition's ``IfSteps``/``ElseSteps``: that condition step. It runs only when the condition
  takes its branch (:attr:`Dag.gates`); a step that waits for a step that did not run does not run either
  (:meth:`Dag.not_run`)."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass

from servekit.services.pipelines.sagemaker.errors import DefinitionError
from servekit.services.pipelines.sagemaker.expressions import Ref, RefKind, references
from servekit.services.pipelines.sagemaker.model import EXECUTION_VARIABLES, Definition, Step
from servekit.services.pipelines.sagemaker.parse import parse_definition


@dataclass(frozen=True, slots=True)
class Dag:
    order: tuple[str, ...]  # every step (branches too), each after all it waits for; ties in definition order
    upstream: Mapping[str, frozenset[str]]  # step -> the steps it waits for
    gates: Mapping[str, tuple[str, bool]]  # branch step -> (its condition step, the outcome it runs on)
    references: Mapping[str, tuple[Ref, ...]]  # step -> the references its expressions make

    def downstream(self, name: str) -> frozenset[str]:
        """The steps that wait for ``name`` directly."""
        return frozenset(s for s, ups in self.upstream.items() if name in ups)

    def branch(self, condition: str, outcome: bool) -> tuple[str, ...]:
        """The steps ``condition`` runs when it evaluates to ``outcome``, in definition order."""
        return tuple(s for s in self.order if self.gates.get(s) == (condition, outcome))

    def not_run(self, outcomes: Mapping[str, bool]) -> frozenset[str]:
        """The steps that will not run given the conditions evaluated so far (condition step -> outcome): those in
        branches not taken, and every step that waits for one of them."""
        skipped: set[str] = set()
        for step in self.order:  # upstream steps come first
            gate = self.gates.get(step)
            if gate is not None and gate[0] in outcomes and outcomes[gate[0]] != gate[1]:
                skipped.add(step)
            elif self.upstream[step] & skipped:
                skipped.add(step)
        return frozenset(skipped)


def load_definition(source: str | bytes | Mapping[str, object]) -> tuple[Definition, Dag]:
    """Parse and check a definition as CreatePipeline does: :class:`DefinitionError` for the first thing wrong."""
    definition = parse_definition(source)
    return definition, build_dag(definition)


def _placements(definition: Definition) -> dict[str, str]:
    """step -> where it is defined ("at the top level", "in condition 'C''s IfSteps"); a step named twice is an
    error naming both places."""
    where: dict[str, str] = {}

    def walk(steps: tuple[Step, ...], place: str) -> None:
        for s in steps:
            if s.name in where:
                first = where[s.name]
                if first == place == "at the top level":
                    raise DefinitionError(f"Step names must be unique: {s.name!r} is defined twice at the top level.")
                raise DefinitionError(
                    f"Step names must be unique: step {s.name!r} is defined {first} and also {place}; a step in a"
                    " condition's branch belongs to that branch only."
                )
            where[s.name] = place
            walk(s.if_steps, f"in condition {s.name!r}'s IfSteps")
            walk(s.else_steps, f"in condition {s.name!r}'s ElseSteps")

    walk(definition.steps, "at the top level")
    return where


def _check_ref(step: Step, ref: Ref, definition: Definition, known: Mapping[str, Step]) -> None:
    if ref.kind is RefKind.PARAMETER:
        if definition.parameter(ref.name) is None:
            declared = ", ".join(p.name for p in definition.parameters) or "none"
            raise DefinitionError(
                f"Step {step.name!r} refers to parameter {ref.name!r} ({ref.text}), which the pipeline does not"
                f" declare (its parameters: {declared})."
            )
    elif ref.kind is RefKind.EXECUTION:
        if ref.name not in EXECUTION_VARIABLES:
            raise DefinitionError(
                f"Step {step.name!r} refers to {ref.text!r}; execution variables are "
                f"{', '.join(sorted(EXECUTION_VARIABLES))}."
            )
    else:
        target = known.get(ref.name)
        if target is None:
            raise DefinitionError(
                f"Step {step.name!r} refers to step {ref.name!r} ({ref.text}), which is not in the pipeline definition."
            )
        if target.name == step.name:
            raise DefinitionError(f"Step {step.name!r} refers to its own properties ({ref.text}).")
        if ref.kind is RefKind.PROPERTY_FILE and target.property_file(ref.path) is None:
            declared = ", ".join(f.name for f in target.property_files) or "none"
            raise DefinitionError(
                f"Step {step.name!r} reads property file {ref.path!r} of step {ref.name!r} ({ref.text}), which that"
                f" step does not declare (its PropertyFiles: {declared})."
            )


def _experiment_refs(definition: Definition) -> None:
    config = definition.experiment_config
    if config is None:
        return
    for ref in references(config, "PipelineExperimentConfig"):
        if ref.kind is not RefKind.PARAMETER and ref.kind is not RefKind.EXECUTION:
            raise DefinitionError(
                f"PipelineExperimentConfig may refer to parameters and execution variables only, not {ref.text!r}."
            )
        if ref.kind is RefKind.PARAMETER and definition.parameter(ref.name) is None:
            raise DefinitionError(f"PipelineExperimentConfig refers to parameter {ref.name!r}, which is not declared.")
        if ref.kind is RefKind.EXECUTION and ref.name not in EXECUTION_VARIABLES:
            raise DefinitionError(f"PipelineExperimentConfig refers to {ref.text!r}, which is no execution variable.")


def build_dag(definition: Definition) -> Dag:
    """Check the references and names of ``definition`` and order its steps."""
    _placements(definition)
    steps = definition.all_steps()
    known = {s.name: s for s in steps}
    _experiment_refs(definition)
    upstream: dict[str, set[str]] = {s.name: set() for s in steps}
    gates: dict[str, tuple[str, bool]] = {}
    refs: dict[str, tuple[Ref, ...]] = {}
    for s in steps:
        found = tuple(r for v in s.expression_values() for r in references(v, f"Step {s.name!r}"))
        for ref in found:
            _check_ref(s, ref, definition, known)
            if ref.kind in (RefKind.STEP, RefKind.PROPERTY_FILE):
                upstream[s.name].add(ref.name)
        refs[s.name] = found
        for dep in s.depends_on:
            if dep not in known:
                raise DefinitionError(
                    f"Step {s.name!r} depends on step {dep!r}, which is not in the pipeline definition."
                )
            if dep == s.name:
                raise DefinitionError(f"Step {s.name!r} depends on itself.")
            upstream[s.name].add(dep)
        for outcome, branch in ((True, s.if_steps), (False, s.else_steps)):
            for b in branch:
                gates[b.name] = (s.name, outcome)
                upstream[b.name].add(s.name)
    order = _topological(definition, upstream)
    return Dag(
        order=order,
        upstream={k: frozenset(v) for k, v in upstream.items()},
        gates=gates,
        references=refs,
    )


def _topological(definition: Definition, upstream: Mapping[str, set[str]]) -> tuple[str, ...]:
    """Kahn's order, ties broken by definition order; a cycle is an error naming its steps in order."""
    position = {s.name: i for i, s in enumerate(definition.all_steps())}
    waiting = {name: len(ups) for name, ups in upstream.items()}
    downstream: dict[str, list[str]] = {name: [] for name in upstream}
    for name, ups in upstream.items():
        for u in ups:
            downstream[u].append(name)
    ready = [(position[n], n) for n, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, name = heapq.heappop(ready)
        order.append(name)
        for d in downstream[name]:
            waiting[d] -= 1
            if waiting[d] == 0:
                heapq.heappush(ready, (position[d], d))
    if len(order) < len(upstream):
        cycle = _find_cycle({n: upstream[n] for n in upstream if n not in order}, position)
        raise DefinitionError(
            f"The pipeline's steps form a cycle: {' -> '.join(cycle)} (each step waits for the one before it,"
            " through DependsOn, a property reference or a condition branch)."
        )
    return tuple(order)


def _find_cycle(upstream: Mapping[str, set[str]], position: Mapping[str, int]) -> list[str]:
    """One cycle among steps that all wait on something left: walk upstream until a step repeats."""
    start = min(upstream, key=position.__getitem__)
    path = [start]
    seen = {start: 0}
    node = start
    while True:
        node = min((u for u in upstream[node] if u in upstream), key=position.__getitem__)
        if node in seen:
            cycle = path[seen[node] :]
            # written in the direction data flows: each step is followed by the one that waits for it
            cycle.reverse()
            first = cycle.index(min(cycle, key=position.__getitem__))  # start at the step defined first
            cycle = cycle[first:] + cycle[:first]
            return [*cycle, cycle[0]]
        seen[node] = len(path)
        path.append(node)
