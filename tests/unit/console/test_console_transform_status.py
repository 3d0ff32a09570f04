"""A transform job whose records failed (SageMaker's Completed, servekit's CompletedWithErrors) is never shown as a
green Completed: its badge says CompletedWithErrors in a colour of its own, on the jobs table and the job's page."""

from __future__ import annotations

import re
from importlib.resources import files

from servekit.console.pages import job, jobs
from servekit.console.render import badge

JOB = {
    "TransformJobName": "scores",
    "TransformJobStatus": "Completed",
    "ServekitStatus": "CompletedWithErrors",
    "FailureReason": "151 record(s) failed",
    "ServekitProgress": {"ObjectsTotal": 1, "ObjectsDone": 1, "Records": 0, "RecordErrors": 151},
}


def _css_rule(name: str) -> str:
    css = files("servekit.console").joinpath("static/console.css").read_text()
    found = re.search(r"\." + name + r"\s*\{([^}]*)\}", css)
    assert found, name
    return " ".join(found.group(1).split())


def test_completed_with_errors_has_its_own_badge_colour() -> None:
    assert "badge-partial" in badge("CompletedWithErrors") and ">CompletedWithErrors<" in badge("CompletedWithErrors")
    assert "badge-good" in badge("Completed")
    partial = _css_rule("badge-partial")
    assert "color" in partial and partial not in {_css_rule(f"badge-{k}") for k in ("good", "warn", "bad", "busy")}


def test_job_pages_show_completed_with_errors_not_a_green_completed() -> None:
    for out in (jobs.transform_table([JOB]), job.job_facts(JOB)):
        assert "badge-good" not in out
        assert '<span class="badge badge-partial">CompletedWithErrors</span>' in out
        assert "SageMaker: Completed" in out
    done = {**JOB, "ServekitStatus": "Completed", "FailureReason": ""}
    for out in (jobs.transform_table([done]), job.job_facts(done)):
        assert '<span class="badge badge-good">Completed</span>' in out and "SageMaker:" not in out
