"""What one execution of a SageMaker pipeline definition holds while it runs, and how a step's attempt ends:
shared by the executor (the loop) and the steps (the service calls)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from servekit.services.pipelines.engine.scheduler import Node
from servekit.services.pipelines.execution.services import JobKind
from servekit.services.pipelines.runs.repo import RunRow, StepRow
from servekit.services.pipelines.sagemaker import Dag, Definition

SOURCE = "sagemaker-pipeline"  # RunRow.source of these executions (servekit's DSL runs hold a file there)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one attempt of a step ended."""

    step: str
    attempt: int
    ok: bool
    properties: Mapping[str, Any] | None = None  # what later steps read (the Describe* response)
    metadata: Mapping[str, Any] = field(default_factory=dict)  # ListPipelineExecutionSteps' Metadata
    message: str = ""
    failure_type: str | None = None  # as RetryPolicies name it; None: not retried
    stopped: bool = False
    cache_key: str = ""


@dataclass
class Attempt:
    attempt: int
    task: asyncio.Task[Outcome]
    job: tuple[JobKind, str] | None = None  # the job it started, once created (a stop stops it)


@dataclass
class Execution:
    row: RunRow
    pipeline_arn: str
    definition: Definition
    dag: Dag
    parameters: dict[str, Any]
    max_parallel: int
    rows: dict[str, StepRow] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)
    properties: dict[str, Mapping[str, Any]] = field(default_factory=dict)  # each succeeded step's
    running: dict[str, Attempt] = field(default_factory=dict)
    retries: dict[str, int] = field(default_factory=dict)
    first_failure: dict[str, float] = field(default_factory=dict)
    outcomes: list[Outcome] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    stopping: bool = False
    failure: str = ""
    adopted_jobs: dict[str, str] = field(default_factory=dict)  # step -> job name its attempt started (adoption)

    @property
    def run_id(self) -> str:
        return self.row.run_id

    def started_at(self) -> datetime:
        return datetime.fromtimestamp(self.row.created, UTC)
