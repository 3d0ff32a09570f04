"""`servekit deploy`'s curl and boto3 examples carry a body built from the model's signature (issue 30, item 8): a
four-feature model gets one row of four values of its dtype, not `[1.0, 2.0]` (which it answered with 424)."""

from __future__ import annotations

import json
from pathlib import Path

from servekit.cli.hosting_cmd import example_body, how_to_invoke
from servekit.serving.codecs.sagemaker import decode_body, example_json_body
from servekit.tools.demo.build import iris_sklearn
from servekit.types import TensorSpec


def test_a_four_feature_model_gets_one_row_of_four_values(tmp_path: Path) -> None:
    iris_sklearn(tmp_path / "iris" / "1")
    body = example_body(tmp_path / "iris")
    assert body == "[[0.0, 0.0, 0.0, 0.0]]"
    text = how_to_invoke("iris", "http://127.0.0.1:8765", "AKID", tmp_path / "credentials.json", body)
    assert "[1.0, 2.0]" not in text
    assert f"-d '{body}'" in text and f"Body=b'{body}'" in text
    tensors, _, _ = decode_body(body.encode(), "application/json")
    assert [t.shape for t in tensors.values()] == [(1, 4)]  # what the model's signature takes: one row of 4


def test_a_flat_joblib_model_gets_its_width_and_the_example_uses_the_environment(tmp_path: Path) -> None:
    """A directory holding model.joblib itself (a SageMaker model.tar.gz's files, no version folder): the estimator
    knows its width (n_features_in_); the printed curl line takes the key from ``servekit env``'s environment, so it
    can be pasted as it is (issue 46, item 7)."""
    iris_sklearn(tmp_path / "flat")  # model.joblib at the top of the folder
    body = example_body(tmp_path / "flat")
    assert body == "[[0.0, 0.0, 0.0, 0.0]]"
    home = tmp_path / "my home"
    text = how_to_invoke("iris", "http://127.0.0.1:9000", "AKID", home / "credentials.json", body)
    assert f"eval \"$(servekit env --home '{home}' --url http://127.0.0.1:9000)\"" in text
    assert '--user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY"' in text and "<secret" not in text
    assert 'boto3.client("sagemaker-runtime")' in text


def test_bodies_follow_width_dtype_and_several_inputs() -> None:
    assert example_json_body([TensorSpec("x", "INT64", (-1, 3))]) == "[[0, 0, 0]]"
    assert example_json_body([TensorSpec("x", "FP32", (-1,))]) == "[0.0]"
    two = example_json_body([TensorSpec("a", "FP64", (-1, 2)), TensorSpec("b", "BYTES", (-1,))])
    assert json.loads(two) == [{"a": [0.0, 0.0], "b": ""}]


def test_a_handler_model_is_not_run_and_the_placeholder_says_so(tmp_path: Path) -> None:
    base = tmp_path / "doubler"  # a Python handler model (code/inference.py), which the CLI must not import
    (base / "1" / "code").mkdir(parents=True)
    (base / "1" / "code" / "inference.py").write_text("raise SystemExit('imported by the CLI')\n")
    assert example_body(base) is None
    assert example_body(tmp_path / "missing") is None
    text = how_to_invoke("dbl", "http://127.0.0.1:8765", "AKID", tmp_path / "credentials.json", None)
    assert "cannot tell this model's inputs" in text and "[1.0, 2.0]" not in text
