"""The first-party k-means (issue 45): hyperparameters checked as SageMaker checks them, Lloyd's algorithm finding
well-separated clusters from either initialisation, the same centers from the same data (seeded), each row's
closest center and distance; the inference script's formats."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_allclose

from servekit.services.training.algorithms import first_party as fp
from servekit.services.training.algorithms import kmeans
from servekit.services.training.algorithms.handlers import kmeans as handler
from servekit.serving.codecs import recordio_protobuf as rp

CENTERS = np.array([[0.0, 0.0], [10.0, 10.0], [0.0, 10.0]])


def _points(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.vstack([c + rng.normal(0, 0.3, size=(40, 2)) for c in CENTERS])


@pytest.mark.parametrize("init", ["random", "kmeans++"])
def test_lloyd_finds_the_clusters_and_gives_the_same_centers_twice(init: str) -> None:
    hp = kmeans.HYPERPARAMETERS
    params = fp.hyperparameters({"k": "3", "feature_dim": "2", "init_method": init, "local_lloyd_num_trials": "3"}, hp)
    centers = kmeans.fit(_points(), params)
    found = sorted(map(tuple, np.round(centers)))
    assert found == sorted(map(tuple, CENTERS))
    assert_allclose(kmeans.fit(_points(), params), centers)
    nearest, distance = kmeans.assign(np.array([[0.1, 9.9]]), centers)
    assert_allclose(centers[nearest[0]], [0, 10], atol=0.2) and distance[0] < 0.5


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        ({"feature_dim": "2"}, "Missing required hyperparameter: k"),
        ({"k": "0", "feature_dim": "2"}, "Hyperparameter k: '0' is not valid (expected an integer in [1, inf])"),
        ({"k": "2", "feature_dim": "2", "eval_metrics": '["mse"]'}, "eval_metrics"),
        ({"k": "2", "feature_dim": "2", "colour": "blue"}, "Additional hyperparameters are not allowed (colour"),
    ],
)
def test_hyperparameters_are_checked_as_sagemaker_does(raw: dict[str, str], says: str) -> None:
    with pytest.raises(fp.AlgorithmError) as exc:
        fp.hyperparameters(raw, kmeans.HYPERPARAMETERS)
    assert says in str(exc.value)


def test_the_inference_script_reads_and_answers_every_format(tmp_path: Path) -> None:
    kmeans.save(CENTERS, tmp_path)
    centers = handler.model_fn(str(tmp_path))
    for body, kind in (
        (rp.write(np.array([[9.0, 9.5]], dtype=np.float32)), rp.CONTENT_TYPE),
        ("9,9.5\n", "text/csv"),
        ('{"instances": [{"features": [9, 9.5]}]}', "application/json"),
        ('{"instances": [{"data": {"features": {"values": [9, 9.5]}}}]}', "application/json"),
        ('{"features": [9, 9.5]}\n', "application/jsonlines"),
    ):
        predictions = handler.predict_fn(handler.input_fn(body, kind), centers)
        assert predictions[0]["closest_cluster"] == 1.0, kind
    body, kind = handler.output_fn(predictions, "application/json")
    assert kind == "application/json" and json.loads(body)["predictions"][0]["closest_cluster"] == 1.0
    body, kind = handler.output_fn(predictions, rp.CONTENT_TYPE)
    record = rp.Record()
    record.ParseFromString(next(rp.frames(body)))
    assert list(record.label["closest_cluster"].float32_tensor.values) == [1.0]
    with pytest.raises(ValueError, match="not one k-means takes"):
        handler.input_fn(b"x", "image/png")
    with pytest.raises(ValueError, match="needs 2 features"):
        kmeans.assign(np.ones((1, 3)), centers)
