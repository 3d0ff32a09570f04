"""Batch transform: SageMaker's semantics on files, with the model in process or behind ``/invocations``."""

from servekit.services.transform.engine import RunOptions
from servekit.services.transform.job import JobSummary, run_job
from servekit.services.transform.spec import TransformSpec, spec_from_request, spec_to_request
from servekit.services.transform.status import JobStatus, ObjectStatus
from servekit.services.transform.store import JobConflict, JobStore

__all__ = [
    "JobConflict",
    "JobStatus",
    "JobStore",
    "JobSummary",
    "ObjectStatus",
    "RunOptions",
    "TransformSpec",
    "run_job",
    "spec_from_request",
    "spec_to_request",
]
