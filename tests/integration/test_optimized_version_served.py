"""An optimized version is served: a quantized MLP, converted from scikit-learn by ``servekit optimize`` into the
model's own base, is the version the app picks and answers TF Serving predict and classify like the original."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from servekit.config.models import ModelConfig, ServerConfig
from servekit.testing.app_client import app_client
from servekit.tools.optimize.run import OptimizeOptions, optimize


def test_the_app_serves_the_optimized_version(tmp_path: Path) -> None:
    import joblib
    from sklearn.datasets import make_classification
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.neural_network import MLPClassifier

    x, y = make_classification(300, 6, n_informative=4, n_classes=3, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model = MLPClassifier((16,), max_iter=300, random_state=0).fit(x, y)
    base = tmp_path / "mlp"
    (base / "1").mkdir(parents=True)
    joblib.dump(model, base / "1" / "model.joblib")

    outcome = optimize(
        OptimizeOptions(model=base, out=base, quantize="int8", batch_sizes=(1,), rounds=1, max_accuracy_drop=0.05)
    )
    assert outcome.version_dir == base / "2"

    config = ServerConfig(models=(ModelConfig(name="mlp", base_path=str(base)),), file_system_poll_wait_seconds=0)
    with app_client(config) as client:
        status = client.get("/v1/models/mlp").json()["model_version_status"]
        assert [(s["version"], s["state"]) for s in status] == [("2", "AVAILABLE")]
        meta = client.get("/v1/models/mlp/metadata").json()
        assert meta["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]["inputs"]["dtype"] == (
            "DT_DOUBLE"  # the sklearn runtime's contract, kept
        )
        rows = x[:10].tolist()
        predicted = client.post("/v1/models/mlp:predict", json={"instances": rows})
        assert predicted.status_code == 200, predicted.text
        assert predicted.headers["x-servekit-model-version"] == "2"
        labels = np.asarray(predicted.json()["predictions"])
        agree = float(np.mean(labels == model.predict(x[:10])))
        assert agree >= 0.9
        classified = client.post("/v1/models/mlp:classify", json={"examples": [{"inputs": r} for r in rows[:2]]})
        assert classified.status_code == 200, classified.text
        assert len(classified.json()["results"]) == 2
