"""``servekit transform run`` of a two-output model (iris ONNX: label, probabilities) on the iris CSV with its
header line, the default Accept: 150 rows out with a column per output value, the header alone in the errors
file (numbered line 1), exit code 3 (CompletedWithErrors). The old code failed all 151 records."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import orjson
from sklearn.datasets import load_iris
from typer.testing import CliRunner

from servekit.cli.main import app
from servekit.tools.demo.build import IRIS_FEATURES, iris_onnx

runner = CliRunner()


def test_two_outputs_with_the_default_accept_complete_with_only_the_header_failed(tmp_path: Path) -> None:
    model = iris_onnx(tmp_path / "models" / "iris" / "1")
    x, _ = load_iris(return_X_y=True)
    (tmp_path / "in").mkdir()
    lines = [",".join(IRIS_FEATURES)] + [",".join(f"{v:g}" for v in row) for row in x]
    (tmp_path / "in" / "iris.csv").write_text("\n".join(lines) + "\n")
    args = ["transform", "run", "--name", "iris", "--model", str(model), "--input", str(tmp_path / "in")]
    args += ["--output-path", str(tmp_path / "out"), "--split-type", "Line", "--home", str(tmp_path / "home")]
    done = runner.invoke(app, [*args, "--quiet"])
    assert done.exit_code == 3, done.output  # CompletedWithErrors
    assert "job iris: CompletedWithErrors" in done.stdout and "records: 150 out, 1 in errors files" in done.stdout
    table = list(csv.reader(io.StringIO((tmp_path / "out" / "iris.csv.out").read_text())))
    assert len(table) == 150 and {len(row) for row in table} == {4}  # label and three probabilities
    assert all(row[0] in ("0", "1", "2") and abs(sum(map(float, row[1:])) - 1) < 1e-5 for row in table)
    (error,) = map(orjson.loads, (tmp_path / "out" / "iris.csv.out.errors.jsonl").read_bytes().splitlines())
    assert (error["index"], error["line"], error["input"]) == (0, 1, lines[0])
    assert error["error"].startswith("CSV line 1: 'sepal_length' is not a number")
