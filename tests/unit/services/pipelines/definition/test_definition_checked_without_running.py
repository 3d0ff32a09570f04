"""CreatePipeline checks a definition without running user code (issue 44): a step's ``Function`` is found and read
where it is written, never imported, so module-level code in it does not run at CreatePipeline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servekit.services.pipelines.definition.loading import load_pipeline
from servekit.services.pipelines.definition.validate import main
from servekit.services.pipelines.errors import PipelineError

STEPS = """
import pathlib
pathlib.Path({marker!r}).write_text("module-level code ran")

def train(ctx, rate):
    return {{"rate": rate}}

from os import path as helpers
"""


def _definition(tmp_path: Path, function: str) -> Path:
    marker = tmp_path / "ran.txt"
    (tmp_path / "steps.py").write_text(STEPS.format(marker=str(marker)))
    doc = {
        "Name": "p",
        "Steps": [{"Name": "train", "Type": "Training", "Function": function, "Arguments": {"rate": 0.1}}],
    }
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_function_file_is_checked_without_running_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(_definition(tmp_path, "steps.py:train"))]) == 0
    assert not (tmp_path / "ran.txt").exists()
    document = json.loads(capsys.readouterr().out)
    assert document["Steps"][0]["Function"] == f"{tmp_path / 'steps.py'}:train"
    pipeline = load_pipeline(str(tmp_path / "p.json"), import_code=False)
    with pytest.raises(PipelineError, match="checked, not imported"):
        pipeline.steps[0].function(None, rate=1)  # type: ignore[misc]


@pytest.mark.parametrize(
    ("function", "problem"),
    [
        ("steps.py:missing", "defines no 'missing' at its top level"),
        ("nope.py:train", "no Python file"),
        ("no_such_package.module:train", "no module 'no_such_package'"),
        ("servekit.services.pipelines.examples.iris:no_such_step", "defines no 'no_such_step'"),
    ],
)
def test_a_function_that_is_not_there_is_refused_with_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], function: str, problem: str
) -> None:
    assert main([str(_definition(tmp_path, function))]) == 2
    assert problem in capsys.readouterr().err
    assert not (tmp_path / "ran.txt").exists()


def test_names_bound_at_top_level_by_def_import_or_assignment_count(tmp_path: Path) -> None:
    assert main([str(_definition(tmp_path, "steps.py:helpers"))]) == 0
    assert main([str(_definition(tmp_path, "servekit.services.pipelines.examples.iris:pipeline"))]) == 0
    assert main([str(_definition(tmp_path, "servekit.pipelines.examples.iris:pipeline"))]) == 0  # its old name
    assert not (tmp_path / "ran.txt").exists()
