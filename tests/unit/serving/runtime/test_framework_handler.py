"""A SageMaker framework model's entry point in the handler runtime: servekit.toml's entry_point names the script in
code/ (a training script: its __main__ block does not run; modules beside it import), and where the script defines
only model_fn the toolkit's defaults apply: JSON/CSV/NPY in, model.predict, the Accept type out."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import joblib
import numpy as np
import pytest
from sklearn.linear_model import LinearRegression

from servekit.errors import ConfigError, ErrorCode, ServekitError
from servekit.serving.runtime.handler import HandlerServable
from servekit.serving.runtime.registry import RuntimeRegistry

TRAIN = """\
import argparse
import os

import joblib

from helpers import FILE


def model_fn(model_dir):
    return joblib.load(os.path.join(model_dir, FILE))


if __name__ == "__main__":
    raise SystemExit("the training block ran")
"""


def framework_model(tmp_path: Path, script: str = TRAIN, entry: str = "train.py") -> tuple[Path, LinearRegression]:
    version = tmp_path / "1"
    (version / "code").mkdir(parents=True)
    X = np.array([[1.0, 2.0], [2.0, 1.0], [3.0, 5.0], [4.0, 3.0]])
    est = LinearRegression().fit(X, X @ np.array([1.5, -2.0]) + 0.5)
    joblib.dump(est, version / "model.joblib")
    (version / "code" / "train.py").write_text(script)
    (version / "code" / "helpers.py").write_text("FILE = 'model.joblib'\n")
    (version / "servekit.toml").write_text(f'runtime = "python"\nentry_point = "{entry}"\n')
    return version, est


def test_a_script_with_only_model_fn_gets_the_toolkits_defaults(tmp_path: Path) -> None:
    before = list(sys.path)
    version, est = framework_model(tmp_path)
    s = RuntimeRegistry().load(version)
    assert isinstance(s, HandlerServable)
    assert sys.path == before  # code/ was on it while the script was imported, not after
    rows = [[1, 2], [3, 4]]
    expected = est.predict(np.array(rows, dtype=float))
    body, ctype = s.invoke(json.dumps(rows).encode(), "application/json", "application/json")
    assert ctype == "application/json"
    np.testing.assert_allclose(json.loads(body), expected)
    body, ctype = s.invoke(b"1,2\n3,4\n", "text/csv", "text/csv")
    assert ctype == "text/csv"
    np.testing.assert_allclose([float(x) for x in body.decode().split()], expected)
    buf = io.BytesIO()
    np.save(buf, np.array(rows, dtype=float))
    body, ctype = s.invoke(buf.getvalue(), "application/x-npy", "application/x-npy")
    assert ctype == "application/x-npy"
    np.testing.assert_allclose(np.load(io.BytesIO(body)), expected)
    body, ctype = s.invoke(b"[[1, 2]]", "application/json", "*/*")  # any Accept: JSON
    assert ctype == "application/json"
    np.testing.assert_allclose(
        s.predict("serving_default", {"inputs": np.array(rows, dtype=float)})["predictions"], expected
    )
    with pytest.raises(ServekitError) as info:  # the default predict_fn on a row the model cannot take: a 400
        s.invoke(b"[[1, 2, 3]]", "application/json", "application/json")
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_the_scripts_own_functions_win(tmp_path: Path) -> None:
    script = TRAIN.replace(
        'if __name__ == "__main__":',
        "def input_fn(body, content_type):\n"
        "    return [[float(x) for x in row.split()] for row in body.splitlines()]\n\n\n"
        "def output_fn(prediction, accept):\n"
        "    return ' '.join(f'{p:.3f}' for p in prediction), 'text/plain'\n\n\n"
        'if __name__ == "__main__":',
    )
    version, est = framework_model(tmp_path, script)
    s = RuntimeRegistry().load(version)
    body, ctype = s.invoke(b"1 2\n3 4", "text/csv", "text/plain")
    assert ctype == "text/plain"
    assert body.decode() == " ".join(f"{p:.3f}" for p in est.predict([[1.0, 2.0], [3.0, 4.0]]))


def test_what_the_runtime_refuses(tmp_path: Path) -> None:
    version, _ = framework_model(tmp_path / "a", "def model_fn(d):\n    return {'w': 1}\n")
    with pytest.raises(ConfigError, match=r"train.py defines no predict_fn and the model .*\(dict\) has no predict"):
        RuntimeRegistry().load(version)
    version, _ = framework_model(tmp_path / "b", "def predict_fn(d, m):\n    return d\n")
    with pytest.raises(ConfigError, match=r"train\.py must define model_fn"):
        RuntimeRegistry().load(version)
    version, _ = framework_model(tmp_path / "c", entry="../model.joblib")
    with pytest.raises(ConfigError, match="leaves its code folder"):
        RuntimeRegistry().load(version)
    version, _ = framework_model(tmp_path / "d", entry="serve.py")
    with pytest.raises(ConfigError, match=r"no code/serve.py in .*entry_point"):
        RuntimeRegistry().load(version)


def test_python_path_must_name_absolute_folders(tmp_path: Path) -> None:
    version, _ = framework_model(tmp_path)
    manifest = version / "servekit.toml"
    manifest.write_text('runtime = "python"\nentry_point = "train.py"\npython_path = ["libs"]\n')
    with pytest.raises(ConfigError, match="python_path must be a list of absolute folder paths"):
        RuntimeRegistry().load(version)
    manifest.write_text(f'runtime = "python"\nentry_point = "train.py"\npython_path = ["{tmp_path}/none"]\n')
    with pytest.raises(ConfigError, match="is not a folder"):
        RuntimeRegistry().load(version)
