"""Make data -> train a small scikit-learn model -> evaluate -> condition on accuracy -> register.

    servekit up &                                               # the registry the register step writes to
    servekit pipeline run servekit.services.pipelines.examples.iris:pipeline --param MinAccuracy=0.9
    servekit lineage <the ModelPackageArn it prints>

Needs scikit-learn (``servekit[sklearn]``). The trained folder holds ``model.joblib``: as a ModelDataUrl it is
version 1 of an sklearn model, which ``servekit up`` serves as it is.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from servekit.services.pipelines import (
    GreaterThanOrEqualTo,
    Join,
    Param,
    Pipeline,
    condition,
    evaluation,
    fail,
    parameter,
    processing,
    register_model,
    training,
)
from servekit.services.pipelines.access.context import StepContext

FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]


def _csv(rows: list[list[Any]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([*FEATURES, "label"])
    writer.writerows(rows)
    return out.getvalue().encode()


def _read_csv(data: bytes) -> tuple[list[list[float]], list[int]]:
    reader = csv.reader(io.StringIO(data.decode()))
    next(reader)
    rows = list(reader)
    return [[float(v) for v in r[:-1]] for r in rows], [int(r[-1]) for r in rows]


@processing(
    name="make-data", inputs={"seed": Param("Seed"), "test_share": Param("TestShare")}, outputs=["train", "test"]
)
def make_data(ctx: StepContext, seed: int, test_share: float) -> dict[str, int]:
    """Iris (bundled with scikit-learn: nothing is downloaded), shuffled and split."""
    from sklearn.datasets import load_iris
    from sklearn.model_selection import train_test_split

    x, y = load_iris(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=test_share, random_state=seed, stratify=y)
    ctx.write(
        "train", "train.csv", _csv([[*r, int(label)] for r, label in zip(x_train.tolist(), y_train, strict=True)])
    )
    ctx.write("test", "test.csv", _csv([[*r, int(label)] for r, label in zip(x_test.tolist(), y_test, strict=True)]))
    return {"train_rows": len(y_train), "test_rows": len(y_test)}


@training(
    name="train",
    inputs={"train": make_data.output("train"), "max_iter": Param("MaxIter")},
    outputs=["model"],
    cache=True,
    timeout_s=300,
)
def train(ctx: StepContext, train: str, max_iter: int) -> dict[str, Any]:
    import joblib
    from sklearn.linear_model import LogisticRegression

    x, y = _read_csv(ctx.read(ctx.storage.join(train, "train.csv")))
    model = LogisticRegression(max_iter=max_iter).fit(x, y)
    buf = io.BytesIO()
    joblib.dump(model, buf)
    ctx.write("model", "model.joblib", buf.getvalue())
    return {"classes": [int(c) for c in model.classes_]}


@evaluation(name="evaluate", inputs={"model": train.output("model"), "test": make_data.output("test")}, timeout_s=300)
def evaluate(ctx: StepContext, model: str, test: str) -> dict[str, float]:
    import joblib

    x, y = _read_csv(ctx.read(ctx.storage.join(test, "test.csv")))
    estimator = joblib.load(ctx.local_path(ctx.storage.join(model, "model.joblib")))
    predicted = estimator.predict(x)
    accuracy = sum(int(p == t) for p, t in zip(predicted, y, strict=True)) / len(y)
    return {"accuracy": accuracy, "test_rows": float(len(y))}


register = register_model(
    "register",
    group=Param("ModelPackageGroup"),
    model_data=train.output("model"),
    metrics=evaluate.output("metrics"),
    approval_status=Param("ApprovalStatus"),
    description=Join(" ", ["iris logistic regression, accuracy", evaluate.metric("accuracy")]),
)
too_inaccurate = fail(
    "accuracy-too-low",
    Join(" ", ["accuracy", evaluate.metric("accuracy"), "is below MinAccuracy", Param("MinAccuracy")]),
)
check = condition(
    "check-accuracy",
    [GreaterThanOrEqualTo(evaluate.metric("accuracy"), Param("MinAccuracy"))],
    if_steps=[register],
    else_steps=[too_inaccurate],
)

pipeline = Pipeline(
    "iris",
    (make_data, train, evaluate, check, register, too_inaccurate),
    (
        parameter("Seed", 7),
        parameter("TestShare", 0.3),
        parameter("MaxIter", 200),
        parameter("MinAccuracy", 0.8),
        parameter("ModelPackageGroup", "iris"),
        parameter("ApprovalStatus", "PendingManualApproval"),
    ),
)

if __name__ == "__main__":
    print(json.dumps(pipeline.to_document(), indent=2))  # noqa: T201 - the definition document, for reading
