"""The console's own URLs that one page links to another by (names and ARNs quoted whole)."""

from __future__ import annotations

from urllib.parse import quote


def endpoint_href(name: str) -> str:
    return "/console/endpoints/" + quote(name, safe="")


def package_href(arn: str) -> str:
    return "/console/registry/package?arn=" + quote(arn, safe="")


def report_href(job: str, file: str) -> str:
    return f"/console/monitoring/report?job={quote(job, safe='')}&file={quote(file, safe='')}"


def execution_href(arn: str) -> str:
    return "/console/pipelines/execution?arn=" + quote(arn, safe="")


def job_href(name: str) -> str:
    return "/console/jobs/" + quote(name, safe="")


def job_data_href(name: str) -> str:
    return "/console/api/jobs/" + quote(name, safe="")


def training_href(name: str) -> str:
    return "/console/training/" + quote(name, safe="")


def training_data_href(name: str) -> str:
    return "/console/api/training/" + quote(name, safe="")


def processing_href(name: str) -> str:
    return "/console/processing/" + quote(name, safe="")


def processing_data_href(name: str) -> str:
    return "/console/api/processing/" + quote(name, safe="")


def tuning_href(name: str) -> str:
    return "/console/tuning/" + quote(name, safe="")


def tuning_data_href(name: str) -> str:
    return "/console/api/tuning/" + quote(name, safe="")
