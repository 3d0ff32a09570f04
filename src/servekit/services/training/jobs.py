"""What the training, processing and tuning APIs share: the plane's tasks that run their jobs, failing the jobs a
previous ``servekit up`` left unfinished, a page of one kind's jobs from List*'s parameters, and epoch times as
the datetimes Describe* answers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Mapping
from datetime import UTC, datetime
from typing import Any

from servekit.aws.errors import validation_exception
from servekit.aws.timestamps import optional_epoch
from servekit.services.training.store import SageMakerJobRow, SageMakerJobs
from servekit.state.paging import Page

RESTARTED = "servekit up stopped while the job ran; start the job again"


def when(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


class JobTasks:
    """One asyncio task per running job, cancelled when the plane stops."""

    def __init__(self) -> None:
        self.tasks: dict[str, asyncio.Task[None]] = {}

    def start(self, name: str, job: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(job)
        self.tasks[name] = task
        task.add_done_callback(lambda _t: self.tasks.pop(name, None))

    async def wait(self, name: str) -> None:
        task = self.tasks.get(name)
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)

    async def close(self) -> None:
        running = list(self.tasks.values())
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def fail_unfinished(jobs: SageMakerJobs, kind: str, statuses: tuple[str, ...], secondary: str | None = None) -> None:
    """Jobs a previous servekit up left in ``statuses`` cannot go on (their sandboxes died with it): Failed."""
    for name in jobs.unfinished(kind, statuses):
        jobs.update(kind, name, status="Failed", secondary=secondary, reason=RESTARTED, final=True)


def list_page(jobs: SageMakerJobs, kind: str, p: Mapping[str, Any]) -> Page[SageMakerJobRow]:
    """The page a List*Jobs request asks for (its filters, sort and token); a bad one is a ValidationException."""
    try:
        return jobs.list(
            kind,
            name_contains=p.get("NameContains"),
            status=p.get("StatusEquals"),
            created_after=optional_epoch(p.get("CreationTimeAfter")),
            created_before=optional_epoch(p.get("CreationTimeBefore")),
            modified_after=optional_epoch(p.get("LastModifiedTimeAfter")),
            modified_before=optional_epoch(p.get("LastModifiedTimeBefore")),
            sort_by=p.get("SortBy", "CreationTime"),
            sort_order=p.get("SortOrder", "Descending"),
            max_results=p.get("MaxResults", 10),
            next_token=p.get("NextToken"),
        )
    except ValueError as exc:
        raise validation_exception(str(exc)) from None
