"""Native XGBoost (.json/.ubj) and LightGBM (.txt) boosters: trained here on a small synthetic dataset, saved in
their frameworks' own formats, served with the sklearn runtime's tensors and signatures, and answering what the
framework's own sklearn wrapper answers in process (also over TF Serving REST, in process)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import joblib
import lightgbm as lgb
import numpy as np
import pytest
import xgboost as xgb
from numpy.testing import assert_allclose, assert_array_equal
from starlette.testclient import TestClient

from servekit.config.models import ModelConfig, RuntimeOptions, ServerConfig
from servekit.errors import ConfigError
from servekit.serving.runtime.base import concurrency_of
from servekit.serving.runtime.registry import RuntimeRegistry
from servekit.testing.app_client import LOOPBACK, serving_app, wait_until_loaded
from servekit.types import CLASSIFY_METHOD, REGRESS_METHOD

RNG = np.random.default_rng(7)
X = RNG.normal(size=(120, 4))
Y_BINARY = (X[:, 0] + 0.5 * X[:, 1] > 0).astype(int)
Y_MULTI = np.digitize(X[:, 0] - X[:, 2], [-0.7, 0.7])  # three classes
Y_REG = 2.0 * X[:, 0] - X[:, 3] + RNG.normal(scale=0.1, size=len(X))
ROWS = X[:7]


def _save(directory: Path, write: Any) -> Path:
    directory.mkdir(parents=True)
    write(directory)
    return directory


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Any]]:
    """Each model's version directory and the fitted sklearn-API estimator it was saved from."""
    base = tmp_path_factory.mktemp("boosters")
    small = {"n_estimators": 8, "max_depth": 3}
    fitted = {
        "xgb_binary": xgb.XGBClassifier(**small).fit(X, Y_BINARY),
        "xgb_multi": xgb.XGBClassifier(**small).fit(X, Y_MULTI),
        "xgb_softmax": xgb.XGBClassifier(objective="multi:softmax", **small).fit(X, Y_MULTI),
        "xgb_reg": xgb.XGBRegressor(**small).fit(X, Y_REG),
        "lgb_binary": lgb.LGBMClassifier(n_estimators=8, min_child_samples=5, verbose=-1).fit(X, Y_BINARY),
        "lgb_multi": lgb.LGBMClassifier(n_estimators=8, min_child_samples=5, verbose=-1).fit(X, Y_MULTI),
        "lgb_reg": lgb.LGBMRegressor(n_estimators=8, min_child_samples=5, verbose=-1).fit(X, Y_REG),
    }
    out = {}
    for name, est in fitted.items():
        if name.startswith("xgb"):
            suffix = ".ubj" if name == "xgb_multi" else ".json"  # both of XGBoost's formats
            out[name] = (_save(base / name / "1", lambda d, e=est, s=suffix: e.save_model(d / f"model{s}")), est)
        else:
            out[name] = (_save(base / name / "1", lambda d, e=est: e.booster_.save_model(str(d / "model.txt"))), est)
    return out


@pytest.mark.parametrize(
    ("name", "runtime"), [("xgb_binary", "xgboost"), ("xgb_multi", "xgboost"), ("lgb_multi", "lightgbm")]
)
def test_chosen_from_the_files(models: dict[str, tuple[Path, Any]], name: str, runtime: str) -> None:
    assert RuntimeRegistry().choose(models[name][0]).name == runtime


def test_other_json_and_txt_files_are_not_taken_for_models(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text('{"threshold": 0.5}')
    (tmp_path / "README.txt").write_text("tree-based model, see docs\n")
    with pytest.raises(ConfigError, match="no runtime recognises the files"):
        RuntimeRegistry().choose(tmp_path)


@pytest.mark.parametrize("name", ["xgb_binary", "xgb_multi", "xgb_softmax", "lgb_binary", "lgb_multi"])
def test_classifiers_answer_what_the_framework_does(models: dict[str, tuple[Path, Any]], name: str) -> None:
    path, est = models[name]
    s = RuntimeRegistry().load(path)
    probs = s.predict("predict_proba", {"inputs": ROWS})["probabilities"]
    if name == "xgb_softmax":  # multi:softmax predicts labels only; its probabilities are softmax(margins)
        margins = est.get_booster().predict(xgb.DMatrix(ROWS), output_margin=True)
        expected = np.exp(margins) / np.exp(margins).sum(axis=1, keepdims=True)
    else:
        expected = est.predict_proba(ROWS)
    assert_allclose(probs, expected, rtol=1e-6, atol=1e-7)
    assert_array_equal(s.predict("serving_default", {"inputs": ROWS})["predictions"], est.predict(ROWS))
    assert_allclose(s.predict("classify", {"inputs": ROWS})["probabilities"], probs)
    k = len(est.classes_)
    assert s.signatures["classify"].method == CLASSIFY_METHOD
    assert s.signatures["classify"].class_labels == tuple(str(i) for i in range(k))
    assert s.signatures["predict_proba"].outputs[0].shape == (-1, k)


@pytest.mark.parametrize("name", ["xgb_reg", "lgb_reg"])
def test_regressors_answer_what_the_framework_does(models: dict[str, tuple[Path, Any]], name: str) -> None:
    path, est = models[name]
    s = RuntimeRegistry().load(path)
    assert set(s.signatures) == {"serving_default", "predict", "regress"}
    assert_allclose(s.predict("predict", {"inputs": ROWS})["predictions"], est.predict(ROWS), rtol=1e-6)
    values = s.predict("regress", {"inputs": ROWS})["predictions"]
    assert values.dtype == np.float64 and values.shape == (len(ROWS),)
    assert_allclose(values, est.predict(ROWS), rtol=1e-6)
    assert s.signatures["regress"].method == REGRESS_METHOD


@pytest.mark.parametrize("name", ["xgb_multi", "lgb_reg"])
def test_same_signatures_as_the_sklearn_runtime_on_the_same_model(
    models: dict[str, tuple[Path, Any]], name: str, tmp_path: Path
) -> None:
    path, est = models[name]
    joblib.dump(est, tmp_path / "model.joblib")
    via_joblib = RuntimeRegistry().load(tmp_path)
    native = RuntimeRegistry().load(path)

    def described(sigs: Any) -> dict[str, Any]:
        return {
            n: ([(t.name, t.shape) for t in s.inputs], [t.name for t in s.outputs], s.method) for n, s in sigs.items()
        }

    assert described(native.signatures) == described(via_joblib.signatures)
    sig = "predict_proba" if name == "xgb_multi" else "regress"
    out = next(iter(native.signatures[sig].outputs)).name
    assert_allclose(
        native.predict(sig, {"inputs": ROWS})[out], via_joblib.predict(sig, {"inputs": ROWS})[out], rtol=1e-6
    )


def test_manifest_names_features_and_classes(models: dict[str, tuple[Path, Any]], tmp_path: Path) -> None:
    path, _ = models["lgb_multi"]
    version = tmp_path / "1"
    version.mkdir()
    (version / "model.txt").write_bytes((path / "model.txt").read_bytes())
    (version / "servekit.toml").write_text('feature_names = ["a", "b", "c", "d"]\nclass_labels = ["lo", "mid", "hi"]\n')
    sig = RuntimeRegistry().load(version).signatures["classify"]
    assert sig.feature_names == ("a", "b", "c", "d")
    assert sig.class_labels == ("lo", "mid", "hi")
    (version / "servekit.toml").write_text('class_labels = ["lo", "hi"]\n')
    with pytest.raises(ConfigError, match="class_labels names 2 classes; the model has 3"):
        RuntimeRegistry().load(version)


def test_threads_and_gil_are_declared(models: dict[str, tuple[Path, Any]]) -> None:
    for name in ("xgb_binary", "lgb_binary"):
        s = RuntimeRegistry().load(models[name][0], options=RuntimeOptions(intra_op_threads=1))
        assert concurrency_of(s).releases_gil
        assert concurrency_of(s).threads == 1
    onnx_like_default = concurrency_of(object())
    assert (onnx_like_default.releases_gil, onnx_like_default.threads) == (False, 1)


def test_a_corrupt_booster_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "model.json").write_text('{"learner": {"broken": true}}')
    with pytest.raises(ConfigError, match=r"cannot load model.json"):
        RuntimeRegistry().load(tmp_path)


# ---- over TF Serving REST, in process ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(models: dict[str, tuple[Path, Any]]) -> Iterator[TestClient]:
    configs = tuple(ModelConfig(n, str(models[n][0].parent)) for n in ("xgb_multi", "lgb_reg"))
    app = serving_app(ServerConfig(models=configs, file_system_poll_wait_seconds=0))
    with TestClient(app, raise_server_exceptions=False, client=LOOPBACK) as c:
        wait_until_loaded(c)
        yield c


def test_rest_predict_classify_regress(client: TestClient, models: dict[str, tuple[Path, Any]]) -> None:
    xgb_est, lgb_est = models["xgb_multi"][1], models["lgb_reg"][1]
    rows = ROWS.tolist()
    r = client.post("/v1/models/xgb_multi:predict", json={"instances": rows, "signature_name": "predict_proba"})
    assert r.status_code == 200, r.text
    assert_allclose(np.asarray(r.json()["predictions"]), xgb_est.predict_proba(ROWS), rtol=1e-6)
    r = client.post("/v1/models/xgb_multi:classify", json={"examples": [{"inputs": row} for row in rows]})
    assert r.status_code == 200, r.text
    scores = [[score for _, score in result] for result in r.json()["results"]]
    assert_allclose(scores, xgb_est.predict_proba(ROWS), rtol=1e-6)
    r = client.post("/v1/models/lgb_reg:regress", json={"examples": [{"inputs": row} for row in rows]})
    assert r.status_code == 200, r.text
    assert_allclose(r.json()["results"], lgb_est.predict(ROWS), rtol=1e-6)
    meta = client.get("/v1/models/lgb_reg/metadata").json()
    assert meta["metadata"]["signature_def"]["signature_def"]["regress"]["method_name"] == REGRESS_METHOD
    bad = client.post("/v1/models/lgb_reg:predict", json={"instances": [[1.0, 2.0]]})
    assert bad.status_code == 400 and "inputs: FP64[-1,4]" in bad.text


def test_sagemakers_xgboost_model_file_is_read_and_an_older_format_is_named(tmp_path: Path) -> None:
    """The built-in algorithm's artefact holds ``xgboost-model`` (no suffix; UBJSON inside when servekit's training
    wrote it): it loads. A pickled booster of an older XGBoost (what SageMaker's 2018 containers wrote) is converted
    (test_xgboost_legacy.py); a damaged one is refused saying what it is and how to save it again."""
    x = np.random.default_rng(0).random((40, 3))
    booster = xgb.train({"objective": "reg:squarederror"}, xgb.DMatrix(x, label=x[:, 0] * 2), 4)
    new = tmp_path / "new" / "1"
    new.mkdir(parents=True)
    booster.save_model(str(new / "m.ubj"))
    (new / "m.ubj").rename(new / "xgboost-model")
    servable = RuntimeRegistry().load(new)
    assert servable is not None
    old = tmp_path / "old" / "1"
    old.mkdir(parents=True)
    (old / "xgboost-model").write_bytes(b"ccopy_reg\n_reconstructor\np0\n(cxgboost.core\nBooster\n")
    with pytest.raises(ConfigError, match="older XGBoost's binary model or a pickled booster"):
        RuntimeRegistry().load(old)
