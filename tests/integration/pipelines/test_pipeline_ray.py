"""The Ray engine on a local Ray (2 CPUs, no dashboard; shut down after the module): the same pipeline gives the
same artifacts (content hashes) as the local engine, and a step over its timeout is cancelled and fails the run."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servekit.services.database import StateDB
from servekit.services.pipelines.definition.loading import load_pipeline
from servekit.services.pipelines.engine.ray_engine import RayEngine
from servekit.services.pipelines.engine.runner import PipelineRunner, RunResult
from servekit.services.pipelines.runs.status import RunStatus

pytest.importorskip("ray")

SAMPLES = Path(__file__).with_name("sample_pipelines.py")


@pytest.fixture(scope="module")
def ray_engine() -> Iterator[RayEngine]:
    engine = RayEngine(num_cpus=2)
    try:
        yield engine
    finally:
        engine.close()


def run(home: Path, root: Path, name: str, engine: Any, **params: Any) -> RunResult:
    source = f"{SAMPLES}:{name}"
    with StateDB.open(home) as db:
        runner = PipelineRunner(db, home=home, engine=engine)
        return runner.start(load_pipeline(source), source, artifact_root=str(root), parameters=params)


def hashes(result: RunResult) -> dict[str, dict[str, str]]:
    return {
        name: {out: v["sha256"] for out, v in (row.outputs or {}).items()}
        for name, row in result.steps.items()
        if row.outputs
    }


def test_the_ray_engine_gives_the_local_engines_artifacts(ray_engine: RayEngine, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    local = run(tmp_path / "home-local", tmp_path / "a", "basic", None, scratch=str(scratch))
    on_ray = run(tmp_path / "home-ray", tmp_path / "b", "basic", ray_engine, scratch=str(scratch))
    assert local.status is on_ray.status is RunStatus.SUCCEEDED, on_ray.failure_reason
    assert set(hashes(on_ray)) == {"make-data", "train", "evaluate", "publish"}
    assert hashes(on_ray) == hashes(local)
    assert on_ray.steps["train"].code_hash == local.steps["train"].code_hash
    assert (on_ray.steps["evaluate"].properties or {})["Metrics"] == (local.steps["evaluate"].properties or {})[
        "Metrics"
    ]
    with StateDB.open(tmp_path / "home-ray") as db:
        [model] = db.pipelines.artifacts(uri=(on_ray.steps["train"].outputs or {})["model"]["uri"])
    assert [i["sha256"] for i in model.inputs] == [hashes(local)["make-data"]["data"]]
    assert (scratch / f"train-ran-{on_ray.run_id}").exists()  # the step ran in a Ray worker


def test_command_steps_on_ray_give_the_same_artifacts_and_properties(ray_engine: RayEngine, tmp_path: Path) -> None:
    local = run(tmp_path / "home-local", tmp_path / "a", "commanded", None, text="one two three four")
    on_ray = run(tmp_path / "home-ray", tmp_path / "b", "commanded", ray_engine, text="one two three four")
    assert on_ray.status is RunStatus.SUCCEEDED, on_ray.failure_reason
    assert hashes(on_ray) == hashes(local) and set(hashes(on_ray)) == {"write", "count-words"}
    assert (on_ray.steps["write"].properties or {})["Properties"] == {"chars": 18}
    assert (on_ray.steps["count-words"].properties or {})["Properties"] == {"words": 4}


def test_a_ray_step_over_its_timeout_is_cancelled(ray_engine: RayEngine, tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    result = run(tmp_path / "home", tmp_path / "a", "timeout", ray_engine, scratch=str(scratch))
    assert result.status is RunStatus.FAILED
    assert result.failure_reason == "step 'slow' failed: step 'slow' exceeded its timeout of 1s and was killed"
    assert result.steps["slow"].status == "Failed"
    # the task is cancelled wherever it was (the 1 s may end before its fresh Ray worker started the function):
    # nothing of it runs on
    pid_file = scratch / "slow.pid"
    deadline = time.monotonic() + 60
    while pid_file.exists() and _alive(int(pid_file.read_text() or 0)):
        assert time.monotonic() < deadline, "the cancelled step's worker still runs"
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return pid != 0
