"""The first-party Linear Learner (issue 45): hyperparameters checked as SageMaker checks them, the three predictor
types fitted on small data (seeded: the same model twice), the binary threshold calibrated, labels read from
RecordIO or CSV's first column, metrics under AWS's names in one evaluation line, and the inference script's
formats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.testing import assert_allclose

from servekit.services.training.algorithms import first_party as fp
from servekit.services.training.algorithms import linear_learner as ll
from servekit.services.training.algorithms import supervised_metrics as sm
from servekit.services.training.algorithms.handlers import linear_learner as handler
from servekit.services.training.images import ALGORITHM_METRICS
from servekit.services.training.metrics import evaluation_metrics
from servekit.serving.codecs import recordio_protobuf as rp

TRUE = np.array([2.0, -1.0, 0.5, 0.0])


def _hp(**raw: str) -> dict[str, Any]:
    return ll.settle(fp.hyperparameters({"feature_dim": "4", "mini_batch_size": "50", **raw}, ll.HYPERPARAMETERS))


def _data(kind: str, n: int = 300, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4)) * [1.0, 5.0, 0.2, 1.0] + [0.0, 3.0, 0.0, -2.0]  # unscaled, off-centre features
    z = (x - [0.0, 3.0, 0.0, -2.0]) / [1.0, 5.0, 0.2, 1.0] @ TRUE
    if kind == "binary_classifier":
        return x, (z + 0.2 * rng.normal(size=n) > 0.5).astype(float)
    if kind == "multiclass_classifier":
        return x, np.digitize(z, [-1.0, 1.0]).astype(float)
    return x, 10 * z + 100 + rng.normal(size=n)


def test_a_binary_classifier_learns_and_calibrates_its_threshold_the_same_way_twice() -> None:
    x, y = _data("binary_classifier")
    hp = _hp(predictor_type="binary_classifier", binary_classifier_model_selection_criteria="f1")
    model = ll.fit(x, y, hp)
    m = ll.metrics(x, y, model, hp)
    assert m["binary_classification_accuracy"] > 0.9 and m["roc_auc_score"] > 0.95 and m["binary_f_beta"] > 0.85
    assert 0.0 < model.threshold < 1.0
    again = ll.fit(x, y, hp)
    assert_allclose(again.weights, model.weights) and again.threshold == model.threshold
    answers = ll.predict(x[:5], model)
    assert {"score", "predicted_label"} == set(answers[0]) and all(0 <= a["score"] <= 1 for a in answers)
    assert [a["predicted_label"] for a in answers] == [int(a["score"] > model.threshold) for a in answers]


@pytest.mark.parametrize("loss", ["squared_loss", "absolute_loss", "huber_loss", "eps_insensitive_squared_loss"])
def test_a_regressor_recovers_the_line_in_the_labels_units(loss: str) -> None:
    x, y = _data("regressor")
    hp = _hp(predictor_type="regressor", loss=loss, epochs="30", num_models="2")
    model = ll.fit(x, y, hp)
    m = ll.metrics(x, y, model, hp)
    assert m["r2"] > 0.97 and m["rmse"] == pytest.approx(np.sqrt(m["mse"])), m
    assert ll.predict(x[:1], model)[0].keys() == {"score"}


def test_a_multiclass_classifier_scores_every_class() -> None:
    x, y = _data("multiclass_classifier")
    hp = _hp(predictor_type="multiclass_classifier", num_classes="3", accuracy_top_k="2", epochs="30")
    model = ll.fit(x, y, hp)
    m = ll.metrics(x, y, model, hp)
    assert m["multiclass_accuracy"] > 0.9 and m["multiclass_top_k_accuracy"] >= m["multiclass_accuracy"]
    answer = ll.predict(x[:1], model)[0]
    assert len(answer["score"]) == 3 and sum(answer["score"]) == pytest.approx(1.0)
    assert answer["predicted_label"] == int(np.argmax(answer["score"]))


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({}, "Missing required hyperparameter: predictor_type"),
        ({"predictor_type": "multiclass_classifier"}, "num_classes is required"),
        ({"predictor_type": "regressor", "loss": "logistic"}, "loss logistic is not one for a regressor"),
        ({"predictor_type": "binary_classifier", "target_recall": "1"}, "target_recall: '1' is not valid"),
        ({"predictor_type": "binary_classifier", "num_classes": "2"}, "num_classes: '2' is not valid"),
        ({"predictor_type": "binary_classifier", "momentum": "1.5"}, "momentum: '1.5' is not valid"),
        ({"predictor_type": "binary_classifier", "optimizer": "lbfgs"}, "optimizer: 'lbfgs' is not valid"),
        ({"predictor_type": "binary_classifier", "colour": "blue"}, "(colour was unexpected)"),
    ],
)
def test_hyperparameters_are_checked_as_sagemaker_does(raw: dict[str, str], says: str) -> None:
    with pytest.raises(fp.AlgorithmError) as exc:
        ll.settle(fp.hyperparameters(raw, ll.HYPERPARAMETERS))
    assert says in str(exc.value)


def test_the_sdks_hyperparameters_are_taken() -> None:
    """What the SDK's own test sets (test_linear_learner.py), as the SDK writes them."""
    raw = {"predictor_type": "binary_classifier", "binary_classifier_model_selection_criteria": "accuracy"}
    raw |= {"target_recall": "0.5", "positive_example_weight_mult": "0.1", "epochs": "1", "use_bias": "True"}
    raw |= {"num_models": "1", "num_calibration_samples": "1", "init_method": "uniform", "init_bias": "5"}
    raw |= {"optimizer": "adam", "loss": "logistic", "wd": "0.5", "l1": "0.5", "beta_2": "0.1"}
    raw |= {"lr_scheduler_minimum_lr": "0.1", "normalize_data": "False", "unbias_data": "True", "huber_delta": "0.1"}
    hp = ll.settle(fp.hyperparameters(raw, ll.HYPERPARAMETERS))
    x, y = _data("binary_classifier", n=40)
    assert len(ll.predict(x, ll.fit(x, y, hp))) == 40


def test_labels_are_checked() -> None:
    with pytest.raises(fp.AlgorithmError, match="must be 0 or 1"):
        ll.check_labels(np.array([0.0, 2.0]), _hp(predictor_type="binary_classifier"), "train")
    with pytest.raises(fp.AlgorithmError, match="from 0 to num_classes - 1"):
        ll.check_labels(np.array([0.0, 3.0]), _hp(predictor_type="multiclass_classifier", num_classes="3"), "train")


def test_the_threshold_is_the_one_that_does_best_by_the_criterion() -> None:
    y = np.array([0, 0, 1, 0, 1, 1], dtype=float)
    s = np.array([0.1, 0.2, 0.3, 0.4, 0.8, 0.9])
    threshold, accuracy = sm.calibrate(y, s, "accuracy", 1.0, 0.8, 0.8)
    assert 0.4 <= threshold < 0.8 and accuracy == pytest.approx(5 / 6)
    threshold, recall = sm.calibrate(y, s, "recall_at_target_precision", 1.0, 0.8, 0.7)
    assert threshold < 0.3 and recall == 1.0  # precision 3/4 >= 0.7 with every positive found


def _job(
    tmp: Path, monkeypatch: pytest.MonkeyPatch, hps: dict[str, str], channels: dict[str, tuple[str, bytes]]
) -> None:
    for name in ("CONFIG", "DATA", "MODEL_DIR", "FAILURE"):
        monkeypatch.setattr(fp, name, tmp / name.lower())
    fp.CONFIG.mkdir(parents=True)
    (fp.CONFIG / "hyperparameters.json").write_text(json.dumps(hps))
    (fp.CONFIG / "inputdataconfig.json").write_text(
        json.dumps({n: {"ContentType": t} for n, (t, _) in channels.items()})
    )
    for name, (_, body) in channels.items():
        (fp.DATA / name).mkdir(parents=True)
        (fp.DATA / name / "part-0").write_bytes(body)


def test_a_job_reads_csv_labels_and_reports_validation_and_test_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    x, y = _data("binary_classifier", n=120)
    csv = "".join(f"{int(label)}," + ",".join(map(str, row)) + "\n" for label, row in zip(y, x, strict=True)).encode()
    channels = {"train": ("text/csv", csv), "validation": (rp.CONTENT_TYPE, rp.write(x, y)), "test": ("text/csv", csv)}
    _job(tmp_path, monkeypatch, {"predictor_type": "binary_classifier", "feature_dim": "4"}, channels)
    assert fp.run(ll.main) == 0
    found = {m["MetricName"]: m["Value"] for m in evaluation_metrics(capsys.readouterr().out, 0.0)}
    assert found["test:binary_classification_accuracy"] > 0.85 and "validation:objective_loss" in found
    assert set(found) <= ALGORITHM_METRICS["linear-learner"]  # what a tuning job may take
    model = ll.load(fp.MODEL_DIR)
    assert model.weights.shape == (4, 1)


def test_a_job_fails_with_a_client_error_naming_the_problem(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x, y = _data("binary_classifier", n=20)
    _job(
        tmp_path,
        monkeypatch,
        {"predictor_type": "binary_classifier", "feature_dim": "5"},
        {"train": (rp.CONTENT_TYPE, rp.write(x, y))},
    )
    assert fp.run(ll.main) == 2
    assert fp.FAILURE.read_text() == "ClientError: feature_dim is 5 but the train channel's records have 4"


def test_the_inference_script_reads_and_answers_every_format(tmp_path: Path) -> None:
    x, y = _data("binary_classifier")
    hp = _hp(predictor_type="binary_classifier")
    ll.save(ll.fit(x, y, hp), tmp_path)
    model = handler.model_fn(str(tmp_path))
    row = x[0]
    expected = ll.predict(x[:1], model)[0]
    features = row.tolist()
    for body, kind in (
        (rp.write(x[:1]), rp.CONTENT_TYPE),
        (",".join(map(str, row)) + "\n", "text/csv"),
        (json.dumps({"instances": [{"features": features}]}), "application/json"),
        (json.dumps({"instances": [{"data": {"features": {"values": features}}}]}), "application/json"),
        (json.dumps({"features": features}) + "\n", "application/jsonlines"),
    ):
        predictions = handler.predict_fn(handler.input_fn(body, kind), model)
        assert predictions[0]["predicted_label"] == expected["predicted_label"], kind
        assert predictions[0]["score"] == pytest.approx(expected["score"], rel=1e-5), kind
    body, kind = handler.output_fn(predictions, "application/json")
    assert kind == "application/json" and json.loads(body)["predictions"][0].keys() == {"score", "predicted_label"}
    body, kind = handler.output_fn(predictions, rp.CONTENT_TYPE)
    record = rp.Record()
    record.ParseFromString(next(rp.frames(body)))
    assert record.label["predicted_label"].float32_tensor.values[0] == expected["predicted_label"]
    assert record.label["score"].float32_tensor.values[0] == pytest.approx(expected["score"], rel=1e-5)
    body, kind = handler.output_fn(predictions, "text/csv")
    assert body.decode().startswith(f"{expected['predicted_label']},")
    with pytest.raises(ValueError, match="not one Linear Learner takes"):
        handler.input_fn(b"x", "image/png")
    with pytest.raises(ValueError, match="needs 4 features"):
        ll.predict(np.ones((1, 3)), model)
