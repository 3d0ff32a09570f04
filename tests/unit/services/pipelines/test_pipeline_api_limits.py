"""CreatePipeline refuses a definition nested deeper than it reads, at once and with a ValidationException, instead
of a RecursionError (a 500 after seconds, with a traceback thousands of lines long)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from servekit.aws.errors import ApiError
from servekit.services.database import StateDB
from servekit.services.pipelines.api import PipelinesApi
from servekit.services.pipelines.definition.nesting import MAX_DEPTH, nesting_depth


def _create(tmp_path: Path, definition: str) -> ApiError:
    with StateDB.open(tmp_path / "home") as db:
        api = PipelinesApi(db.pipelines, tmp_path / "home")
        with pytest.raises(ApiError) as exc:
            asyncio.run(api.create_pipeline({"PipelineName": "deep", "PipelineDefinition": definition}))
    return exc.value


def test_deep_nesting_is_refused_before_parsing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    error = _create(tmp_path, "[" * 100_000 + "]" * 100_000)
    assert error.code == "ValidationException" and "nests 100000 levels deep" in error.message
    join = '"x"'
    for _ in range(5_000):  # Std:Join inside Std:Join, 5,000 times (as text: json.dumps would recurse too)
        join = '{"Std:Join": {"On": ",", "Values": [' + join + "]}}"
    doc = '{"Version": "2020-12-01", "Steps": [{"Name": "s", "Type": "Fail", "Arguments": {"ErrorMessage": %s}}]}'
    error = _create(tmp_path, doc % join)
    assert error.code == "ValidationException" and f"up to {MAX_DEPTH} levels" in error.message
    assert "Traceback" not in caplog.text


def test_nesting_is_counted_outside_strings_only() -> None:
    assert nesting_depth('{"a": [1, {"b": "[[[{{{"}]}') == 3
    assert nesting_depth('{"a\\"[": 1}') == 1  # an escaped quote does not end the string
    assert nesting_depth("name: '[[['\nsteps: []") == 1
    assert nesting_depth("") == 0
