"""Pipelines the runner tests load by path (each step runs in a process of its own, which loads this file again).

``scratch`` is a folder outside the artifact root that the tests use as a side channel (counting attempts, gating a
step, a barrier between two steps); steps touch it with plain file calls, never through their storage handle."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from servekit.services.pipelines import (
    GreaterThanOrEqualTo,
    Param,
    Pipeline,
    RetryPolicy,
    command,
    condition,
    evaluation,
    fail,
    parameter,
    processing,
    training,
    transform,
)
from servekit.services.pipelines.access.context import StepContext

WAIT_S = 60.0


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.02)  # a side channel between processes: poll for the file


# ---- make data -> train -> evaluate -> condition -> (ok | fail) ------------------------------------------------


@processing(name="make-data", inputs={"rows": Param("rows")}, outputs=["data"], cache=True)
def make_data(ctx: StepContext, rows: int) -> dict[str, Any]:
    data = [[i, i % 2] for i in range(rows)]
    ctx.write("data", "rows.json", json.dumps(data).encode())
    return {"rows": rows}


@training(
    name="train", inputs={"data": make_data.output("data"), "scratch": Param("scratch")}, outputs=["model"], cache=True
)
def train(ctx: StepContext, data: str, scratch: str) -> None:
    with open(Path(scratch) / f"train-ran-{ctx.run_id}", "w"):  # side channel: the test sees whether it ran
        pass
    rows = json.loads(ctx.read(ctx.storage.join(data, "rows.json")))
    ones = sum(label for _, label in rows)
    ctx.write("model", "model.json", json.dumps({"majority": int(ones * 2 >= len(rows))}).encode())


@evaluation(name="evaluate", inputs={"model": train.output("model"), "data": make_data.output("data")})
def evaluate_model(ctx: StepContext, model: str, data: str) -> dict[str, float]:
    guess = json.loads(ctx.read(ctx.storage.join(model, "model.json")))["majority"]
    rows = json.loads(ctx.read(ctx.storage.join(data, "rows.json")))
    return {"accuracy": sum(1 for _, label in rows if label == guess) / len(rows)}


@processing(name="publish", inputs={"model": train.output("model")}, outputs=["report"])
def publish(ctx: StepContext, model: str) -> None:
    ctx.write("report", "published.txt", b"ok")


too_low = fail("too-low", "accuracy below the bar")
check = condition(
    "check-accuracy",
    [GreaterThanOrEqualTo(evaluate_model.metric("accuracy"), Param("min_accuracy"))],
    [publish],
    [too_low],
)

basic = Pipeline(
    "basic",
    (make_data, train, evaluate_model, check, publish, too_low),
    (parameter("rows", 10), parameter("min_accuracy", 0.4), parameter("scratch", "")),
)


# ---- a step over its timeout ------------------------------------------------------------------------------------


@processing(name="slow", inputs={"scratch": Param("scratch")}, timeout_s=1.0)
def slow(ctx: StepContext, scratch: str) -> None:
    (Path(scratch) / "slow.pid").write_text(str(os.getpid()))
    time.sleep(WAIT_S)  # the workload: a step that takes too long


timeout = Pipeline("timeout", (slow,), (parameter("scratch", ""),))


# ---- retries ----------------------------------------------------------------------------------------------------


@processing(
    name="flaky",
    inputs={"scratch": Param("scratch")},
    outputs=["out"],
    retry=[RetryPolicy(("ConnectionError",), interval_s=5, backoff_rate=2, max_attempts=3)],
)
def flaky(ctx: StepContext, scratch: str) -> None:
    counter = Path(scratch) / "attempts"
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    if n < 3:
        raise ConnectionResetError(f"attempt {n}: the network went away")
    ctx.write("out", "done.txt", str(n).encode())


@processing(name="broken", retry=[RetryPolicy(("ConnectionError",), interval_s=1)])
def broken(ctx: StepContext) -> None:
    raise ValueError("not a retryable error")


retries = Pipeline("retries", (flaky,), (parameter("scratch", ""),))
not_retried = Pipeline("not-retried", (broken,))


# ---- least privilege ----------------------------------------------------------------------------------------------


@processing(name="snoop", inputs={"secret": Param("secret")}, reads=[Param("allowed")])
def snoop(ctx: StepContext, secret: str) -> None:
    ctx.read(secret)


snooping = Pipeline("snooping", (snoop,), (parameter("secret", ""), parameter("allowed", "")))


@processing(name="writer", outputs=["out"])
def writer(ctx: StepContext) -> None:
    ctx.write("out", "a.txt", b"1")
    ctx.write("out", "a.txt", b"2")  # an overwrite: refused


overwriting = Pipeline("overwriting", (writer,))


# ---- parallel independent steps and stop/resume -------------------------------------------------------------------


def _barrier(scratch: str, me: str, other: str) -> None:
    (Path(scratch) / f"{me}.started").touch()
    _wait_for(Path(scratch) / f"{other}.started")  # only returns if both run at the same time


@processing(name="left", inputs={"scratch": Param("scratch")}, outputs=["out"])
def left(ctx: StepContext, scratch: str) -> None:
    _barrier(scratch, "left", "right")
    ctx.write("out", "x", b"left")


@processing(name="right", inputs={"scratch": Param("scratch")}, outputs=["out"])
def right(ctx: StepContext, scratch: str) -> None:
    _barrier(scratch, "right", "left")
    ctx.write("out", "x", b"right")


@processing(name="join", inputs={"a": left.output("out"), "b": right.output("out")}, outputs=["out"])
def join_step(ctx: StepContext, a: str, b: str) -> None:
    both = ctx.read(ctx.storage.join(a, "x")) + ctx.read(ctx.storage.join(b, "x"))
    ctx.write("out", "x", both)


parallel = Pipeline("parallel", (left, right, join_step), (parameter("scratch", ""),))


@processing(name="first", inputs={"scratch": Param("scratch")}, outputs=["out"])
def first(ctx: StepContext, scratch: str) -> None:
    with open(Path(scratch) / f"first-{ctx.attempt}", "w"):
        pass
    ctx.write("out", "x", b"1")


@processing(name="gated", inputs={"scratch": Param("scratch"), "prev": first.output("out")}, outputs=["out"])
def gated(ctx: StepContext, scratch: str, prev: str) -> None:
    (Path(scratch) / f"gated-{ctx.attempt}.started").touch()
    _wait_for(Path(scratch) / "open")
    ctx.write("out", "x", b"2")


stoppable = Pipeline("stoppable", (first, gated), (parameter("scratch", ""),))


# ---- triggers: one run per partition ------------------------------------------------------------------------------


@processing(name="count", inputs={"partition": Param("Partition")}, reads=[Param("Partition")], outputs=["counts"])
def count_rows(ctx: StepContext, partition: str) -> dict[str, Any]:
    files = [f for f in ctx.storage.list(partition, recursive=True) if not f.key.startswith("_")]
    rows = sum(len(ctx.read(f.uri).splitlines()) for f in files)
    ctx.write("counts", "counts.json", json.dumps({"partition": partition, "rows": rows}).encode())
    return {"rows": rows}


partitioned = Pipeline("partitioned", (count_rows,), (parameter("Partition", ""),))


# ---- train a tiny model, then a batch transform over it -----------------------------------------------------------


@training(name="fit", outputs=["model"])
def fit(ctx: StepContext) -> None:
    import io

    import joblib
    from sklearn.linear_model import LogisticRegression

    x = [[0.0, 0.0], [0.1, 0.2], [0.2, 0.1], [1.0, 1.0], [0.9, 1.1], [1.1, 0.9]]
    model = LogisticRegression().fit(x, [0, 0, 0, 1, 1, 1])
    buf = io.BytesIO()
    joblib.dump(model, buf)
    ctx.write("model", "model.joblib", buf.getvalue())


score = transform(
    "score",
    {
        "ModelName": fit.output("model"),
        "TransformInput": {
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": Param("input")}},
            "ContentType": "text/csv",
            "SplitType": "Line",
        },
        "TransformOutput": {"Accept": "text/csv", "AssembleWith": "Line"},
    },
    reads=[Param("input")],
    cache=True,
)
scoring = Pipeline("scoring", (fit, score), (parameter("input", ""),))


# ---- a command step feeding a function step -----------------------------------------------------------------------

_WRITE = (
    "import json, os, sys; out = os.environ['SERVEKIT_OUTPUT_OUT']; "
    "open(os.path.join(out, 'words.txt'), 'w').write(sys.argv[1]); "
    "json.dump({'chars': len(sys.argv[1])}, open(os.environ['SERVEKIT_PROPERTIES'], 'w'))"
)
write_words = command("write", [sys.executable, "-c", _WRITE, Param("text")], outputs=["out"])


@processing(name="count-words", inputs={"data": write_words.output("out")}, outputs=["counts"])
def count_words(ctx: StepContext, data: str) -> dict[str, int]:
    words = len(ctx.read(ctx.storage.join(data, "words.txt")).split())
    ctx.write("counts", "n.txt", str(words).encode())
    return {"words": words}


commanded = Pipeline("commanded", (write_words, count_words), (parameter("text", "a b c"),))
