"""The local engine end to end: real step processes, real SQLite, real files. Timing only as deadlines."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servekit.services.database import StateDB
from servekit.services.pipelines.definition.loading import load_pipeline
from servekit.services.pipelines.engine.runner import PipelineRunner
from servekit.services.pipelines.errors import RunConflict
from servekit.services.pipelines.runs.status import RunStatus, StepStatus
from servekit.services.pipelines.runs.store import RunStore

SAMPLES = Path(__file__).with_name("sample_pipelines.py")


def source(name: str) -> str:
    return f"{SAMPLES}:{name}"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def db(home: Path) -> Iterator[StateDB]:
    with StateDB.open(home) as d:
        yield d


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    d = tmp_path / "scratch"
    d.mkdir()
    return d


def run(db: StateDB, home: Path, root: Path, name: str, **params: Any) -> Any:
    runner = PipelineRunner(db, home=home)
    return runner.start(load_pipeline(source(name)), source(name), artifact_root=str(root), parameters=params)


def wait_until(predicate: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_run_writes_append_only_artifacts_with_lineage(
    db: StateDB, home: Path, tmp_path: Path, scratch: Path
) -> None:
    root = tmp_path / "artifacts"
    result = run(db, home, root, "basic", scratch=str(scratch))
    assert result.status is RunStatus.SUCCEEDED, result.failure_reason
    steps = result.steps
    assert {s: r.status for s, r in steps.items()} == {
        "make-data": "Succeeded",
        "train": "Succeeded",
        "evaluate": "Succeeded",
        "check-accuracy": "Succeeded",
        "publish": "Succeeded",
    }  # too-low, on the other branch, never started
    assert steps["check-accuracy"].metadata == {"Condition": {"Outcome": "True"}}
    model = steps["train"].outputs["model"]  # type: ignore[index]
    assert model["uri"] == f"{root}/basic/{result.run_id}/train/attempt-1/model"
    assert (Path(model["uri"]) / "model.json").exists()
    metrics = Path(steps["evaluate"].outputs["metrics"]["uri"]) / "evaluation.json"  # type: ignore[index]
    assert '"accuracy": 0.5' in metrics.read_text()
    [artifact] = db.pipelines.artifacts(uri=model["uri"])
    assert artifact.sha256 == model["sha256"] and artifact.run_id == result.run_id and artifact.step == "train"
    data = steps["make-data"].outputs["data"]  # type: ignore[index]
    assert [(i["name"], i["uri"], i["sha256"]) for i in artifact.inputs] == [("data", data["uri"], data["sha256"])]
    assert artifact.code_hash == steps["train"].code_hash and len(artifact.code_hash) == 64
    assert artifact.parameters == {"scratch": str(scratch)}
    [f] = db.pipelines.artifact_files(artifact)
    assert f.key == "model.json"
    assert db.pipelines.artifact_under(model["uri"] + "/model.json") == artifact
    assert db.pipelines.artifacts(sha256=f.sha256) == [artifact]


def test_a_failing_condition_stops_before_the_step_it_guards(
    db: StateDB, home: Path, tmp_path: Path, scratch: Path
) -> None:
    result = run(db, home, tmp_path / "a", "basic", scratch=str(scratch), min_accuracy=0.9)
    assert result.status is RunStatus.FAILED
    assert result.failure_reason == "accuracy below the bar"
    assert "publish" not in result.steps
    assert result.steps["check-accuracy"].metadata == {"Condition": {"Outcome": "False"}}
    assert result.steps["too-low"].status == StepStatus.FAILED
    with pytest.raises(RunConflict, match="ended at Fail step 'too-low'"):
        PipelineRunner(db, home=home).resume(result.run_id)


def test_caching_skips_an_unchanged_step_on_rerun(db: StateDB, home: Path, tmp_path: Path, scratch: Path) -> None:
    root = tmp_path / "artifacts"
    first = run(db, home, root, "basic", scratch=str(scratch))
    second = run(db, home, root, "basic", scratch=str(scratch))
    assert second.status is RunStatus.SUCCEEDED
    train = second.steps["train"]
    assert train.cache_source_run == first.run_id
    assert train.metadata == {"CacheHitResult": {"SourcePipelineExecutionArn": first.arn}}
    assert train.outputs == first.steps["train"].outputs  # the earlier run's artifact, not a copy
    assert (scratch / f"train-ran-{first.run_id}").exists()
    assert not (scratch / f"train-ran-{second.run_id}").exists()  # its function did not run again
    assert not (root / "basic" / second.run_id / "train").exists()
    assert second.steps["evaluate"].cache_source_run == ""  # not cached: it runs every time
    # Another parameter value changes make-data's input, so both make-data and train run again.
    third = run(db, home, root, "basic", scratch=str(scratch), rows=12)
    assert third.steps["make-data"].cache_source_run == "" and third.steps["train"].cache_source_run == ""
    assert (scratch / f"train-ran-{third.run_id}").exists()


def test_a_step_over_its_timeout_is_killed_and_the_run_fails_with_that_reason(
    db: StateDB, home: Path, tmp_path: Path, scratch: Path
) -> None:
    result = run(db, home, tmp_path / "a", "timeout", scratch=str(scratch))
    assert result.status is RunStatus.FAILED
    assert result.failure_reason == "step 'slow' failed: step 'slow' exceeded its timeout of 1s and was killed"
    assert result.steps["slow"].status == StepStatus.FAILED
    pid = int((scratch / "slow.pid").read_text())

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    wait_until(gone, "the killed step's process to end")


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_retries_back_off_on_declared_errors_only(db: StateDB, home: Path, tmp_path: Path, scratch: Path) -> None:
    fake = FakeTime()
    runner = PipelineRunner(db, home=home, clock=fake.clock, sleep=fake.sleep, stop_poll_s=1e6)
    result = runner.start(
        load_pipeline(source("retries")),
        source("retries"),
        artifact_root=str(tmp_path / "a"),
        parameters={"scratch": str(scratch)},
    )
    assert result.status is RunStatus.SUCCEEDED, result.failure_reason
    assert (scratch / "attempts").read_text() == "3"
    assert fake.slept == [5.0, 10.0]  # IntervalSeconds 5, BackoffRate 2; no real waiting
    assert result.steps["flaky"].attempts == 3
    out = result.steps["flaky"].outputs["out"]["uri"]  # type: ignore[index]
    assert out.endswith("/flaky/attempt-3/out")
    broken = run(db, home, tmp_path / "b", "not_retried")
    assert broken.status is RunStatus.FAILED and broken.steps["broken"].attempts == 1
    assert "ValueError: not a retryable error" in broken.failure_reason


def test_reading_outside_the_declared_prefixes_fails_naming_step_path_and_rule(
    db: StateDB, home: Path, tmp_path: Path
) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    (allowed / "ok.txt").write_text("fine")
    secret = tmp_path / "secret.txt"
    secret.write_text("no")
    result = run(db, home, tmp_path / "a", "snooping", secret=str(secret), allowed=str(allowed))
    assert result.status is RunStatus.FAILED
    reason = result.steps["snoop"].failure_reason
    assert f"step 'snoop' may not read outside its read prefixes [{allowed}, " in reason
    assert f"(path: {secret})" in reason
    ok = run(db, home, tmp_path / "b", "snooping", secret=str(allowed / "ok.txt"), allowed=str(allowed))
    assert ok.status is RunStatus.SUCCEEDED
    overwrite = run(db, home, tmp_path / "c", "overwriting")
    assert "may not overwrite an existing file (artifacts are append-only)" in overwrite.failure_reason


def test_independent_steps_run_in_parallel(db: StateDB, home: Path, tmp_path: Path, scratch: Path) -> None:
    # Each of left and right waits until the other has started: a serial engine would time them out.
    result = run(db, home, tmp_path / "a", "parallel", scratch=str(scratch))
    assert result.status is RunStatus.SUCCEEDED, result.failure_reason
    joined = Path(result.steps["join"].outputs["out"]["uri"]) / "x"  # type: ignore[index]
    assert joined.read_bytes() == b"leftright"


def test_stop_then_resume(db: StateDB, home: Path, tmp_path: Path, scratch: Path) -> None:
    runner = PipelineRunner(db, home=home, stop_poll_s=0.05)
    pipeline = load_pipeline(source("stoppable"))
    results: list[Any] = []
    thread = threading.Thread(
        target=lambda: results.append(
            runner.start(
                pipeline,
                source("stoppable"),
                artifact_root=str(tmp_path / "a"),
                parameters={"scratch": str(scratch)},
                run_id="stoppable001",
            )
        )
    )
    thread.start()
    wait_until(lambda: (scratch / "gated-1.started").exists(), "the gated step to start")
    with StateDB.open(home) as other:  # servekit pipeline stop, from another process's connection
        assert RunStore(other).request_stop("stoppable001") is RunStatus.STOPPING
    thread.join(60)
    [stopped] = results
    assert stopped.status is RunStatus.STOPPED
    assert stopped.steps["gated"].status == StepStatus.STOPPED
    assert stopped.steps["first"].status == StepStatus.SUCCEEDED
    (scratch / "open").touch()
    resumed = runner.resume("stoppable001")
    assert resumed.status is RunStatus.SUCCEEDED, resumed.failure_reason
    assert resumed.steps["first"].attempts == 1 and not (scratch / "first-2").exists()  # kept, not re-run
    assert resumed.steps["gated"].attempts == 2
    with pytest.raises(RunConflict, match="already succeeded"):
        runner.resume("stoppable001")
