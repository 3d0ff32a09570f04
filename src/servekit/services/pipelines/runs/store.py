"""Pipeline runs over the ``pipelines`` repository of the state database: ids and ARNs, statuses and their legal
transitions, who owns a running run, stopping and resuming."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable
from dataclasses import replace

from servekit._utils.processes import owner_alive
from servekit.services.pipelines.errors import RunConflict, RunNotFound
from servekit.services.pipelines.runs.repo import Pipelines, RunRow, StaleRunStatus, StepRow
from servekit.services.pipelines.runs.status import RunStatus, StepStatus, check_run_transition, check_step_transition
from servekit.state.database import Database

ACCOUNT = "000000000000"  # the local fiction the control plane uses too
REGION = "us-east-1"
_ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"


def new_run_id(token: Callable[[int], str] | None = None) -> str:
    """SageMaker's shape: 12 lower-case letters and digits."""
    pick = token or (lambda n: "".join(secrets.choice(_ID_ALPHABET) for _ in range(n)))
    return pick(12)


def run_arn(pipeline: str, run_id: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:pipeline/{pipeline.lower()}/execution/{run_id}"


class RunStore:
    def __init__(self, db: Database) -> None:
        self.db = db
        self.repo = Pipelines(db.conn)

    def get(self, run_id: str) -> RunRow:
        row = self.repo.get_run(run_id)
        if row is None:
            raise RunNotFound(f"no pipeline run {run_id!r} in {self.db.path}")
        return row

    def status(self, run_id: str) -> RunStatus:
        return RunStatus(self.get(run_id).status)

    def set_status(self, run_id: str, new: RunStatus, reason: str = "") -> None:
        current = self.status(run_id)
        check_run_transition(current, new)
        try:
            self.repo.set_run_status(run_id, new, reason=reason, final=new.finished, expected=[current])
        except StaleRunStatus:
            raise RunConflict(f"run {run_id} changed status meanwhile (now {self.status(run_id)})") from None

    def finish(self, run_id: str, new: RunStatus, reason: str = "") -> RunStatus:
        """End the run as ``new``; a stop asked for meanwhile (Stopping) makes it Stopped unless it failed."""
        current = self.status(run_id)
        if current is RunStatus.STOPPING and new is RunStatus.SUCCEEDED:
            new = RunStatus.STOPPED
        self.set_status(run_id, new, reason)
        return new

    def request_stop(self, run_id: str) -> RunStatus:
        """Ask a run to stop: Stopping while its process kills its running steps; Stopped at once when that
        process is gone. A finished run is a :class:`RunConflict`."""
        row = self.get(run_id)
        status = RunStatus(row.status)
        if status.finished:
            raise RunConflict(f"run {run_id} is already {status}")
        if status is RunStatus.STOPPING and owner_alive(row.owner_pid, row.owner_host):
            return status
        if not owner_alive(row.owner_pid, row.owner_host):
            self.repo.set_run_status(run_id, RunStatus.STOPPED, reason="stopped (its process was gone)", final=True)
            self._stop_steps(run_id)
            return RunStatus.STOPPED
        self.set_status(run_id, RunStatus.STOPPING)
        return RunStatus.STOPPING

    def _stop_steps(self, run_id: str) -> None:
        for s in self.repo.steps(run_id):
            if s.status in (StepStatus.STARTING, StepStatus.EXECUTING, StepStatus.STOPPING):
                self.repo.put_step(replace(s, status=StepStatus.STOPPED, failure_reason="stopped"))

    def take_over(self, run_id: str) -> RunRow:
        """Resume: a Stopped or Failed run (or one whose process died) becomes Executing, owned by this process."""
        row = self.get(run_id)
        status = RunStatus(row.status)
        if status is RunStatus.SUCCEEDED:
            raise RunConflict(f"run {run_id} already succeeded; start a new run")
        if status in (RunStatus.EXECUTING, RunStatus.STOPPING) and owner_alive(row.owner_pid, row.owner_host):
            raise RunConflict(f"run {run_id} is {status} in process {row.owner_pid}; stop it first")
        try:
            self.repo.take_over(
                run_id,
                check_run_transition(
                    RunStatus.EXECUTING if status is RunStatus.STOPPING else status, RunStatus.EXECUTING
                ),
                owner_pid=os.getpid(),
                owner_host=socket.gethostname(),
                expected=[status],
            )
        except StaleRunStatus:
            raise RunConflict(f"run {run_id} changed status meanwhile") from None
        return self.get(run_id)

    # ---- steps -----------------------------------------------------------------------------------------------

    def steps(self, run_id: str) -> dict[str, StepRow]:
        return {s.step: s for s in self.repo.steps(run_id)}

    def put_step(self, before: StepRow | None, after: StepRow) -> StepRow:
        """Write ``after`` once its status follows from ``before``'s (same status: an update in place)."""
        current = StepStatus(before.status) if before is not None else None
        new = StepStatus(after.status)
        if current is not new or new is StepStatus.EXECUTING:
            check_step_transition(after.step, current, new)
        self.repo.put_step(after)
        return after


def owner() -> tuple[int, str]:
    return os.getpid(), socket.gethostname()
