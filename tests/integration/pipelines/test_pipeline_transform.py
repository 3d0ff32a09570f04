"""A transform step: a batch transform job (servekit.services.transform) over the model an earlier step trained, in a
step
process of its own, with its output hashed and its lineage recorded; an unchanged re-run reuses it from the cache."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit.services.database import StateDB
from servekit.services.pipelines.definition.loading import load_pipeline
from servekit.services.pipelines.engine.runner import PipelineRunner

pytest.importorskip("sklearn")
SCORING = f"{Path(__file__).with_name('sample_pipelines.py')}:scoring"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[StateDB]:
    with StateDB.open(tmp_path / "home") as d:
        yield d


def test_a_transform_step_scores_the_trained_model_and_is_cached(db: StateDB, tmp_path: Path) -> None:
    data = tmp_path / "in"
    data.mkdir()
    (data / "rows.csv").write_text("0.05,0.1\n1.0,0.95\n0.0,0.1\n")
    runner = PipelineRunner(db, home=tmp_path / "home")
    pipeline = load_pipeline(SCORING)
    first = runner.start(pipeline, SCORING, artifact_root=str(tmp_path / "art"), parameters={"input": str(data)})
    assert str(first.status) == "Succeeded", first.failure_reason
    score, fit = first.steps["score"], first.steps["fit"]
    out = (score.outputs or {})["output"]
    assert Path(out["uri"], "rows.csv.out").read_text() == "0\n1\n0\n"
    assert (score.properties or {})["TransformJobName"] == f"scoring-score-{first.run_id}-1"
    [artifact] = db.pipelines.artifacts(uri=out["uri"])
    assert artifact.step == "score" and artifact.sha256 == out["sha256"]
    inputs = {i["name"]: i for i in artifact.inputs}
    assert inputs["ModelName"]["sha256"] == (fit.outputs or {})["model"]["sha256"]
    assert inputs["reads"]["uri"] == str(data)

    # fit runs again (no cache) and writes the same bytes; the transform's inputs are unchanged: reused
    again = runner.start(pipeline, SCORING, artifact_root=str(tmp_path / "art"), parameters={"input": str(data)})
    assert (again.steps["fit"].outputs or {})["model"]["sha256"] == (fit.outputs or {})["model"]["sha256"]
    assert again.steps["score"].cache_source_run == first.run_id
    assert again.steps["score"].outputs == score.outputs
    # new data: the transform runs again
    (data / "more.csv").write_text("1.0,1.0\n")
    third = runner.start(pipeline, SCORING, artifact_root=str(tmp_path / "art"), parameters={"input": str(data)})
    assert third.steps["score"].cache_source_run == ""
    assert Path((third.steps["score"].outputs or {})["output"]["uri"], "more.csv.out").read_text() == "1\n"
