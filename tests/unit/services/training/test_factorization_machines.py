"""The first-party Factorization Machines (issue 45): hyperparameters checked as SageMaker checks them, a real FM
learning pairwise interactions a linear model cannot (seeded: the same model twice), the binary classifier's
metrics under AWS's names, a huge learning rate (the SDK's tuner ranges) staying finite, and the inference
script's formats (the SDK tests' JSON, sparse JSON, RecordIO-protobuf)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.testing import assert_allclose

from servekit.services.training.algorithms import factorization_machines as fm
from servekit.services.training.algorithms import first_party as fp
from servekit.services.training.algorithms.handlers import factorization_machines as handler
from servekit.services.training.metrics import evaluation_metrics
from servekit.serving.codecs import recordio_protobuf as rp


def _hp(**raw: str) -> dict[str, Any]:
    base = {"feature_dim": "6", "num_factors": "4", "predictor_type": "regressor", "epochs": "60"}
    base |= {"mini_batch_size": "32", "factors_lr": "0.05", "linear_lr": "0.05", "factors_init_sigma": "0.1"}
    return fp.hyperparameters(base | raw, fm.HYPERPARAMETERS)


def _data(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 2, size=(n, 6)).astype(float)
    return x, 1.0 + 2 * x[:, 0] + 3 * x[:, 1] * x[:, 2] - 2 * x[:, 3] * x[:, 4]


def test_the_factors_learn_the_pairwise_interactions_a_linear_model_cannot() -> None:
    x, y = _data()
    model = fm.fit(x, y, _hp())
    linear_only = fm.fit(x, y, _hp(factors_lr="0", factors_init_method="constant", factors_init_value="0"))
    assert fm.metrics(x, y, model)["rmse"] < 0.2 < 0.6 < fm.metrics(x, y, linear_only)["rmse"]
    assert_allclose(fm.fit(x, y, _hp()).factors, model.factors)  # seeded
    assert fm.predict(x[:1], model)[0].keys() == {"score"}


def test_a_binary_classifier_reports_awss_metrics() -> None:
    x, y = _data()
    labels = (y > 2.5).astype(float)
    model = fm.fit(x, labels, _hp(predictor_type="binary_classifier"))
    m = fm.metrics(x, labels, model)
    assert set(m) == {"binary_classification_accuracy", "binary_classification_cross_entropy", "binary_f_beta"}
    assert m["binary_classification_accuracy"] > 0.95 and m["binary_classification_cross_entropy"] < 0.3
    answer = fm.predict(x[:3], model)
    assert [a["predicted_label"] for a in answer] == [int(a["score"] > 0.5) for a in answer]


def test_a_huge_learning_rate_stays_finite() -> None:
    """test_tuner_multi_algo.py tunes factors_lr in [40, 50] and factors_wd in [1, 30]: the objective is a number."""
    x, y = _data(n=100)
    hp = _hp(factors_lr="45", factors_wd="20", epochs="3", clip_gradient="100", rescale_grad="0.01")
    assert np.isfinite(fm.metrics(x, y, fm.fit(x, y, hp))["rmse"])


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"num_factors": "0"}, "num_factors: '0' is not valid"),
        ({"predictor_type": "multiclass_classifier"}, "predictor_type: 'multiclass_classifier' is not valid"),
        ({"factors_lr": "-1"}, "factors_lr: '-1' is not valid (expected a non-negative number)"),
        ({"bias_init_method": "zeros"}, "bias_init_method: 'zeros' is not valid"),
        ({"colour": "blue"}, "(colour was unexpected)"),
    ],
)
def test_hyperparameters_are_checked_as_sagemaker_does(raw: dict[str, str], says: str) -> None:
    with pytest.raises(fp.AlgorithmError) as exc:
        _hp(**raw)
    assert says in str(exc.value)
    with pytest.raises(fp.AlgorithmError, match="Missing required hyperparameter: num_factors"):
        fp.hyperparameters({"feature_dim": "2", "predictor_type": "regressor"}, fm.HYPERPARAMETERS)


def test_a_job_on_records_reports_test_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    x, y = _data(n=120)
    for name in ("CONFIG", "DATA", "MODEL_DIR", "FAILURE"):
        monkeypatch.setattr(fp, name, tmp_path / name.lower())
    fp.CONFIG.mkdir(parents=True)
    hps = {"feature_dim": "6", "num_factors": "3", "predictor_type": "binary_classifier", "mini_batch_size": "100"}
    (fp.CONFIG / "hyperparameters.json").write_text(json.dumps(hps))
    (fp.CONFIG / "inputdataconfig.json").write_text(json.dumps({"train": {}, "test": {}}))
    for name in ("train", "test"):
        (fp.DATA / name).mkdir(parents=True)
        (fp.DATA / name / "part-0").write_bytes(rp.write(x.astype(np.float32), (y > 2.5).astype(np.float32)))
    assert fp.run(fm.main) == 0
    found = {m["MetricName"] for m in evaluation_metrics(capsys.readouterr().out, 0.0)}
    assert found == {f"test:{m}" for m in ("binary_classification_accuracy", "binary_classification_cross_entropy")} | {
        "test:binary_f_beta"
    }
    assert fm.load(fp.MODEL_DIR).factors.shape == (6, 3)
    (fp.DATA / "train" / "part-0").write_bytes(rp.write(x.astype(np.float32), y))  # labels 1..6: not 0/1
    assert fp.run(fm.main) == 2
    assert "labels must be 0 or 1" in fp.FAILURE.read_text()


def test_the_inference_script_reads_and_answers_every_format(tmp_path: Path) -> None:
    x, y = _data()
    fm.save(fm.fit(x, (y > 2.5).astype(float), _hp(predictor_type="binary_classifier")), tmp_path)
    model = handler.model_fn(str(tmp_path))
    row = [0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    expected = fm.predict(np.array([row]), model)[0]
    sparse = {"keys": [1, 2], "shape": [6], "values": [1.0, 1.0]}
    for body, kind in (
        (rp.write(np.array([row], dtype=np.float32)), rp.CONTENT_TYPE),
        ("0,1,1,0,0,0\n", "text/csv"),
        (json.dumps({"instances": [{"features": row}]}), "application/json"),  # the SDK tests' serializer
        (json.dumps({"instances": [{"data": {"features": sparse}}]}), "application/json"),
        (json.dumps({"data": {"features": {"values": row}}}) + "\n", "application/jsonlines"),
    ):
        predictions = handler.predict_fn(handler.input_fn(body, kind), model)
        assert predictions == [expected], kind
    assert expected["predicted_label"] == 1
    body, kind = handler.output_fn(predictions, "application/json")
    assert json.loads(body) == {"predictions": [expected]}
    body, kind = handler.output_fn(predictions, rp.CONTENT_TYPE)
    record = rp.Record()
    record.ParseFromString(next(rp.frames(body)))
    assert record.label["score"].float32_tensor.values[0] == pytest.approx(expected["score"], rel=1e-6)
    with pytest.raises(ValueError, match="is not one Factorization Machines answers"):
        handler.output_fn(predictions, "image/png")
