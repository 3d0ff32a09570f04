"""The first-party Random Cut Forest (issue 45): hyperparameters checked as SageMaker checks them, the forest's trees
holding their samples, AWS's anomaly score (positive, about 1 for data like the training rows, growing the farther a
point lies), the same forest from the same data (seeded), the three-sigma threshold and ``test:f1`` from a labelled
test channel (RecordIO or CSV with ``label_size=1``), and the inference script's formats."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

from servekit.services.training.algorithms import first_party as fp
from servekit.services.training.algorithms import randomcutforest as rcf
from servekit.services.training.algorithms.handlers import randomcutforest as handler
from servekit.serving.codecs import recordio_protobuf as rp

SMALL = {"feature_dim": "3", "num_trees": "50", "num_samples_per_tree": "32"}


def _normal(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, 3))


def _forest() -> rcf.Forest:
    return rcf.fit(_normal(300), fp.hyperparameters(SMALL, rcf.HYPERPARAMETERS))


def test_each_tree_holds_its_sample_in_leaves_cut_inside_their_boxes() -> None:
    forest = _forest()
    assert len(forest.roots) == 50 and (forest.mass[forest.roots] == 32).all()
    inner = forest.dim >= 0
    assert (forest.mass[inner] == forest.mass[forest.left[inner]] + forest.mass[forest.right[inner]]).all()
    d = forest.dim[inner]
    cuts, lo, hi = forest.cut[inner], forest.lo[inner, d], forest.hi[inner, d]
    assert ((lo <= cuts) & (cuts < hi)).all()
    assert (forest.depth[forest.left[inner]] == forest.depth[inner] + 1).all()
    leaves = ~inner
    assert_allclose(forest.lo[leaves], forest.hi[leaves])  # a leaf is one point
    assert forest.mass[leaves].sum() == 50 * 32


def test_the_score_is_positive_and_grows_with_anomalousness_and_is_seeded() -> None:
    forest = _forest()
    scores = rcf.score(np.array([[0.0, 0, 0], [2.0, 2, 2], [5.0, 5, 5], [40.0, 40, 40]]), forest)
    assert (scores > 0).all() and list(scores) == sorted(scores)
    assert 0.3 < scores[0] < 1.5 and scores[3] > 3  # about 1 inside the data; far points cut off at the root
    train = rcf.score(_normal(300), forest)
    assert float(forest.threshold) == pytest.approx(train.mean() + 3 * train.std())
    assert scores[0] < float(forest.threshold) < scores[3]
    assert_allclose(rcf.score(_normal(5, 9), _forest()), rcf.score(_normal(5, 9), forest))  # the same forest twice


def test_evaluate_counts_the_anomaly_class_as_sklearn_would() -> None:
    scores, labels = np.array([0.5, 0.6, 3.0, 4.0, 0.7]), np.array([0.0, 0.0, 1.0, 0.0, 1.0])
    result = rcf.evaluate(scores, labels, threshold=1.0)
    assert result["accuracy"] == pytest.approx(0.6)
    assert result["anomaly"] == pytest.approx((0.5, 0.5, 0.5, 2))
    assert result["normal"] == pytest.approx((2 / 3, 2 / 3, 2 / 3, 3))
    assert rcf.evaluate(scores, labels, threshold=9.0)["anomaly"] == (0.0, 0.0, 0.0, 2)  # none predicted: 0, not nan


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({}, "Missing required hyperparameter: feature_dim"),
        (
            {"feature_dim": "10001"},
            "Hyperparameter feature_dim: '10001' is not valid (expected an integer in [1, 10000])",
        ),
        ({"feature_dim": "3", "num_trees": "49"}, "(expected an integer in [50, 1000])"),
        ({"feature_dim": "3", "num_samples_per_tree": "2049"}, "(expected an integer in [1, 2048])"),
        ({"feature_dim": "3", "eval_metrics": '["f1"]'}, 'a list of "accuracy" and "precision_recall_fscore"'),
        ({"feature_dim": "3", "k": "2"}, "Additional hyperparameters are not allowed (k was unexpected)"),
    ],
)
def test_hyperparameters_are_checked_as_sagemaker_does(raw: dict[str, str], says: str) -> None:
    with pytest.raises(fp.AlgorithmError) as exc:
        fp.hyperparameters(raw, rcf.HYPERPARAMETERS)
    assert says in str(exc.value)
    defaults = fp.hyperparameters({"feature_dim": "3", "eval_metrics": '["accuracy"]'}, rcf.HYPERPARAMETERS)
    assert (defaults["num_trees"], defaults["num_samples_per_tree"], defaults["eval_metrics"]) == (
        100,
        256,
        ["accuracy"],
    )


def _job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, test_type: str, test_body: bytes) -> Path:
    config, data, model_dir = tmp_path / "config", tmp_path / "data", tmp_path / "model"
    config.mkdir()
    for channel in ("train", "test"):
        (data / channel).mkdir(parents=True)
    uniform = np.random.default_rng(3).random((300, 3))  # no tail: three sigma is a clean line for it
    (data / "train" / "part-0").write_bytes(rp.write(uniform.astype(np.float32)))
    (data / "test" / "part-0").write_bytes(test_body)
    channels = {"train": {}, "test": {"ContentType": test_type}}
    (config / "inputdataconfig.json").write_text(json.dumps(channels))
    (config / "hyperparameters.json").write_text(json.dumps({**SMALL, "mini_batch_size": "1000"}))
    for name, path in (("CONFIG", config), ("DATA", data), ("MODEL_DIR", model_dir)):
        monkeypatch.setattr(fp, name, path)
    return model_dir


def _labelled_test() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    x = np.vstack([rng.random((95, 3)), rng.random((5, 3)) + 3.0])
    return x, np.r_[np.zeros(95), np.ones(5)]


@pytest.mark.parametrize("kind", ["recordio", "csv"])
def test_a_labelled_test_channel_gives_f1_with_the_three_sigma_threshold(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    x, y = _labelled_test()
    if kind == "csv":
        rows = (f"{int(v)}," + ",".join(map(str, r)) + "\n" for v, r in zip(y, x, strict=True))
        body, content_type = "".join(rows).encode(), "text/csv;label_size=1"
    else:
        body, content_type = rp.write(x.astype(np.float32), y), rp.CONTENT_TYPE
    model_dir = _job(tmp_path, monkeypatch, content_type, body)
    rcf.main()
    lines = capsys.readouterr().out.splitlines()
    evaluation = next(line for line in lines if line.startswith("[0]\t"))
    assert evaluation == "[0]\ttest-accuracy:1\ttest-precision:1\ttest-recall:1\ttest-f1:1"  # far out: all found
    assert "#test_score (algo-1) : ('f1', 1.0)" in lines
    assert rcf.load(model_dir).roots.shape == (50,)


def test_a_test_channel_without_labels_fails_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _job(tmp_path, monkeypatch, rp.CONTENT_TYPE, rp.write(np.zeros((10, 3), dtype=np.float32)))
    with pytest.raises(fp.AlgorithmError, match="test channel's records need labels"):
        rcf.main()


def test_the_inference_script_reads_and_answers_every_format(tmp_path: Path) -> None:
    rcf.save(_forest(), tmp_path)
    forest = handler.model_fn(str(tmp_path))
    expected = rcf.score(np.array([[9.0, 0, 0]]), forest)[0]
    for body, kind in (
        (rp.write(np.array([[9, 0, 0]], dtype=np.float32)), rp.CONTENT_TYPE),
        ("9,0,0\n", "text/csv"),
        ('{"instances": [{"features": [9, 0, 0]}]}', "application/json"),
        ('{"instances": [{"data": {"features": {"keys": [0], "shape": [3], "values": [9]}}}]}', "application/json"),
        ('{"data": {"features": {"values": [9, 0, 0]}}}\n', "application/jsonlines"),
    ):
        scores = handler.predict_fn(handler.input_fn(body, kind), forest)
        assert scores == [pytest.approx(expected)], kind
    body, kind = handler.output_fn(scores, "application/json")
    assert kind == "application/json" and json.loads(body) == {"scores": [{"score": pytest.approx(expected)}]}
    body, kind = handler.output_fn(scores, rp.CONTENT_TYPE)
    record = rp.Record()
    record.ParseFromString(next(rp.frames(body)))
    assert list(record.label["score"].float32_tensor.values) == [pytest.approx(expected, rel=1e-6)]
    assert handler.output_fn(scores, "application/jsonlines")[0] == json.dumps({"score": scores[0]}).encode() + b"\n"
    with pytest.raises(ValueError, match="not one Random Cut Forest takes"):
        handler.input_fn(b"x", "image/png")
    with pytest.raises(ValueError, match="needs 3 features"):
        handler.predict_fn(np.ones((1, 2)), forest)
