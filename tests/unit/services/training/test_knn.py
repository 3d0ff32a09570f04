"""The first-party k-NN (issue 45): hyperparameters checked as SageMaker checks them (alone and together), a sample
of ``sample_size`` rows, majority votes and means of the ``k`` nearest under each metric, projections that keep
distances, ``test:accuracy``/``test:mse`` from a job's channels (RecordIO-protobuf and CSV with its label first);
the inference script's formats, verbose included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.testing import assert_allclose

from servekit.services.training.algorithms import first_party as fp
from servekit.services.training.algorithms import knn
from servekit.services.training.algorithms.handlers import knn as handler
from servekit.serving.codecs import recordio_protobuf as rp

CENTERS = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])


def _points(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(3.0), n)
    return CENTERS[labels.astype(int)] + rng.normal(0, 0.5, size=(3 * n, 2)), labels


def _hp(**raw: str) -> dict[str, Any]:
    base = {"k": "3", "sample_size": "1000", "predictor_type": "classifier", "feature_dim": "2"}
    return knn.check(fp.hyperparameters({**base, **raw}, knn.HYPERPARAMETERS))


def test_a_classifier_votes_and_a_regressor_averages_its_nearest_rows() -> None:
    x, y = _points(20, 0)
    model = knn.fit(x, y, _hp())
    assert knn.score(model, *_points(5, 1)) == {"accuracy": 1.0}
    predicted, labels, distances = knn.predict(np.array([[9.0, 0.5]]), model)
    assert predicted.tolist() == [1.0] and labels.tolist() == [[1.0, 1.0, 1.0]]
    assert (np.diff(distances[0]) >= 0).all() and distances[0, 0] < 2  # Euclidean, nearest first
    regressor = knn.fit(x, y * 2, _hp(predictor_type="regressor", k="60"))  # every row: the mean of all labels
    assert_allclose(knn.predict(np.zeros((1, 2)), regressor)[0], [2.0])
    assert knn.score(regressor, np.zeros((1, 2)), np.array([3.0])) == {"mse": 1.0}
    # a tie goes to the label of the nearest row among the tied ones
    assert knn.vote(np.array([[2.0, 1.0, 1.0, 2.0]]), "classifier").tolist() == [2.0]


def test_inner_product_and_cosine_rank_by_similarity() -> None:
    x, y = np.array([[1.0, 0.0], [10.0, 1.0], [0.0, 3.0]]), np.array([0.0, 1.0, 2.0])
    cosine = knn.fit(x, y, _hp(k="1", index_metric="COSINE"))
    inner = knn.fit(x, y, _hp(k="1", index_metric="INNER_PRODUCT"))
    assert knn.predict(np.array([[1.0, 0.01]]), cosine)[0].tolist() == [0.0]  # the same direction
    assert knn.predict(np.array([[1.0, 0.01]]), inner)[0].tolist() == [1.0]  # the largest product
    assert_allclose(knn.predict(np.array([[2.0, 0.0]]), inner)[2], [[20.0]])


def test_the_sample_and_the_projections() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(400, 64)), np.arange(400.0)
    model = knn.fit(x, y, _hp(sample_size="50", feature_dim="64"))
    assert len(model.sample) == 50 and len(set(model.labels)) == 50 and set(model.labels) <= set(y)
    assert_allclose(knn.fit(x, y, _hp(sample_size="50", feature_dim="64")).labels, model.labels)  # seeded
    for kind in ("sign", "fjlt"):
        matrix = knn.projection(kind, 64, 48, np.random.default_rng(0))
        if kind == "fjlt":
            assert_allclose(matrix.T @ matrix, np.eye(48) * 64 / 48, atol=1e-9)  # orthogonal Hadamard columns
        ratio = np.linalg.norm((x[:50] - x[50:100]) @ matrix, axis=1) / np.linalg.norm(x[:50] - x[50:100], axis=1)
        assert 0.7 < ratio.min() and ratio.max() < 1.3, kind  # distances kept (Johnson-Lindenstrauss)
    reduced = knn.fit(x, y, _hp(feature_dim="64", dimension_reduction_type="fjlt", dimension_reduction_target="16"))
    assert reduced.sample.shape == (400, 16) and knn.predict(x[:1], reduced)[0].tolist() == [0.0]


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"sample_size": None}, "Missing required hyperparameter: sample_size"),
        ({"predictor_type": "ranker"}, "Hyperparameter predictor_type: 'ranker' is not valid"),
        ({"index_type": "faiss.HNSW"}, "Hyperparameter index_type"),
        ({"faiss_index_pq_m": "5"}, "Hyperparameter faiss_index_pq_m: '5'"),
        ({"faiss_index_ivf_nlists": "0"}, "Hyperparameter faiss_index_ivf_nlists: '0'"),
        ({"dimension_reduction_type": "sign"}, "dimension_reduction_target is required"),
        ({"dimension_reduction_type": "sign", "dimension_reduction_target": "2"}, "must be less than feature_dim"),
        ({"index_type": "faiss.IVFPQ", "index_metric": "COSINE"}, "COSINE is not supported with index_type"),
    ],
)
def test_hyperparameters_are_checked_as_sagemaker_does(changes: dict[str, str | None], says: str) -> None:
    raw = {"k": "3", "sample_size": "10", "predictor_type": "classifier", "feature_dim": "2", **changes}
    with pytest.raises(fp.AlgorithmError) as exc:
        knn.check(fp.hyperparameters({k: v for k, v in raw.items() if v is not None}, knn.HYPERPARAMETERS))
    assert says in str(exc.value)


def test_the_accepted_index_choices() -> None:
    hp = _hp(index_type="faiss.IVFPQ", faiss_index_pq_m="16", faiss_index_ivf_nlists="auto")
    assert hp["faiss_index_pq_m"] == 16 and hp["faiss_index_ivf_nlists"] == "auto"


def _job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hps: dict[str, str], kind: str, **bodies: bytes) -> None:
    config, data = tmp_path / "config", tmp_path / "data"
    config.mkdir()
    (config / "hyperparameters.json").write_text(json.dumps(hps))
    (config / "inputdataconfig.json").write_text(json.dumps({c: {"ContentType": kind} for c in bodies}))
    for name, body in bodies.items():
        (data / name).mkdir(parents=True)
        (data / name / "part-0").write_bytes(body)
    for attr, value in (("CONFIG", config), ("DATA", data), ("MODEL_DIR", tmp_path / "model")):
        monkeypatch.setattr(fp, attr, value)
    monkeypatch.setattr(fp, "FAILURE", tmp_path / "failure")


def _metric(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("[0]\t"))


def test_a_job_reports_its_metric_and_saves_a_model_the_handler_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    x, y = _points(10, 4)
    hps = {"k": "3", "sample_size": "500", "predictor_type": "classifier", "feature_dim": "2"}
    train, test = rp.write(x.astype(np.float32), y.astype(np.float32)), rp.write(CENTERS.astype(np.float32), [0, 1, 1])
    _job(tmp_path, monkeypatch, hps, rp.CONTENT_TYPE, train=train, test=test)
    assert fp.run(knn.main) == 0
    assert _metric(capsys.readouterr().out) == "[0]\ttest-accuracy:0.6666666667"
    model = handler.model_fn(str(tmp_path / "model"))
    for body, kind in (
        (rp.write(np.array([[9.5, 0.2]], dtype=np.float32)), rp.CONTENT_TYPE),
        ("9.5,0.2\n", "text/csv"),
        ('{"instances": [{"features": [9.5, 0.2]}]}', "application/json"),
        (
            '{"instances": [{"data": {"features": {"keys": [0, 1], "shape": [2], "values": [9.5, 0.2]}}}]}',
            "application/json",
        ),
        ('{"data": {"features": {"values": [9.5, 0.2]}}}\n', "application/jsonlines"),
    ):
        predictions = handler.predict_fn(handler.input_fn(body, kind), model)
        assert predictions[0]["predicted_label"] == 1.0, kind
    body, kind = handler.output_fn(predictions, "application/json")
    assert kind == "application/json" and json.loads(body) == {"predictions": [{"predicted_label": 1.0}]}
    verbose = json.loads(handler.output_fn(predictions, "application/json; verbose=true")[0])["predictions"][0]
    assert verbose["labels"] == [1.0, 1.0, 1.0] and verbose["distances"] == sorted(verbose["distances"])
    record = rp.Record()
    record.ParseFromString(next(rp.frames(handler.output_fn(predictions, rp.CONTENT_TYPE)[0])))
    assert list(record.label["predicted_label"].float32_tensor.values) == [1.0] and "labels" not in record.label
    record.ParseFromString(next(rp.frames(handler.output_fn(predictions, rp.CONTENT_TYPE + ";verbose=true")[0])))
    assert list(record.label["labels"].float32_tensor.values) == [1.0, 1.0, 1.0]
    assert handler.output_fn(predictions, "text/csv") == (b"1.0\n", "text/csv")  # a batch transform's lines
    with pytest.raises(ValueError, match="needs 2 features"):
        knn.predict(np.ones((1, 3)), model)


def test_a_csv_job_takes_its_label_from_the_first_column(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    x, y = _points(10, 5)
    rows = "".join(f"{label * 2},{a},{b}\n" for label, (a, b) in zip(y, x, strict=True)).encode()
    hps = {"k": "1", "sample_size": "500", "predictor_type": "regressor", "feature_dim": "2"}
    _job(tmp_path, monkeypatch, hps, "text/csv", train=rows, test=rows)
    assert fp.run(knn.main) == 0
    assert _metric(capsys.readouterr().out) == "[0]\ttest-mse:0"  # each row its own nearest
    unlabelled = tmp_path / "unlabelled"
    unlabelled.mkdir()
    _job(unlabelled, monkeypatch, hps, rp.CONTENT_TYPE, train=rp.write(x))
    assert fp.run(knn.main) == 2
    assert "no labels" in (unlabelled / "failure").read_text()
