"""CloudWatch Logs for ``servekit up``: the service, and the shipper with the plane's own sources of output files.

- Every instance of every endpoint (the fleets of a deployment under way included): its process's output file
  into ``/aws/sagemaker/Endpoints/<endpoint>``, stream ``<variant>/<instance-id>``.
- Every batch transform job the API started that is InProgress or Stopping, or ended in the last five minutes
  (a short job may start and end between two passes of the shipper): its run's output
  (``<home>/transform/api/<job>.log``) into ``/aws/sagemaker/TransformJobs``, stream ``<job>/<instance-id>``
  (``i-`` and 17 hex digits, fixed per job name, as SageMaker names a transform instance).

Training and processing jobs register their files with the shipper themselves (``LogShipper.register``).
Retention comes from the environment (:mod:`servekit.services.logs.retention`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from servekit.aws.names import Account
from servekit.errors import ConfigError
from servekit.services.database import StateDB
from servekit.services.hosting.fleet import EndpointController
from servekit.services.logs.api import LogsService
from servekit.services.logs.retention import RetentionLimits
from servekit.services.logs.shipper import TRANSFORM_GROUP, LogShipper, LogSource, endpoint_group
from servekit.services.transform.progress import data_log_path
from servekit.services.transform.repo import TransformJobs
from servekit.services.transform.status import JobStatus

__all__ = ["build_logs", "endpoint_sources", "transform_instance_id", "transform_sources"]

_RUNNING = (str(JobStatus.IN_PROGRESS), str(JobStatus.STOPPING))
ENDED_WINDOW_S = 300.0


def endpoint_sources(controllers: Mapping[str, EndpointController]) -> list[LogSource]:
    """The output file of every instance of every endpoint, in the endpoint's group."""
    out: list[LogSource] = []
    for name, controller in list(controllers.items()):
        fleets = list(controller.fleets.values())
        if controller.deployment is not None:
            fleets += [f for f in controller.deployment.fleets.values() if all(f is not g for g in fleets)]
        for fleet in fleets:
            for instance in list(fleet.instances):
                handle = instance.handle
                if handle.log_path:
                    stream = f"{fleet.plan.name}/{handle.spec.instance_id}"
                    out.append(LogSource(endpoint_group(name), stream, handle.log_path))
    return out


def transform_instance_id(job: str) -> str:
    return "i-" + hashlib.sha256(job.encode()).hexdigest()[:17]


def transform_sources(
    jobs: TransformJobs, home: Path, clock: Callable[[], float] = time.time
) -> Callable[[], list[LogSource]]:
    """The output of each transform job that runs or ended in the last ``ENDED_WINDOW_S`` (a job may start and end
    between two passes of the shipper): an API run's output, and every run's data log (a job run from the CLI
    prints the rest to its terminal)."""
    folder = home / "transform" / "api"

    def sources() -> list[LogSource]:
        out = []
        for job in jobs.names_running_or_ended_since(_RUNNING, clock() - ENDED_WINDOW_S):
            stream = f"{job}/{transform_instance_id(job)}"
            out.append(LogSource(TRANSFORM_GROUP, stream, str(folder / f"{job}.log")))  # an API run's output
            # the batch agent's own lines, for a run from the API or the CLI alike (SageMaker's data-log stream)
            out.append(LogSource(TRANSFORM_GROUP, f"{stream}/data-log", str(data_log_path(home, job))))
        return out

    return sources


class _Shipper(LogShipper):
    """The plane's shipper, on a connection of its own (it writes from a worker thread), closed with it."""

    def __init__(self, db: StateDB, limits: RetentionLimits) -> None:
        super().__init__(db.logs, retention=limits)
        self._db = db

    async def close(self) -> None:
        try:
            await super().close()
        finally:
            self._db.close()


def build_logs(
    db: StateDB,
    home: Path,
    account: Account,
    controllers: Mapping[str, EndpointController],
    env: Mapping[str, str],
    database_url: str | None = None,
) -> tuple[LogsService, LogShipper]:
    """The Logs operations (on ``db``) and the shipper following the endpoints' instances and the transform jobs.
    The sources are asked on the event loop (through ``db``); files are read and events written on the shipper's
    own connection."""
    try:
        limits = RetentionLimits.from_env(env)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    shipper = _Shipper(StateDB.open(home, database_url=database_url), limits)
    shipper.add_provider(lambda: endpoint_sources(controllers))
    shipper.add_provider(transform_sources(db.transform_jobs, home))
    return LogsService(db.logs, account), shipper


class JobLogFiles:
    """What a job runner needs of the shipper (servekit.services.training.runner.JobLogs): follow a job's log file, read
    it to its end when the job ends, let it go."""

    def __init__(self, shipper: LogShipper) -> None:
        self._shipper = shipper

    def register(self, group: str, stream: str, path: Path) -> None:
        self._shipper.register(group, stream, path)

    def unregister(self, path: Path) -> None:
        self._shipper.unregister(path)

    def flush(self, group: str, stream: str, path: Path) -> None:
        self._shipper.drain(LogSource(group, stream, str(path)))
