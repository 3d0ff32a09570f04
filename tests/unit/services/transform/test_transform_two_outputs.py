"""A two-output model (iris ONNX: label and probabilities) through a batch transform with the default Accept:
CSV input answers CSV with a column per output value; a failed CSV record is numbered by its line in the file."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import orjson
import pytest

from servekit.services.transform.invoke import RuntimeInvoker
from servekit.services.transform.job import plan
from servekit.services.transform.object_runner import ObjectRunner
from servekit.services.transform.objects import ERRORS_SUFFIX, InputObject
from servekit.services.transform.spec import BatchStrategy, SplitType, TransformSpec
from servekit.services.transform.status import ObjectStatus
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.tools.demo.build import iris_onnx

ROWS = [[5.1, 3.5, 1.4, 0.2], [6.2, 2.9, 4.3, 1.3], [7.7, 3.0, 6.1, 2.3], [5.0, 3.4, 1.5, 0.2]]
# line 1 a header, line 4 blank (not a record), line 6 a bad value: records 0 (header) and 3 fail
LINES = [
    "sepal_length,sepal_width,petal_length,petal_width",
    "5.1,3.5,1.4,0.2",
    "6.2,2.9,4.3,1.3",
    "",
    "7.7,3.0,6.1,oops",
    "7.7,3.0,6.1,2.3",
    "5.0,3.4,1.5,0.2",
]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return iris_onnx(tmp_path_factory.mktemp("models") / "iris" / "1")


def reference(model: Path, rows: list[list[float]]) -> dict[str, Any]:
    session = ort.InferenceSession(str(model / "model.onnx"), providers=["CPUExecutionProvider"])
    label, probs = session.run(None, {session.get_inputs()[0].name: np.asarray(rows, dtype=np.float32)})
    return {"label": label, "probabilities": probs}


def run_csv(tmp_path: Path, model: Path, data: bytes, **over: Any) -> tuple[Any, bytes, list[dict[str, Any]]]:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "iris.csv").write_bytes(data)
    spec = TransformSpec(
        name="iris-batch",
        input_uri=str(tmp_path / "in"),
        output_path=str(tmp_path / "out"),
        model=str(model),
        split_type=SplitType.LINE,
        batch_strategy=BatchStrategy.MULTI,
    ).with_changes(**over)
    (task,) = plan(spec, [InputObject(str(tmp_path / "in" / "iris.csv"), "iris.csv", len(data))])
    assert task.accept == (spec.accept or "text/csv")  # the default: the input's own type
    runner = ObjectRunner(spec, RuntimeInvoker(RuntimeRegistry().load(model), "iris"), sleep=lambda s: None)
    try:
        result = runner.run(task)
    finally:
        runner.close()
    out = tmp_path / "out" / "iris.csv.out"
    errs = tmp_path / "out" / ("iris.csv" + ERRORS_SUFFIX)
    errors = [orjson.loads(line) for line in errs.read_bytes().splitlines()] if errs.exists() else []
    return result, out.read_bytes() if out.exists() else b"", errors


def test_default_accept_writes_a_column_per_output_value(tmp_path: Path, model: Path) -> None:
    data = "".join(f"{','.join(map(str, r))}\n" for r in ROWS).encode()
    result, out, errors = run_csv(tmp_path, model, data)
    assert errors == [] and result.status is ObjectStatus.DONE and result.records == len(ROWS)
    table = [[float(c) for c in row] for row in csv.reader(io.StringIO(out.decode()))]
    ref = reference(model, ROWS)
    assert [len(row) for row in table] == [4] * len(ROWS)  # label, then the 3 probabilities
    assert [int(row[0]) for row in table] == ref["label"].tolist()
    np.testing.assert_allclose([row[1:] for row in table], ref["probabilities"], rtol=1e-6)


@pytest.mark.parametrize(
    ("strategy", "accept"),
    [(BatchStrategy.MULTI, ""), (BatchStrategy.SINGLE, ""), (BatchStrategy.MULTI, "application/jsonlines")],
)
def test_failed_csv_records_are_numbered_by_their_line_in_the_file(
    tmp_path: Path, model: Path, strategy: BatchStrategy, accept: str
) -> None:
    data = ("\r\n".join(LINES) + "\r\n").encode()
    result, out, errors = run_csv(tmp_path, model, data, batch_strategy=strategy, accept=accept)
    assert result.status is ObjectStatus.DONE and (result.records, result.errors) == (4, 2)
    assert [(e["index"], e["line"], e["input"]) for e in errors] == [(0, 1, LINES[0]), (3, 5, LINES[4])]
    assert errors[0]["error"].startswith("CSV line 1: 'sepal_length' is not a number")
    assert errors[1]["error"].startswith("CSV line 5: 'oops' is not a number")
    assert len(out.splitlines()) == 4


def test_strict_mode_names_the_line(tmp_path: Path, model: Path) -> None:
    data = ("\n".join(["5.1,3.5,1.4,0.2", "", "", "1,2,3"]) + "\n").encode()
    result, _, errors = run_csv(tmp_path, model, data, strict=True)
    assert result.status is ObjectStatus.FAILED
    assert result.message.startswith("record 1 (line 4): CSV line 4: ")
    assert [e["line"] for e in errors] == [4]
