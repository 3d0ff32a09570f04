"""SageMaker's first-party Linear Learner (the ``linear-learner`` image; the SDK's ``LinearLearner``), trained and
served here.

Training reads the ``train`` channel (RecordIO-protobuf with each record's ``label``, the SDK's ``RecordSet``, or
CSV whose first column is the label), an optional ``validation`` channel (early stopping, model selection and the
binary classifier's threshold) and an optional ``test`` channel, checks the hyperparameters as SageMaker does
(``predictor_type`` required; ``num_classes`` for ``multiclass_classifier``), and fits a linear model by mini-batch
gradient descent: ``epochs`` passes over the rows in ``mini_batch_size`` batches (seeded shuffles), the ``loss``
(``logistic``/``hinge_loss`` for binary, ``softmax_loss`` for multiclass, the regression losses for ``regressor``),
``optimizer`` (``adam``, ``sgd`` with ``momentum``, ``rmsprop``), ``learning_rate`` with the step scheduler, ``wd``
(L2) and ``l1`` (a proximal step), features and labels normalised as ``normalize_*``/``unbias_*`` say,
``positive_example_weight_mult`` / ``balance_multiclass_weights``, and early stopping on the validation (else
training) loss. ``num_models`` models with learning rates around ``learning_rate`` are trained and the best by the
model selection criterion on the validation (else training) rows is kept; a binary classifier's threshold is the one
that maximises ``binary_classifier_model_selection_criteria`` on ``num_calibration_samples`` of those rows.

Metrics (``test:*`` and ``validation:*``, the tuner's objectives): ``objective_loss`` and, by predictor type,
``binary_classification_accuracy``, ``binary_f_beta``, ``precision``, ``recall``, ``roc_auc_score``;
``absolute_loss``, ``mse``, ``rmse``, ``r2``; ``multiclass_accuracy``, ``multiclass_top_k_accuracy``, ``dcg``,
``macro_f_beta``, ``macro_precision``, ``macro_recall``.

Where it differs from AWS's: the whole channel is read into memory and the ``auto`` values are servekit's (below), so
the numbers are not AWS's; ``num_point_for_scaler`` rows estimate the scaling as on AWS. The model (``model_algo-1``)
is servekit's: the weights with the normalisation folded in, as a NumPy archive (AWS's is an MXNet file).

Serving (:func:`predict`): each record's ``score`` (the positive class's probability with ``logistic``, the raw
margin with ``hinge_loss``; each class's probability for multiclass; the prediction for a regressor) and, for
classifiers, its ``predicted_label``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import first_party as fp
from servekit.services.training.algorithms import supervised_metrics as sm

Array = npt.NDArray[np.float64]
MODEL_FILE = "model_algo-1"
AUTO = "auto"
BINARY, MULTICLASS, REGRESSOR = "binary_classifier", "multiclass_classifier", "regressor"
LOSSES = {
    BINARY: ("logistic", "hinge_loss"),
    MULTICLASS: ("softmax_loss",),
    REGRESSOR: (
        "squared_loss",
        "absolute_loss",
        "eps_insensitive_squared_loss",
        "eps_insensitive_absolute_loss",
        "quantile_loss",
        "huber_loss",
    ),
}
# servekit's "auto" values (AWS's container chooses its own, partly by trying several)
AUTO_LEARNING_RATE = 0.1
AUTO_NUM_MODELS = 4
AUTO_LR_FACTOR = 0.99
AUTO_MIN_LR = 1e-5


def _auto(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    return lambda text: AUTO if text.lower() == AUTO else parse(text)


def _number(
    low: float, high: float = math.inf, open_low: bool = False, open_high: bool = False
) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = float(text)
        if (
            not math.isfinite(value)
            or value < low
            or value > high
            or (open_low and value == low)
            or (open_high and value == high)
        ):
            left, right = "(" if open_low else "[", ")" if open_high else "]"
            raise ValueError(f"a number in {left}{low}, {high}{right}")
        return value

    return parse


def _weight_mult(text: str) -> Any:
    if text.lower() in (AUTO, "balanced"):
        return text.lower()
    return _number(0.0, open_low=True)(text)


POSITIVE = _number(0.0, open_low=True)
NONNEGATIVE = _number(0.0)
UNIT_OPEN = _number(0.0, 1.0, open_low=True, open_high=True)
HYPERPARAMETERS = {
    "predictor_type": fp.Param(fp.one_of(BINARY, MULTICLASS, REGRESSOR), required=True),
    "feature_dim": fp.Param(_auto(fp.integer(1)), AUTO),
    "num_classes": fp.Param(fp.integer(3, 1_000_000), None),
    "accuracy_top_k": fp.Param(fp.integer(1, 1_000_000), 3),
    "balance_multiclass_weights": fp.Param(fp.boolean, False),
    "beta_1": fp.Param(_auto(_number(0.0, 1.0, open_high=True)), AUTO),
    "beta_2": fp.Param(_auto(_number(0.0, 1.0, open_high=True)), AUTO),
    "bias_lr_mult": fp.Param(_auto(POSITIVE), AUTO),
    "bias_wd_mult": fp.Param(_auto(NONNEGATIVE), AUTO),
    "binary_classifier_model_selection_criteria": fp.Param(
        fp.one_of(
            "accuracy",
            "f_beta",
            "f1",
            "precision_at_target_recall",
            "recall_at_target_precision",
            "cross_entropy_loss",
            "loss_function",
        ),
        "accuracy",
    ),
    "early_stopping_patience": fp.Param(fp.integer(1), 3),
    "early_stopping_tolerance": fp.Param(POSITIVE, 0.001),
    "epochs": fp.Param(fp.integer(1), 15),
    "f_beta": fp.Param(POSITIVE, 1.0),
    "huber_delta": fp.Param(NONNEGATIVE, 1.0),
    "init_bias": fp.Param(_number(-math.inf), 0.0),
    "init_method": fp.Param(fp.one_of("uniform", "normal"), "uniform"),
    "init_scale": fp.Param(POSITIVE, 0.07),
    "init_sigma": fp.Param(POSITIVE, 0.01),
    "l1": fp.Param(_auto(NONNEGATIVE), AUTO),
    "learning_rate": fp.Param(_auto(POSITIVE), AUTO),
    "loss": fp.Param(fp.one_of(AUTO, *(loss for losses in LOSSES.values() for loss in losses)), AUTO),
    "loss_insensitivity": fp.Param(POSITIVE, 0.01),
    "lr_scheduler_factor": fp.Param(_auto(UNIT_OPEN), AUTO),
    "lr_scheduler_minimum_lr": fp.Param(_auto(POSITIVE), AUTO),
    "lr_scheduler_step": fp.Param(_auto(fp.integer(1)), AUTO),
    "margin": fp.Param(NONNEGATIVE, 1.0),
    "mini_batch_size": fp.Param(fp.integer(1), 1000),
    "momentum": fp.Param(_auto(_number(0.0, 1.0, open_high=True)), AUTO),
    "normalize_data": fp.Param(_auto(fp.boolean), AUTO),
    "normalize_label": fp.Param(_auto(fp.boolean), AUTO),
    "num_calibration_samples": fp.Param(fp.integer(1), 10_000_000),
    "num_models": fp.Param(_auto(fp.integer(1)), AUTO),
    "num_point_for_scaler": fp.Param(fp.integer(1), 10_000),
    "optimizer": fp.Param(fp.one_of(AUTO, "sgd", "adam", "rmsprop"), AUTO),
    "positive_example_weight_mult": fp.Param(_weight_mult, 1.0),
    "quantile": fp.Param(UNIT_OPEN, 0.5),
    "target_precision": fp.Param(UNIT_OPEN, 0.8),
    "target_recall": fp.Param(UNIT_OPEN, 0.8),
    "unbias_data": fp.Param(_auto(fp.boolean), AUTO),
    "unbias_label": fp.Param(_auto(fp.boolean), AUTO),
    "use_bias": fp.Param(fp.boolean, True),
    "use_lr_scheduler": fp.Param(fp.boolean, True),
    "wd": fp.Param(_auto(NONNEGATIVE), AUTO),
}


@dataclass
class Model:
    """What the endpoint serves: ``scores = x @ weights + bias`` in the label's own units (the normalisation
    folded in), how scores read (``loss``), and a binary classifier's threshold."""

    predictor_type: str
    loss: str
    weights: Array  # (features, outputs): one output, or one per class
    bias: Array  # (outputs,)
    threshold: float = 0.5


def settle(hp: dict[str, Any]) -> dict[str, Any]:
    """The hyperparameters with their ``auto`` values and the checks across them (a ClientError naming them)."""
    kind = hp["predictor_type"]
    if kind == MULTICLASS and hp["num_classes"] is None:
        raise fp.AlgorithmError("num_classes is required when predictor_type is multiclass_classifier")
    loss = LOSSES[kind][0] if hp["loss"] == AUTO else hp["loss"]
    if loss not in LOSSES[kind]:
        raise fp.AlgorithmError(f"loss {loss} is not one for a {kind}: use one of {', '.join(LOSSES[kind])}")
    out = dict(hp, loss=loss)
    out["optimizer"] = "adam" if hp["optimizer"] == AUTO else hp["optimizer"]
    defaults = {
        "learning_rate": AUTO_LEARNING_RATE,
        "wd": 0.0,
        "l1": 0.0,
        "momentum": 0.0,
        "beta_1": 0.9,
        "beta_2": 0.999,
        "bias_lr_mult": 1.0,
        "bias_wd_mult": 0.0,
        "lr_scheduler_factor": AUTO_LR_FACTOR,
        "lr_scheduler_minimum_lr": AUTO_MIN_LR,
        "num_models": AUTO_NUM_MODELS,
        "normalize_data": True,
        "normalize_label": kind == REGRESSOR,
        "unbias_data": bool(hp["use_bias"]),
        "unbias_label": kind == REGRESSOR and bool(hp["use_bias"]),
    }
    for name, value in defaults.items():
        if out[name] == AUTO:
            out[name] = value
    if kind != REGRESSOR:  # label scaling is for regression only, as on AWS
        out["normalize_label"] = out["unbias_label"] = False
    return out


def check_labels(y: Array, hp: dict[str, Any], channel: str) -> None:
    kind = hp["predictor_type"]
    if not np.all(np.isfinite(y)):
        raise fp.AlgorithmError(f"The {channel} channel has labels that are not numbers")
    if kind == BINARY and not np.all((y == 0) | (y == 1)):
        raise fp.AlgorithmError(f"The {channel} channel's labels must be 0 or 1 for a binary_classifier")
    if kind == MULTICLASS and not np.all((y == np.round(y)) & (y >= 0) & (y < hp["num_classes"])):
        raise fp.AlgorithmError(
            f"The {channel} channel's labels must be integers from 0 to num_classes - 1 ({hp['num_classes'] - 1})"
        )


# ---- losses: each gives the per-row loss and its derivative by the scores ------------------------------------------
def loss_and_grad(z: Array, y: Array, hp: dict[str, Any], label_scale: float = 1.0) -> tuple[Array, Array]:
    """Per-row loss (``z``: scores (rows, outputs); ``y``: labels (rows,)) and d loss / d z. ``label_scale``: the
    labels' normalising scale, which the regression losses' own widths (insensitivity, delta) are divided by."""
    loss = hp["loss"]
    if loss == "logistic":
        s = z[:, 0]
        value = np.logaddexp(0.0, s) - y * s
        return value, (_sigmoid(s) - y)[:, None]
    if loss == "hinge_loss":
        sign = 2 * y - 1
        slack = hp["margin"] - sign * z[:, 0]
        return np.maximum(slack, 0.0), np.where(slack > 0, -sign, 0.0)[:, None]
    if loss == "softmax_loss":
        shifted = z - z.max(1, keepdims=True)
        logsum = np.log(np.exp(shifted).sum(1))
        labels = y.astype(np.int64)
        grad = np.exp(shifted - logsum[:, None])
        value = logsum - shifted[np.arange(len(y)), labels]
        grad[np.arange(len(y)), labels] -= 1.0
        return value, grad
    r = z[:, 0] - y
    eps = hp["loss_insensitivity"] / label_scale
    if loss == "squared_loss":
        value, g = r * r, 2 * r
    elif loss == "absolute_loss":
        value, g = np.abs(r), np.sign(r)
    elif loss == "eps_insensitive_squared_loss":
        over = np.maximum(np.abs(r) - eps, 0.0)
        value, g = over * over, 2 * over * np.sign(r)
    elif loss == "eps_insensitive_absolute_loss":
        value, g = np.maximum(np.abs(r) - eps, 0.0), np.where(np.abs(r) > eps, np.sign(r), 0.0)
    elif loss == "quantile_loss":
        q = hp["quantile"]
        value, g = np.where(r < 0, -q * r, (1 - q) * r), np.where(r < 0, -q, 1 - q)
    else:  # huber_loss
        delta = hp["huber_delta"] / label_scale
        small = np.abs(r) <= delta
        value = np.where(small, 0.5 * r * r, delta * (np.abs(r) - 0.5 * delta))
        g = np.clip(r, -delta, delta)
    return value, g[:, None]


def _sigmoid(z: Array) -> Array:
    return np.asarray(0.5 * (1.0 + np.tanh(0.5 * z)))


def _softmax(z: Array) -> Array:
    e = np.exp(z - z.max(1, keepdims=True))
    return np.asarray(e / e.sum(1, keepdims=True))


def _row_weights(y: Array, hp: dict[str, Any]) -> Array:
    """Each training row's weight: ``positive_example_weight_mult`` for a binary classifier's positives,
    ``balance_multiclass_weights``' inverse class frequencies."""
    w = np.ones(len(y))
    if hp["predictor_type"] == BINARY:
        mult = hp["positive_example_weight_mult"]
        positives = float((y == 1).sum())
        if mult == "balanced":
            mult = (len(y) - positives) / positives if positives else 1.0
        elif mult == AUTO:
            mult = 1.0
        w[y == 1] = float(mult)
    elif hp["predictor_type"] == MULTICLASS and hp["balance_multiclass_weights"]:
        counts = np.bincount(y.astype(np.int64), minlength=hp["num_classes"]).astype(np.float64)
        present = counts > 0
        per_class = np.zeros_like(counts)
        per_class[present] = len(y) / (present.sum() * counts[present])
        w = per_class[y.astype(np.int64)]
    return w


# ---- training ------------------------------------------------------------------------------------------------------
@dataclass
class _Scaling:
    mean: Array
    scale: Array
    label_mean: float = 0.0
    label_scale: float = 1.0


def _scaling(x: Array, y: Array, hp: dict[str, Any]) -> _Scaling:
    sample = x[: hp["num_point_for_scaler"]]
    labels = y[: hp["num_point_for_scaler"]]
    mean = sample.mean(0) if hp["unbias_data"] else np.zeros(x.shape[1])
    scale = np.ones(x.shape[1])
    if hp["normalize_data"]:
        std = sample.std(0)
        scale = np.where(std > 0, std, 1.0)
    label_mean = float(labels.mean()) if hp["unbias_label"] else 0.0
    label_scale = float(labels.std()) if hp["normalize_label"] else 1.0
    return _Scaling(mean, scale, label_mean, label_scale if label_scale > 0 else 1.0)


class _Optimizer:
    """One parameter array's ``sgd`` (with momentum), ``adam`` or ``rmsprop`` steps."""

    def __init__(self, shape: tuple[int, ...], hp: dict[str, Any]) -> None:
        self.kind = hp["optimizer"]
        self.hp = hp
        self.m = np.zeros(shape)
        self.v = np.zeros(shape)
        self.t = 0

    def step(self, grad: Array, lr: float) -> Array:
        hp = self.hp
        self.t += 1
        if self.kind == "adam":
            b1, b2 = hp["beta_1"], hp["beta_2"]
            self.m = b1 * self.m + (1 - b1) * grad
            self.v = b2 * self.v + (1 - b2) * grad * grad
            m_hat = self.m / (1 - b1**self.t)
            v_hat = self.v / (1 - b2**self.t)
            return np.asarray(-lr * m_hat / (np.sqrt(v_hat) + 1e-8))
        if self.kind == "rmsprop":
            self.v = 0.9 * self.v + 0.1 * grad * grad
            self.m = hp["momentum"] * self.m - lr * grad / (np.sqrt(self.v) + 1e-8)
            return self.m
        self.m = hp["momentum"] * self.m - lr * grad
        return self.m


def _train_one(
    x: Array,
    y: Array,
    hp: dict[str, Any],
    lr: float,
    rng: np.random.Generator,
    held_out: tuple[Array, Array] | None,
    label_scale: float,
) -> tuple[Array, Array]:
    """One model's weights and bias (on the normalised data): mini-batch descent with early stopping."""
    outputs = hp["num_classes"] if hp["predictor_type"] == MULTICLASS else 1
    shape = (x.shape[1], outputs)
    if hp["init_method"] == "uniform":
        w = rng.uniform(-hp["init_scale"], hp["init_scale"], size=shape)
    else:
        w = rng.normal(0.0, hp["init_sigma"], size=shape)
    b = np.full(outputs, float(hp["init_bias"]) if hp["use_bias"] else 0.0)
    row_w = _row_weights(y, hp)
    opt_w, opt_b = _Optimizer(w.shape, hp), _Optimizer(b.shape, hp)
    batch = min(hp["mini_batch_size"], len(x))
    per_epoch = math.ceil(len(x) / batch)
    step_every = per_epoch if hp["lr_scheduler_step"] == AUTO else hp["lr_scheduler_step"]
    eval_x, eval_y = held_out if held_out is not None else (x, y)
    best, best_loss, stale, steps = (w.copy(), b.copy()), math.inf, 0, 0
    for _ in range(hp["epochs"]):
        order = rng.permutation(len(x))
        for start in range(0, len(x), batch):
            rows = order[start : start + batch]
            rate = lr
            if hp["use_lr_scheduler"]:
                decayed = lr * hp["lr_scheduler_factor"] ** (steps // step_every)
                rate = min(lr, max(decayed, hp["lr_scheduler_minimum_lr"]))
            z = x[rows] @ w + b
            _, g = loss_and_grad(z, y[rows], hp, label_scale)
            g = g * row_w[rows][:, None] / row_w[rows].sum()
            gw = x[rows].T @ g + hp["wd"] * w
            w = w + opt_w.step(gw, rate)
            if hp["l1"] > 0:  # the proximal step of the L1 penalty
                w = np.sign(w) * np.maximum(np.abs(w) - rate * hp["l1"], 0.0)
            if hp["use_bias"]:
                gb = g.sum(0) + hp["wd"] * hp["bias_wd_mult"] * b
                b = b + opt_b.step(gb, rate * hp["bias_lr_mult"])
            steps += 1
        if not (np.all(np.isfinite(w)) and np.all(np.isfinite(b))):
            break  # diverged: keep the last finite model
        epoch_loss = float(np.mean(loss_and_grad(eval_x @ w + b, eval_y, hp, label_scale)[0]))
        if epoch_loss < best_loss * (1 - hp["early_stopping_tolerance"]) or not math.isfinite(best_loss):
            stale = 0
        else:
            stale += 1
        if epoch_loss < best_loss:
            best, best_loss = (w.copy(), b.copy()), epoch_loss
        if stale >= hp["early_stopping_patience"]:
            break
    return best


def _fold(w: Array, b: Array, scaling: _Scaling, hp: dict[str, Any]) -> tuple[Array, Array]:
    """Weights and bias on the raw features and in the label's units."""
    weights = w / scaling.scale[:, None]
    bias = b - scaling.mean @ weights
    return weights * scaling.label_scale, bias * scaling.label_scale + scaling.label_mean


def scores(x: Array, model: Model) -> Array:
    """Each row's score: (rows,) for binary and regression, (rows, classes) for multiclass."""
    if x.ndim != 2 or x.shape[1] != model.weights.shape[0]:
        raise ValueError(f"each record needs {model.weights.shape[0]} features, not {x.shape[-1] if x.size else 0}")
    z = x @ model.weights + model.bias
    if model.predictor_type == MULTICLASS:
        return _softmax(z)
    if model.loss == "logistic":
        return _sigmoid(z[:, 0])
    return np.asarray(z[:, 0])


def predicted_labels(score: Array, model: Model) -> Array:
    if model.predictor_type == MULTICLASS:
        return np.asarray(score.argmax(1), dtype=np.float64)
    return np.asarray(score > model.threshold, dtype=np.float64)


def metrics(x: Array, y: Array, model: Model, hp: dict[str, Any]) -> dict[str, float]:
    """A channel's metrics under AWS's names (``objective_loss`` in the label's units)."""
    z = x @ model.weights + model.bias
    out = {"objective_loss": float(np.mean(loss_and_grad(z, y, hp)[0]))}
    s = scores(x, model)
    if model.predictor_type == BINARY:
        out.update(sm.binary(y, s, predicted_labels(s, model), hp["f_beta"]))
    elif model.predictor_type == MULTICLASS:
        out.update(sm.multiclass(y, s, hp["accuracy_top_k"], hp["f_beta"]))
    else:
        out.update(sm.regression(y, s))
    return {k: v if math.isfinite(v) else 0.0 for k, v in out.items()}


def _select(model: Model, x: Array, y: Array, hp: dict[str, Any]) -> tuple[Model, float]:
    """A trained model with its threshold calibrated (binary) and its value by the model selection criterion on
    these rows (higher is better)."""
    if model.predictor_type != BINARY:
        return model, -metrics(x, y, model, hp)["objective_loss"]
    criterion = hp["binary_classifier_model_selection_criteria"]
    rows = slice(0, hp["num_calibration_samples"])
    s = scores(x[rows], model)
    if criterion in ("cross_entropy_loss", "loss_function"):
        model.threshold = 0.5 if model.loss == "logistic" else 0.0
        if criterion == "cross_entropy_loss" and model.loss == "logistic":
            return model, -sm.cross_entropy(y[rows], s)
        return model, -metrics(x, y, model, hp)["objective_loss"]
    model.threshold, value = sm.calibrate(
        y[rows], s, criterion, hp["f_beta"], hp["target_recall"], hp["target_precision"]
    )
    return model, value


def fit(x: Array, y: Array, hp: dict[str, Any], validation: tuple[Array, Array] | None = None, seed: int = 0) -> Model:
    """The best of ``num_models`` linear models (``hp`` as :func:`settle` makes it)."""
    rng = np.random.default_rng(seed)
    scaling = _scaling(x, y, hp)
    xs = (x - scaling.mean) / scaling.scale
    ys = (y - scaling.label_mean) / scaling.label_scale
    held = None
    if validation is not None:
        vx, vy = validation
        held = ((vx - scaling.mean) / scaling.scale, (vy - scaling.label_mean) / scaling.label_scale)
    select_x, select_y = validation if validation is not None else (x, y)
    best: tuple[Model, float] | None = None
    for i in range(hp["num_models"]):
        # model 0 takes learning_rate itself, the others rates around it (lr/3, 3lr, lr/9, ...)
        lr = hp["learning_rate"] * 3.0 ** ((-1) ** i * math.ceil(i / 2)) if i else hp["learning_rate"]
        w, b = _train_one(xs, ys, hp, lr, rng, held, scaling.label_scale)
        weights, bias = _fold(w, b, scaling, hp)
        candidate = _select(Model(hp["predictor_type"], hp["loss"], weights, bias), select_x, select_y, hp)
        if best is None or candidate[1] > best[1]:
            best = candidate
    assert best is not None
    return best[0]


# ---- the model file ------------------------------------------------------------------------------------------------
def save(model: Model, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / MODEL_FILE).open("wb") as f:
        np.savez(
            f,
            predictor_type=np.array(model.predictor_type),
            loss=np.array(model.loss),
            weights=model.weights,
            bias=model.bias,
            threshold=np.array(model.threshold),
        )


def load(folder: Path) -> Model:
    with (folder / MODEL_FILE).open("rb") as f, np.load(f, allow_pickle=False) as z:
        return Model(
            predictor_type=str(z["predictor_type"]),
            loss=str(z["loss"]),
            weights=np.asarray(z["weights"], dtype=np.float64),
            bias=np.asarray(z["bias"], dtype=np.float64),
            threshold=float(z["threshold"]),
        )


def predict(x: Array, model: Model) -> list[dict[str, Any]]:
    """Each record's ``score`` and, for classifiers, ``predicted_label``, as AWS answers them."""
    s = scores(x, model)
    if model.predictor_type == REGRESSOR:
        return [{"score": float(v)} for v in s]
    labels = predicted_labels(s, model)
    if model.predictor_type == MULTICLASS:
        return [{"score": [float(p) for p in row], "predicted_label": int(k)} for row, k in zip(s, labels, strict=True)]
    return [{"score": float(v), "predicted_label": int(k)} for v, k in zip(s, labels, strict=True)]


def _checked(
    found: tuple[Array, Array] | None, hp: dict[str, Any], name: str, width: int
) -> tuple[Array, Array] | None:
    if found is None:
        return None
    x, y = found
    if x.shape[1] != width:
        raise fp.AlgorithmError(f"The {name} channel's records have {x.shape[1]} features, the train channel's {width}")
    check_labels(y, hp, name)
    return x, y


def main() -> None:
    hp = settle(fp.hyperparameters(fp.raw_hyperparameters(), HYPERPARAMETERS))
    train = fp.labelled_channel("train")
    assert train is not None
    x, y = train
    if hp["feature_dim"] != AUTO:
        fp.check_width(x, hp["feature_dim"], "train")
    check_labels(y, hp, "train")
    validation = _checked(fp.labelled_channel("validation", required=False), hp, "validation", x.shape[1])
    test = _checked(fp.labelled_channel("test", required=False), hp, "test", x.shape[1])
    model = fit(x, y, hp, validation)
    for name, value in metrics(x, y, model, hp).items():
        fp.say(f"#train_score (algo-1) : ('{name}', {value})")
    scored = {name: metrics(*data, model, hp) for name, data in (("validation", validation), ("test", test)) if data}
    fp.report_channels(scored)
    save(model, fp.MODEL_DIR)


if __name__ == "__main__":
    raise SystemExit(fp.run(main))
