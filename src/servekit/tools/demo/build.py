"""Build the example model repository: iris (sklearn and ONNX, two versions), a regressor, a handler model.

Everything is trained on datasets bundled with scikit-learn with fixed seeds, so two builds give the same
predictions. Needs the ``demo`` extra (scikit-learn, skl2onnx).
"""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

IRIS_FEATURES = ("sepal_length", "sepal_width", "petal_length", "petal_width")
IRIS_CLASSES = ("setosa", "versicolor", "virginica")

HANDLER_CODE = textwrap.dedent('''
    """SageMaker-style handler: the contract of sagemaker-inference-toolkit."""
    import json
    import os

    import joblib
    import numpy as np

    CLASSES = ["setosa", "versicolor", "virginica"]


    def model_fn(model_dir, context=None):
        return joblib.load(os.path.join(model_dir, "model.joblib"))


    def input_fn(input_data, content_type):
        if content_type.startswith("application/json"):
            doc = json.loads(input_data)
            rows = doc["features"] if isinstance(doc, dict) else doc
            return np.asarray(rows, dtype=np.float64)
        if content_type.startswith("text/csv"):
            return np.atleast_2d(np.loadtxt(input_data.splitlines(), delimiter=","))
        raise ValueError(f"unsupported content type {content_type}")


    def predict_fn(data, model):
        return model.predict_proba(np.atleast_2d(np.asarray(data, dtype=np.float64)))


    def output_fn(prediction, accept):
        labels = [CLASSES[i] for i in prediction.argmax(axis=1)]
        body = {"labels": labels, "probabilities": prediction.round(6).tolist()}
        return json.dumps(body), "application/json"
''').lstrip()


def _iris() -> tuple[Any, Any]:
    from sklearn.datasets import load_iris

    x, y = load_iris(return_X_y=True)
    return x, y


def _write_manifest(
    path: Path, runtime: str = "", features: tuple[str, ...] = (), classes: tuple[str, ...] = ()
) -> None:
    lines = []
    if runtime:
        lines.append(f'runtime = "{runtime}"')
    if features:
        lines.append("feature_names = [" + ", ".join(f'"{f}"' for f in features) + "]")
    if classes:
        lines.append("class_labels = [" + ", ".join(f'"{c}"' for c in classes) + "]")
    (path / "servekit.toml").write_text("\n".join(lines) + "\n")


def iris_sklearn(version_dir: Path, c: float = 1.0) -> Path:
    import joblib
    from sklearn.linear_model import LogisticRegression

    x, y = _iris()
    model = LogisticRegression(C=c, max_iter=1000).fit(x, y)
    version_dir.mkdir(parents=True, exist_ok=True)
    joblib.dump(model, version_dir / "model.joblib")
    _write_manifest(version_dir, features=IRIS_FEATURES, classes=IRIS_CLASSES)
    return version_dir


def iris_onnx(version_dir: Path, c: float = 1.0) -> Path:
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression

    x, y = _iris()
    model = LogisticRegression(C=c, max_iter=1000).fit(x, y)
    onx = to_onnx(
        model, x[:1].astype(np.float32), options={id(model): {"zipmap": False}}, target_opset={"": 17, "ai.onnx.ml": 3}
    )
    version_dir.mkdir(parents=True, exist_ok=True)
    (version_dir / "model.onnx").write_bytes(onx.SerializeToString())
    _write_manifest(version_dir, features=IRIS_FEATURES, classes=IRIS_CLASSES)
    return version_dir


def regressor(version_dir: Path) -> Path:
    import joblib
    from sklearn.datasets import load_diabetes
    from sklearn.linear_model import Ridge

    x, y = load_diabetes(return_X_y=True)
    model = Ridge(alpha=1.0).fit(x, y)
    version_dir.mkdir(parents=True, exist_ok=True)
    joblib.dump(model, version_dir / "model.joblib")
    return version_dir


def iris_handler(version_dir: Path) -> Path:
    iris_sklearn(version_dir)
    (version_dir / "servekit.toml").unlink()
    code = version_dir / "code"
    code.mkdir(exist_ok=True)
    (code / "inference.py").write_text(HANDLER_CODE)
    return version_dir


MODEL_CONFIG = """\
model_config_list {
  config {
    name: 'iris'
    base_path: '%(base)s/iris'
    model_platform: 'onnx'
    model_version_policy { all {} }
    version_labels { key: 'stable' value: 1 }
    version_labels { key: 'canary' value: 2 }
  }
  config { name: 'iris_sklearn' base_path: '%(base)s/iris_sklearn' }
  config { name: 'diabetes' base_path: '%(base)s/diabetes' }
  config { name: 'iris_handler' base_path: '%(base)s/iris_handler' }
}
"""


def build_demo(base: Path, overwrite: bool = True) -> Path:
    """Write every example model under ``base`` and a TF Serving model config; returns the config path."""
    base = base.resolve()
    if overwrite and base.exists():
        shutil.rmtree(base)
    iris_onnx(base / "iris" / "1", c=0.05)
    iris_onnx(base / "iris" / "2", c=1.0)
    iris_sklearn(base / "iris_sklearn" / "1")
    regressor(base / "diabetes" / "1")
    iris_handler(base / "iris_handler" / "1")
    config = base / "models.config"
    config.write_text(MODEL_CONFIG % {"base": base})
    return config
