"""``servekit optimize`` from the command line: the table, the JSON, exit codes and the clear errors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servekit.cli.main import app


def invoke(*args: Any) -> Any:
    return CliRunner().invoke(app, ["optimize", *map(str, args)], env={"COLUMNS": "120"}, prog_name="servekit")


FAST = ("--batch-sizes", "1,4", "--rounds", "2")


def test_prints_the_table_writes_the_version_and_the_json(tmp_path: Path, build: Any) -> None:
    _, x, y = build.sklearn_mlp(tmp_path / "m" / "1")
    rows, labels = build.write_rows(tmp_path / "v.jsonl", x), build.write_labels(tmp_path / "l.jsonl", y)
    result = invoke(
        "--model", tmp_path / "m", "--out", tmp_path / "m", "--quantize", "int8",
        "--validation", rows, "--labels", labels, "--json", tmp_path / "r.json", *FAST,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    out = result.output
    assert "batch  before p50  after p50" in out
    assert [line.split()[0] for line in out.splitlines() if line.strip()[:1].isdigit() and "x" in line[-2:]] == [
        "1",
        "4",
    ]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["version_dir"] == str(tmp_path / "m" / "2") and f"wrote {tmp_path / 'm' / '2'}" in out
    assert f"accuracy     before {report['validation']['accuracy_before']:.4f}" in out
    assert f"agreement    {report['validation']['agreement']:.4f}" in out


def test_label_column_reads_labels_from_object_rows(tmp_path: Path, build: Any) -> None:
    from servekit.tools.demo.build import IRIS_FEATURES, iris_sklearn

    iris_sklearn(tmp_path / "iris" / "1")
    from sklearn.datasets import load_iris

    x, y = load_iris(return_X_y=True)
    names = ["setosa", "versicolor", "virginica"]
    rows = tmp_path / "iris.jsonl"
    rows.write_text("".join(json.dumps({**dict(zip(IRIS_FEATURES, r, strict=True)), "species": names[t]}) + "\n"
                            for r, t in zip(x, y, strict=True)))  # fmt: skip
    result = invoke("--model", tmp_path / "iris", "--out", tmp_path / "o", "--validation", rows,
                    "--label-column", "species", *FAST)  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "o" / "1" / "optimize_report.json").read_text())
    assert report["validation"]["accuracy_before"] > 0.9  # class names matched the model's class labels


def test_a_refusal_exits_1_and_says_by_how_much(tmp_path: Path, build: Any) -> None:
    build.onnx_mlp(tmp_path / "m" / "1", n_out=1)
    result = invoke("--model", tmp_path / "m", "--out", tmp_path / "m", "--quantize", "int8",
                    "--max-accuracy-drop", "0", "--json", tmp_path / "r.json", *FAST)  # fmt: skip
    assert result.exit_code == 1, result.output
    drop = json.loads((tmp_path / "r.json").read_text())["drop"]
    assert drop > 0
    assert f"dropped by {drop:.4f}, more than --max-accuracy-drop 0.0; nothing was written" in result.output
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == ["1"]


@pytest.fixture
def iris(tmp_path: Path) -> Path:
    from servekit.tools.demo.build import iris_onnx

    return iris_onnx(tmp_path / "iris" / "1").parent


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--model", "{tmp}/nowhere"), "is not a directory"),
        (("--model", "{tmp}/empty"), "is not a servekit model directory"),
        (("--model", "{tmp}/handler"), "inference.py handler"),
        (("--validation", "{tmp}/missing.jsonl"), "cannot read the validation data"),
        (("--validation", "{tmp}/bad.jsonl"), "bad.jsonl:2: not JSON"),
        (("--validation", "{tmp}/three.jsonl"), "have shape [3], the model takes [4]"),
        (("--validation", "{tmp}/four.jsonl", "--labels", "{tmp}/one_label.jsonl"), "holds 1 labels for 2"),
        (("--validation", "{tmp}/four.jsonl", "--labels", "{tmp}/odd_labels.jsonl"), "label 'dog' (row 2)"),
        (("--quantize", "int8", "--static"), "--static needs --calibration"),
        (("--quantize", "int4",), "--quantize must be int8 or none"),
        (("--labels", "{tmp}/one_label.jsonl",), "labels need --validation"),
        (("--out", "{tmp}/notabase"), "is neither empty nor a model base"),
        (("--batch-sizes", "1,x"), "--batch-sizes must be integers"),
    ],
)  # fmt: skip
def test_bad_input_gets_a_clear_error(tmp_path: Path, iris: Path, args: tuple[str, ...], message: str) -> None:
    from servekit.tools.demo.build import iris_handler

    (tmp_path / "empty").mkdir()
    iris_handler(tmp_path / "handler" / "1")
    (tmp_path / "bad.jsonl").write_text("[1, 2, 3, 4]\n{not json\n")
    (tmp_path / "three.jsonl").write_text("[1, 2, 3]\n[4, 5, 6]\n")
    (tmp_path / "four.jsonl").write_text("[1, 2, 3, 4]\n[4, 5, 6, 7]\n")
    (tmp_path / "one_label.jsonl").write_text('"setosa"\n')
    (tmp_path / "odd_labels.jsonl").write_text('"setosa"\n"dog"\n')
    (tmp_path / "notabase").mkdir()
    (tmp_path / "notabase" / "model.onnx").write_bytes(b"")
    filled = [a.format(tmp=tmp_path) for a in args]
    defaults = {"--model": str(iris), "--out": str(tmp_path / "out")}
    for flag, value in defaults.items():
        if flag not in filled:
            filled += [flag, value]
    result = invoke(*FAST, *filled)  # the case's own flags come last and win
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "out").exists()
