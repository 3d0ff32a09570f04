"""Which steps may start now (pure): given the DAG, each step's state and the time, the steps whose inputs are all
there, those a condition ruled out, and when to look again. The engines (local processes, Ray, and the plane's
executor of SageMaker definitions) only carry out what this decides; time comes in as ``now``, never from inside."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol


class Dag(Protocol):
    """What scheduling needs of a pipeline's DAG: servekit's definitions and SageMaker's both have it."""

    @property
    def order(self) -> tuple[str, ...]: ...  # every step, each after all it waits for

    @property
    def upstream(self) -> Mapping[str, frozenset[str]]: ...  # step -> the steps it waits for

    @property
    def gates(self) -> Mapping[str, tuple[str, bool]]: ...  # branch step -> (its condition, the outcome it runs on)


class NodeState(enum.StrEnum):
    PENDING = "Pending"  # not started, or waiting for its next attempt (``not_before``)
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"


@dataclass(frozen=True, slots=True)
class Node:
    state: NodeState = NodeState.PENDING
    not_before: float = 0.0  # a retried step starts no earlier than this
    outcome: bool | None = None  # a condition's result, once it ran


@dataclass(frozen=True, slots=True)
class Plan:
    ready: tuple[str, ...]  # start these now (in topological order, at most max_parallel running in all)
    skipped: frozenset[str]  # on a branch a condition did not take, or after such a step: never run
    wake_at: float | None  # the earliest time a waiting retry becomes ready (None: nothing waits)
    finished: bool  # nothing runs and nothing more will start
    failed: bool  # a step failed: no new step starts, the run fails once the running ones end
    stopped: bool  # a step was stopped


def skipped_steps(dag: Dag, nodes: Mapping[str, Node]) -> frozenset[str]:
    """Steps that will never run: on the branch a finished condition did not take, or downstream of such a step."""
    out: set[str] = set()
    for name in dag.order:
        gate = dag.gates.get(name)
        if gate is not None:
            cond, branch = gate
            node = nodes.get(cond, Node())
            if cond in out or (node.state is NodeState.SUCCEEDED and node.outcome is not branch):
                out.add(name)
                continue
        if any(up in out for up in dag.upstream[name]):
            out.add(name)
    return frozenset(out)


def schedule(dag: Dag, nodes: Mapping[str, Node], *, now: float, max_parallel: int, stopping: bool = False) -> Plan:
    def state(name: str) -> NodeState:
        return nodes.get(name, Node()).state

    skipped = skipped_steps(dag, nodes)
    running = sum(1 for n in dag.order if state(n) is NodeState.RUNNING)
    failed = any(state(n) is NodeState.FAILED for n in dag.order)
    stopped = any(state(n) is NodeState.STOPPED for n in dag.order)
    ready: list[str] = []
    wake_at: float | None = None
    if not (failed or stopped or stopping):
        for name in dag.order:
            if state(name) is not NodeState.PENDING or name in skipped:
                continue
            if not all(state(up) is NodeState.SUCCEEDED for up in dag.upstream[name]):
                continue
            not_before = nodes.get(name, Node()).not_before
            if not_before > now:
                wake_at = not_before if wake_at is None else min(wake_at, not_before)
            elif running + len(ready) < max_parallel:
                ready.append(name)
    finished = running == 0 and not ready and wake_at is None
    if finished and not (failed or stopped or stopping):
        # Nothing failed, so every step either succeeded or was skipped: anything else would be ready.
        assert all(state(n) is NodeState.SUCCEEDED or n in skipped for n in dag.order), "scheduler stalled"
    return Plan(tuple(ready), skipped, wake_at, finished, failed, stopped)
