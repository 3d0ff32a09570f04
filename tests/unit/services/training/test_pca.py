"""The first-party PCA (issue 45): hyperparameters checked as SageMaker checks them, both modes finding the data's
principal directions (in AWS's ascending order, the mean subtracted or not), the same components from the same data
(seeded), a job's main program end to end on a CSV channel, and the inference script's formats."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

from servekit.services.training.algorithms import first_party as fp
from servekit.services.training.algorithms import pca
from servekit.services.training.algorithms.handlers import pca as handler
from servekit.serving.codecs import recordio_protobuf as rp

BASE = {"feature_dim": "5", "mini_batch_size": "10"}


def _data(seed: int = 0) -> np.ndarray:
    """Rows spread 10, 3 and 0.1 along the first three axes, centred at 7."""
    rng = np.random.default_rng(seed)
    return np.asarray(rng.normal(size=(200, 5)) * np.array([10.0, 3.0, 0.1, 0.1, 0.1]) + 7.0)


@pytest.mark.parametrize("mode", ["regular", "randomized"])
def test_both_modes_find_the_principal_directions_in_ascending_order(mode: str) -> None:
    params = fp.hyperparameters({**BASE, "num_components": "2", "algorithm_mode": mode}, pca.HYPERPARAMETERS)
    model = pca.fit(_data(), params)
    assert model.v.shape == (5, 2) and model.s[0] < model.s[1]  # the top component last, as AWS orders them
    assert_allclose(np.abs(model.v[:, 1]), [1, 0, 0, 0, 0], atol=0.02)
    assert_allclose(np.abs(model.v[:, 0]), [0, 1, 0, 0, 0], atol=0.02)
    assert_allclose(model.mean, _data().mean(0))
    assert_allclose(pca.fit(_data(), params).v, model.v)  # seeded: the same components twice
    projected = pca.project(model.mean + np.array([[10.0, 0, 0, 0, 0]]), model)
    assert abs(projected[0, 1]) == pytest.approx(10.0, abs=0.1) and abs(projected[0, 0]) < 0.3


def test_without_subtract_mean_the_mean_stays_in_the_data() -> None:
    params = fp.hyperparameters({**BASE, "num_components": "1", "subtract_mean": "false"}, pca.HYPERPARAMETERS)
    model = pca.fit(np.full((20, 5), 3.0), params)
    assert_allclose(model.mean, 0.0)
    assert_allclose(np.abs(model.v[:, 0]), np.full(5, 1 / np.sqrt(5)), atol=1e-9)  # the mean's direction
    assert_allclose(np.abs(pca.project(np.full((1, 5), 3.0), model)), [[3 * np.sqrt(5)]])


def test_randomized_mode_gives_as_many_components_as_asked_even_past_the_rows() -> None:
    params = fp.hyperparameters(
        {**BASE, "num_components": "4", "algorithm_mode": "randomized", "extra_components": "-1"}, pca.HYPERPARAMETERS
    )
    model = pca.fit(_data()[:3], params)
    assert model.v.shape == (5, 4) and np.isfinite(model.v).all()
    assert_allclose(model.v.T @ model.v, np.eye(4), atol=1e-9)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"feature_dim": "5", "mini_batch_size": "10"}, "Missing required hyperparameter: num_components"),
        ({"feature_dim": "5", "num_components": "2"}, "Missing required hyperparameter: mini_batch_size"),
        ({**BASE, "num_components": "0"}, "Hyperparameter num_components: '0' is not valid"),
        ({**BASE, "num_components": "2", "algorithm_mode": "fast"}, "(expected one of regular, randomized)"),
        ({**BASE, "num_components": "2", "extra_components": "-2"}, "(expected a non-negative integer or -1)"),
        ({**BASE, "num_components": "2", "subtract_mean": "yes"}, "(expected true or false)"),
        ({**BASE, "num_components": "2", "k": "3"}, "Additional hyperparameters are not allowed (k was unexpected)"),
    ],
)
def test_hyperparameters_are_checked_as_sagemaker_does(raw: dict[str, str], says: str) -> None:
    with pytest.raises(fp.AlgorithmError) as exc:
        fp.hyperparameters(raw, pca.HYPERPARAMETERS)
    assert says in str(exc.value)


def test_the_training_program_reads_a_csv_channel_and_writes_its_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config, data, model_dir = tmp_path / "config", tmp_path / "data", tmp_path / "model"
    config.mkdir()
    (data / "train").mkdir(parents=True)
    np.savetxt(data / "train" / "rows.csv", _data(), delimiter=",")
    (config / "inputdataconfig.json").write_text(json.dumps({"train": {"ContentType": "text/csv;label_size=0"}}))
    (config / "hyperparameters.json").write_text(json.dumps({**BASE, "num_components": "3"}))
    for name, path in (("CONFIG", config), ("DATA", data), ("MODEL_DIR", model_dir)):
        monkeypatch.setattr(fp, name, path)
    pca.main()
    assert pca.load(model_dir).v.shape == (5, 3)
    (config / "hyperparameters.json").write_text(json.dumps({**BASE, "feature_dim": "4", "num_components": "3"}))
    with pytest.raises(fp.AlgorithmError, match="feature_dim is 4 but the train channel's records have 5"):
        pca.main()
    (config / "hyperparameters.json").write_text(json.dumps({**BASE, "num_components": "6"}))
    with pytest.raises(fp.AlgorithmError, match="num_components is 6 but the records have 5 features"):
        pca.main()


def test_the_inference_script_reads_and_answers_every_format(tmp_path: Path) -> None:
    params = fp.hyperparameters({**BASE, "num_components": "2"}, pca.HYPERPARAMETERS)
    pca.save(pca.fit(_data(), params), tmp_path)
    model = handler.model_fn(str(tmp_path))
    expected = pca.project(np.array([[17.0, 7, 7, 7, 7]]), model)[0]
    for body, kind in (
        (rp.write(np.array([[17, 7, 7, 7, 7]], dtype=np.float32)), rp.CONTENT_TYPE),
        ("17,7,7,7,7\n", "text/csv"),
        ('{"instances": [{"features": [17, 7, 7, 7, 7]}]}', "application/json"),
        (
            '{"instances": [{"data": {"features": {"keys": [0,1,2,3,4], "shape": [5], "values": [17,7,7,7,7]}}}]}',
            "application/json",
        ),
        ('{"features": [17, 7, 7, 7, 7]}\n', "application/jsonlines"),
    ):
        projections = handler.predict_fn(handler.input_fn(body, kind), model)
        assert_allclose(projections[0], expected, rtol=1e-6, err_msg=kind)
    body, kind = handler.output_fn(projections, "application/json")
    assert kind == "application/json"
    assert_allclose(json.loads(body)["projections"][0]["projection"], expected)
    body, kind = handler.output_fn(projections * 2, rp.CONTENT_TYPE)
    records = list(rp.frames(body))
    assert kind == rp.CONTENT_TYPE and len(records) == 2
    record = rp.Record()
    record.ParseFromString(records[0])
    assert_allclose(record.label["projection"].float32_tensor.values, expected, rtol=1e-6)
    body, kind = handler.output_fn(projections, "application/jsonlines")
    assert_allclose(json.loads(body.splitlines()[0])["projection"], expected)
    with pytest.raises(ValueError, match="not one PCA takes"):
        handler.input_fn(b"x", "image/png")
    with pytest.raises(ValueError, match="needs 5 features"):
        handler.predict_fn(np.ones((1, 3)), model)
