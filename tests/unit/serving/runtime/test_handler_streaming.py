"""A handler that yields streams its answer (issue 29, response streaming): predict_fn's pieces pass one by one
through output_fn, transform_fn's are sent as they are; the first piece is made before invoke returns (a failure
before any output fails the request as a whole), a failure midway is raised from the iterator, and the pieces are
pulled by the caller, so nothing after the first runs until asked for."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from servekit.errors import ErrorCode, ServekitError
from servekit.serving.runtime.base import whole
from servekit.serving.runtime.handler import HandlerServable
from servekit.serving.runtime.registry import RuntimeRegistry

YIELDING = """
import json
CALLS = []

def model_fn(model_dir):
    return CALLS

def input_fn(body, content_type):
    return json.loads(body)

def predict_fn(data, model):
    for i in range(data["n"]):
        model.append(i)
        if data.get("fail_at") == i:
            raise RuntimeError("broke")
        yield i

def output_fn(piece, accept):
    return json.dumps({"i": piece}) + "\\n", "application/jsonlines"
"""

TRANSFORM = """
def model_fn(model_dir):
    return None

def transform_fn(model, body, content_type, accept):
    return (piece for piece in ["a", b"b", 3]), "text/plain"
"""


def load(tmp_path: Path, name: str, source: str) -> HandlerServable:
    code = tmp_path / name / "1" / "code"
    code.mkdir(parents=True)
    (code / "inference.py").write_text(source)
    servable = RuntimeRegistry().load(tmp_path / name / "1")
    assert isinstance(servable, HandlerServable)
    return servable


def test_predict_fn_pieces_stream_through_output_fn_one_at_a_time(tmp_path: Path) -> None:
    servable = load(tmp_path, "y", YIELDING)
    calls = servable._model  # the list the generator appends to as it runs
    answer, ctype = servable.invoke(json.dumps({"n": 3}).encode(), "application/json", "application/jsonlines")
    assert ctype == "application/jsonlines"
    assert isinstance(answer, Iterator)
    assert calls == [0]  # only the first piece was made
    assert next(answer) == b'{"i": 0}\n'
    assert calls == [0]
    assert list(answer) == [b'{"i": 1}\n', b'{"i": 2}\n'] and calls == [0, 1, 2]


def test_failures_before_the_first_piece_fail_the_call_and_midway_raise_from_the_stream(tmp_path: Path) -> None:
    servable = load(tmp_path, "y", YIELDING)
    with pytest.raises(ServekitError) as before:
        servable.invoke(json.dumps({"n": 3, "fail_at": 0}).encode(), "application/json", "")
    assert before.value.code is ErrorCode.MODEL_ERROR
    answer, _ = servable.invoke(json.dumps({"n": 3, "fail_at": 1}).encode(), "application/json", "")
    assert not isinstance(answer, bytes)
    assert next(answer) == b'{"i": 0}\n'
    with pytest.raises(ServekitError, match="predict_fn"):
        next(answer)


def test_transform_fn_pieces_are_sent_as_they_are_and_joined_for_callers_that_do_not_stream(tmp_path: Path) -> None:
    servable = load(tmp_path, "t", TRANSFORM)
    answer, ctype = servable.invoke(b"x", "text/plain", "text/plain")
    assert ctype == "text/plain"
    assert not isinstance(answer, bytes)
    assert next(answer) == b"a" and next(answer) == b"b"
    with pytest.raises(ServekitError, match="a streamed piece is int"):
        next(answer)
    assert whole(load(tmp_path, "u", YIELDING).invoke(b'{"n": 2}', "application/json", "")[0]) == (
        b'{"i": 0}\n{"i": 1}\n'
    )


TEXT_PIECES = """
import json

def model_fn(model_dir):
    return None

def input_fn(body, content_type):
    return json.loads(body)

def predict_fn(data, model):
    yield "Hello, "
    yield b"world"
    yield {"tokens": 2}
"""


def test_str_and_bytes_pieces_without_an_output_fn_go_out_as_they_are(tmp_path: Path) -> None:
    """A predict_fn that yields text (an LLM's tokens) with no output_fn streams it as written, str as UTF-8, and
    only other pieces go through the default output_fn (issue 46, item 11: it answered 500)."""
    servable = load(tmp_path, "t", TEXT_PIECES)
    answer, ctype = servable.invoke(b"{}", "application/json", "*/*")
    assert ctype == "text/plain; charset=utf-8"
    assert isinstance(answer, Iterator)
    pieces = list(answer)
    assert pieces[:2] == [b"Hello, ", b"world"]
    assert json.loads(pieces[2]) == {"tokens": 2}
    answer, ctype = servable.invoke(b"{}", "application/json", "text/event-stream")
    assert isinstance(answer, Iterator)
    assert ctype == "text/event-stream" and next(answer) + next(answer) == b"Hello, world"
