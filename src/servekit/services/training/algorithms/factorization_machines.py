"""SageMaker's first-party Factorization Machines (the ``factorization-machines`` image; the SDK's
``FactorizationMachines``), trained and served here.

A factorization machine scores a row ``x`` as ``w0 + w·x + Σ_{i<j} <v_i, v_j> x_i x_j`` (the pairwise term computed
as ``½ Σ_f ((x·V_f)² - (x²)·(V_f²))``): a global bias, linear weights and ``num_factors`` latent factors per
feature. Training reads the ``train`` channel (RecordIO-protobuf with each record's ``label``, the SDK's
``RecordSet``, dense or sparse, or CSV whose first column is the label), checks the hyperparameters as SageMaker does
(``num_factors``, ``predictor_type`` and ``feature_dim`` required), initialises each part as its ``*_init_method``
says (``normal`` with ``*_init_sigma``, ``uniform`` with ``*_init_scale``, ``constant`` with ``*_init_value``) and
fits it by mini-batch Adam (``epochs`` passes in ``mini_batch_size`` batches, seeded shuffles) on the squared loss
(``regressor``) or the logistic loss (``binary_classifier``, labels 0 or 1), each part with its own learning rate
(``bias_lr``, ``linear_lr``, ``factors_lr``) and L2 weight decay (``bias_wd``, ``linear_wd``, ``factors_wd``); the
gradient is multiplied by ``rescale_grad`` (summed over the batch; the batch's mean when unset) and clipped to
``±clip_gradient``, and ``eps`` is Adam's epsilon, as MXNet's optimizer takes them.

A ``test`` channel is scored: ``test:rmse`` (regressor); ``test:binary_classification_accuracy``,
``test:binary_classification_cross_entropy`` and ``test:binary_f_beta`` (binary classifier), the tuner's objectives.

Where it differs from AWS's: the channel is read into memory (dense: a ``feature_dim`` of millions is not for
servekit), seeded, so a job run twice gives the same model; AWS's optimiser and initialisation details are its own,
so the numbers differ. The model (``model_algo-1``) is servekit's NumPy archive (AWS's is an MXNet file).

Serving (:func:`predict`): each record's ``score`` (the prediction of a regressor, the positive class's probability
of a binary classifier) and, for a classifier, its ``predicted_label`` (1 when the score is above 0.5).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import first_party as fp
from servekit.services.training.algorithms import supervised_metrics as sm

Array = npt.NDArray[np.float64]
MODEL_FILE = "model_algo-1"
BINARY, REGRESSOR = "binary_classifier", "regressor"
THRESHOLD = 0.5


def _number(low: float = -math.inf) -> Any:
    def parse(text: str) -> float:
        value = float(text)
        if not math.isfinite(value) or value < low:
            raise ValueError("a non-negative number" if low == 0 else "a number")
        return value

    return parse


_METHOD = fp.one_of("normal", "uniform", "constant")
HYPERPARAMETERS = {
    "feature_dim": fp.Param(fp.integer(1), required=True),
    "num_factors": fp.Param(fp.integer(1), required=True),
    "predictor_type": fp.Param(fp.one_of(BINARY, REGRESSOR), required=True),
    "epochs": fp.Param(fp.integer(1), 1),
    "mini_batch_size": fp.Param(fp.integer(1), 1000),
    "clip_gradient": fp.Param(_number(), None),
    "eps": fp.Param(_number(), None),
    "rescale_grad": fp.Param(_number(), None),
    "bias_lr": fp.Param(_number(0), 0.1),
    "linear_lr": fp.Param(_number(0), 0.001),
    "factors_lr": fp.Param(_number(0), 0.0001),
    "bias_wd": fp.Param(_number(0), 0.01),
    "linear_wd": fp.Param(_number(0), 0.001),
    "factors_wd": fp.Param(_number(0), 0.00001),
    "bias_init_method": fp.Param(_METHOD, "normal"),
    "bias_init_scale": fp.Param(_number(0), None),
    "bias_init_sigma": fp.Param(_number(0), 0.01),
    "bias_init_value": fp.Param(_number(), None),
    "linear_init_method": fp.Param(_METHOD, "normal"),
    "linear_init_scale": fp.Param(_number(0), None),
    "linear_init_sigma": fp.Param(_number(0), 0.01),
    "linear_init_value": fp.Param(_number(), None),
    "factors_init_method": fp.Param(_METHOD, "normal"),
    "factors_init_scale": fp.Param(_number(0), None),
    "factors_init_sigma": fp.Param(_number(0), 0.001),
    "factors_init_value": fp.Param(_number(), None),
}
_PARTS = ("bias", "linear", "factors")


@dataclass
class Model:
    predictor_type: str
    bias: float
    linear: Array  # (features,)
    factors: Array  # (features, num_factors)


def _init(part: str, shape: tuple[int, ...], hp: dict[str, Any], rng: np.random.Generator) -> Array:
    method = hp[f"{part}_init_method"]
    if method == "uniform":
        scale = hp[f"{part}_init_scale"]
        if scale is None:
            raise fp.AlgorithmError(f"{part}_init_scale is required when {part}_init_method is uniform")
        return rng.uniform(-scale, scale, size=shape)
    if method == "constant":
        value = hp[f"{part}_init_value"]
        if value is None:
            raise fp.AlgorithmError(f"{part}_init_value is required when {part}_init_method is constant")
        return np.full(shape, float(value))
    return rng.normal(0.0, hp[f"{part}_init_sigma"], size=shape)


def raw_scores(x: Array, bias: float, linear: Array, factors: Array) -> tuple[Array, Array]:
    """Each row's FM output and ``x @ factors`` (the pairwise term's sums, which the gradient reuses)."""
    xv = x @ factors
    pairwise = 0.5 * ((xv * xv).sum(1) - ((x * x) @ (factors * factors)).sum(1))
    return bias + x @ linear + pairwise, xv


def _sigmoid(z: Array) -> Array:
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * z)))


class _Adam:
    def __init__(self, shape: tuple[int, ...], lr: float, eps: float) -> None:
        self.lr, self.eps = lr, eps
        self.m, self.v, self.t = np.zeros(shape), np.zeros(shape), 0

    def step(self, grad: Array) -> Array:
        self.t += 1
        self.m = 0.9 * self.m + 0.1 * grad
        self.v = 0.999 * self.v + 0.001 * grad * grad
        m_hat, v_hat = self.m / (1 - 0.9**self.t), self.v / (1 - 0.999**self.t)
        return np.asarray(-self.lr * m_hat / (np.sqrt(v_hat) + self.eps))


def fit(x: Array, y: Array, hp: dict[str, Any], seed: int = 0) -> Model:
    """The factorization machine's bias, linear weights and factors (mini-batch Adam, seeded)."""
    rng = np.random.default_rng(seed)
    d, k = x.shape[1], hp["num_factors"]
    params = {
        "bias": _init("bias", (1,), hp, rng),
        "linear": _init("linear", (d,), hp, rng),
        "factors": _init("factors", (d, k), hp, rng),
    }
    eps = 1e-8 if hp["eps"] is None else float(hp["eps"])
    opts = {p: _Adam(params[p].shape, hp[f"{p}_lr"], eps) for p in _PARTS}
    batch = min(hp["mini_batch_size"], len(x))
    for _ in range(hp["epochs"]):
        order = rng.permutation(len(x))
        for start in range(0, len(x), batch):
            rows = order[start : start + batch]
            xb, yb = x[rows], y[rows]
            z, xv = raw_scores(xb, float(params["bias"][0]), params["linear"], params["factors"])
            # d loss / d z: the squared loss's residual (½ r²) or the logistic loss's p - y
            r = (_sigmoid(z) - yb) if hp["predictor_type"] == BINARY else (z - yb)
            scale = hp["rescale_grad"] if hp["rescale_grad"] is not None else 1.0 / len(rows)
            grads = {
                "bias": np.array([r.sum()]),
                "linear": xb.T @ r,
                "factors": xb.T @ (r[:, None] * xv) - params["factors"] * ((xb * xb).T @ r)[:, None],
            }
            stepped = {}
            for p in _PARTS:
                g = grads[p] * scale + hp[f"{p}_wd"] * params[p]
                if hp["clip_gradient"] is not None:
                    g = np.clip(g, -abs(hp["clip_gradient"]), abs(hp["clip_gradient"]))
                stepped[p] = params[p] + opts[p].step(g)
            if not all(np.all(np.isfinite(v)) for v in stepped.values()):
                break  # diverged (a huge learning rate): keep the last finite model
            params = stepped
    return Model(hp["predictor_type"], float(params["bias"][0]), params["linear"], params["factors"])


def scores(x: Array, model: Model) -> Array:
    if x.ndim != 2 or x.shape[1] != len(model.linear):
        raise ValueError(f"each record needs {len(model.linear)} features, not {x.shape[-1] if x.size else 0}")
    z = raw_scores(x, model.bias, model.linear, model.factors)[0]
    return _sigmoid(z) if model.predictor_type == BINARY else np.asarray(z)


def metrics(x: Array, y: Array, model: Model) -> dict[str, float]:
    s = scores(x, model)
    if model.predictor_type == REGRESSOR:
        return {"rmse": sm.regression(y, s)["rmse"]}
    binary = sm.binary(y, s, (s > THRESHOLD).astype(np.float64))
    return {
        "binary_classification_accuracy": binary["binary_classification_accuracy"],
        "binary_classification_cross_entropy": sm.cross_entropy(y, s),
        "binary_f_beta": binary["binary_f_beta"],
    }


def predict(x: Array, model: Model) -> list[dict[str, Any]]:
    s = scores(x, model)
    if model.predictor_type == REGRESSOR:
        return [{"score": float(v)} for v in s]
    return [{"score": float(v), "predicted_label": int(v > THRESHOLD)} for v in s]


def save(model: Model, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / MODEL_FILE).open("wb") as f:
        np.savez(
            f,
            predictor_type=np.array(model.predictor_type),
            bias=np.array(model.bias),
            linear=model.linear,
            factors=model.factors,
        )


def load(folder: Path) -> Model:
    with (folder / MODEL_FILE).open("rb") as f, np.load(f, allow_pickle=False) as z:
        return Model(
            predictor_type=str(z["predictor_type"]),
            bias=float(z["bias"]),
            linear=np.asarray(z["linear"], dtype=np.float64),
            factors=np.asarray(z["factors"], dtype=np.float64),
        )


def _labelled(name: str, hp: dict[str, Any], required: bool) -> tuple[Array, Array] | None:
    found = fp.labelled_channel(name, required)
    if found is None:
        return None
    x, y = found
    fp.check_width(x, hp["feature_dim"], name)
    if not np.all(np.isfinite(y)):
        raise fp.AlgorithmError(f"The {name} channel has labels that are not numbers")
    if hp["predictor_type"] == BINARY and not np.all((y == 0) | (y == 1)):
        raise fp.AlgorithmError(f"The {name} channel's labels must be 0 or 1 for a binary_classifier")
    return x, y


def main() -> None:
    hp = fp.hyperparameters(fp.raw_hyperparameters(), HYPERPARAMETERS)
    train = _labelled("train", hp, True)
    assert train is not None
    model = fit(*train, hp)
    for name, value in metrics(*train, model).items():
        fp.say(f"#train_score (algo-1) : ('{name}', {value})")
    test = _labelled("test", hp, False)
    if test is not None:
        fp.report("test", metrics(*test, model))
    save(model, fp.MODEL_DIR)


if __name__ == "__main__":
    raise SystemExit(fp.run(main))
