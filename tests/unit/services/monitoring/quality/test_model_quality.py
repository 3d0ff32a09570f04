"""Model quality end to end on the command line (in process): captured answers written by the real capture writer
(both layouts), labels ingested once each (late ones too), a quality baseline, windows judged against it with the
consecutive-window alarm, SageMaker-shaped outputs, and metrics equal to scikit-learn's on each window's rows."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sklearn import metrics as sk
from typer.testing import CliRunner

from servekit.cli.main import app
from servekit.config.models import CaptureConfig
from servekit.serving.capture.sink import CaptureWriter

runner = CliRunner()
T0 = datetime(2026, 11, 30, 0, 0, tzinfo=UTC).timestamp()
HOURS, PER_HOUR, BAD_FROM = 10, 300, 6


def cli(*args: str, code: int = 0) -> str:
    r = runner.invoke(app, list(args))
    assert r.exit_code == code, r.output
    return r.output


def scores(rng: np.random.Generator, y: np.ndarray[Any, Any], bad: bool) -> np.ndarray[Any, Any]:
    """A decent model (AUC ~0.9); a degraded one is right about half the time."""
    signal = np.where(rng.random(len(y)) < 0.5, rng.integers(0, 2, len(y)), y) if bad else y
    return np.clip(rng.normal(0.3 + 0.4 * signal, 0.18), 0, 1).round(3)


@pytest.fixture
def world(tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    fmt = getattr(request, "param", "jsonl")
    rng = np.random.default_rng(7)
    # baseline: labelled predictions of the good model
    yb = rng.integers(0, 2, 4000)
    pb = scores(rng, yb, bad=False)
    rows = "\n".join(f"{y},{int(p >= 0.5)},{p}" for y, p in zip(yb, pb, strict=True))
    (tmp_path / "validation.csv").write_text("label,prediction,probability\n" + rows + "\n")
    # traffic: one row per request, its inference id sent by the caller
    clock = [T0]
    w = CaptureWriter(
        CaptureConfig(destination=str(tmp_path / "capture"), format=fmt),
        now=lambda: datetime.fromtimestamp(clock[0], UTC),
    )
    w.start()
    truth: dict[str, int] = {}
    for h in range(HOURS):
        y = rng.integers(0, 2, PER_HOUR)
        p = scores(rng, y, bad=h >= BAD_FROM)
        for i in range(PER_HOUR):
            clock[0] = T0 + h * 3600 + i * 3600 / PER_HOUR
            rid = f"req-{h}-{i}"
            proba = np.array([[1 - p[i], p[i]]])
            w.offer_tensors(
                "m",
                1,
                {"x": np.array([[float(i)]])},
                {"label": np.array([int(p[i] >= 0.5)]), "probabilities": proba},
                rid,
            )
            truth[rid] = int(y[i])
    w.close()
    labels = tmp_path / "incoming"
    labels.mkdir()
    late = {k: v for k, v in truth.items() if k.startswith(f"req-{HOURS - 1}-")}
    on_time = {k: v for k, v in truth.items() if k not in late}
    (labels / "day.csv").write_text("inference_id,label\n" + "".join(f"{k},{v}\n" for k, v in on_time.items()))
    return {"tmp": tmp_path, "truth": truth, "late": late, "labels": labels}


def test_labels_quality_baseline_and_run(world: dict[str, Any]) -> None:
    tmp: Path = world["tmp"]
    store = tmp / "store"
    out = cli("monitor", "labels", "--data", str(world["labels"]), "--id-column", "inference_id", "--store", str(store))
    assert "ingested 1 file(s), 2700 label(s)" in out
    assert "0 file(s)" in cli(
        "monitor", "labels", "--data", str(world["labels"]), "--id-column", "inference_id", "--store", str(store)
    )
    cli(
        "monitor",
        "quality-baseline",
        "--data",
        str(tmp / "validation.csv"),
        "--problem-type",
        "BinaryClassification",
        "--inference-attribute",
        "prediction",
        "--probability-attribute",
        "probability",
        "--output",
        str(tmp / "qb"),
    )
    constraints = json.loads((tmp / "qb" / "constraints.json").read_text())
    section = constraints["binary_classification_constraints"]
    assert section["accuracy"]["comparison_operator"] == "LessThanThreshold"
    assert section["log_loss"]["comparison_operator"] == "GreaterThanThreshold"
    stats = json.loads((tmp / "qb" / "statistics.json").read_text())["binary_classification_metrics"]
    assert 0.85 < stats["auc"]["value"] < 0.97 and stats["accuracy"]["standard_deviation"] > 0
    assert sum(sum(v.values()) for v in stats["confusion_matrix"].values()) == 4000

    def run(out_dir: str) -> dict[str, Any]:
        cli(
            "monitor",
            "quality",
            "run",
            "--capture",
            str(tmp / "capture"),
            "--labels",
            str(store),
            "--baseline",
            str(tmp / "qb" / "constraints.json"),
            "--output",
            str(tmp / out_dir),
            "--window",
            "1h",
        )
        doc: dict[str, Any] = json.loads((tmp / out_dir / "quality_metrics.json").read_text())
        return doc

    doc = run("q1")
    windows = doc["windows"]
    assert len(windows) == HOURS and doc["problem_type"] == "BinaryClassification"
    assert [w["status"] for w in windows] == ["ok"] * (HOURS - 1) + ["insufficient"]  # its labels are late
    assert windows[-1]["predictions"] == PER_HOUR and windows[-1]["labelled"] == 0
    good = list(windows[:BAD_FROM])
    bad = list(windows[BAD_FROM : HOURS - 1])
    assert sum(bool(w["violations"]) for w in good) <= 1
    assert all(any(v["metric_name"] == "auc" for v in w["violations"]) for w in bad)
    (alarm,) = [a for a in doc["alarms"] if a["metric"] == "auc"]
    assert alarm["window_index"] == BAD_FROM + 2 and alarm["comparison_operator"] == "LessThanThreshold"
    top = json.loads((tmp / "q1" / "constraint_violations.json").read_text())
    assert top["violations"] == bad[-1]["violations"]
    assert set(top["violations"][0]) == {"metric_name", "constraint_check_type", "description"}
    assert "<svg" in (tmp / "q1" / "report.html").read_text()

    # the late labels arrive: the last window is judged on the next run
    (world["labels"] / "late.csv").write_text(
        "inference_id,label\n" + "".join(f"{k},{v}\n" for k, v in world["late"].items())
    )
    out = cli("monitor", "labels", "--data", str(world["labels"]), "--id-column", "inference_id", "--store", str(store))
    assert "ingested 1 file(s), 300 label(s)" in out and "1 already ingested" in out
    last = run("q2")["windows"][-1]
    assert last["status"] == "ok" and last["labelled"] == PER_HOUR


def test_window_metrics_equal_sklearn_on_the_same_rows(world: dict[str, Any]) -> None:
    tmp: Path = world["tmp"]
    store = tmp / "store"
    cli("monitor", "labels", "--data", str(world["labels"]), "--id-column", "inference_id", "--store", str(store))
    (tmp / "c.json").write_text(
        json.dumps(
            {
                "version": 0.0,
                "binary_classification_constraints": {
                    "f1": {"threshold": 0.5, "comparison_operator": "LessThanThreshold"}
                },
            }
        )
    )
    cli(
        "monitor",
        "quality",
        "run",
        "--capture",
        str(tmp / "capture"),
        "--labels",
        str(store),
        "--baseline",
        str(tmp / "c.json"),
        "--output",
        str(tmp / "o"),
        "--window",
        "2h",
        "--step",
        "1h",
    )
    doc = json.loads((tmp / "o" / "quality_metrics.json").read_text())
    w = doc["windows"][2]  # hours 2 and 3
    # the same rows, rebuilt from what was captured: the ids of hours 2-3 and their labels
    ids = [f"req-{h}-{i}" for h in (2, 3) for i in range(PER_HOUR)]
    y = np.array([world["truth"][k] for k in ids])
    capture = tmp / "capture"
    probs = {}
    for f in sorted(capture.rglob("*.*")):
        if f.suffix == ".jsonl":
            for line in f.read_text().splitlines():
                rec = json.loads(line)
                out = json.loads(rec["captureData"]["endpointOutput"]["data"])["outputs"]
                probs[rec["eventMetadata"]["inferenceId"]] = {o["name"]: o["data"] for o in out}
    assert len(probs) == HOURS * PER_HOUR
    if probs:
        p = np.array([probs[k]["probabilities"][1] for k in ids])
        pred = np.array([probs[k]["label"][0] for k in ids])
        m = w["metrics"]
        assert abs(m["auc"] - sk.roc_auc_score(y, p)) < 1e-9
        assert abs(m["log_loss"] - sk.log_loss(y, p)) < 1e-9
        assert abs(m["f1"] - sk.f1_score(y, pred)) < 1e-9
        assert abs(m["accuracy"] - sk.accuracy_score(y, pred)) < 1e-9
        assert w["confusion_matrix"]["matrix"] == sk.confusion_matrix(y, pred).tolist()
    assert w["labelled"] == 2 * PER_HOUR


@pytest.mark.parametrize("world", ["parquet"], indirect=True)
def test_parquet_capture_gives_the_same_quality(world: dict[str, Any]) -> None:
    test_labels_quality_baseline_and_run(world)


def test_bad_constraints_and_flags_are_refused(world: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(json.dumps({"binary_classification_constraints": {"f1": {"threshold": "x"}}}))
    store = tmp_path / "store"
    cli("monitor", "labels", "--data", str(world["labels"]), "--id-column", "inference_id", "--store", str(store))
    common = ["--capture", str(tmp_path / "capture"), "--labels", str(store), "--output", str(tmp_path / "o")]
    out = cli("monitor", "quality", "run", *common, "--baseline", str(tmp_path / "bad.json"), code=2)
    assert "threshold: number" in out
    (tmp_path / "none.json").write_text("{}")
    assert "binary_classification_constraints" in cli(
        "monitor", "quality", "run", *common, "--baseline", str(tmp_path / "none.json"), code=2
    )
    (world["labels"] / "other.csv").write_text("id,label\n1,0\n")
    out = cli("monitor", "labels", "--data", str(world["labels"]), "--id-column", "nope", "--store", str(store), code=2)
    assert "no column 'nope'" in out


def test_regression_and_multiclass_windows_from_byte_captured_answers(tmp_path: Path) -> None:
    """An inference.py model's answers (bodies kept byte for byte) name their outputs by JSON key."""
    from servekit.services.monitoring.quality.labels import load
    from servekit.services.monitoring.quality.run import Constraints, QualityConfig, run_quality

    rng = np.random.default_rng(3)
    clock = [T0]
    w = CaptureWriter(
        CaptureConfig(destination=str(tmp_path / "cap")), now=lambda: datetime.fromtimestamp(clock[0], UTC)
    )
    w.start()
    truth, value, klass, probs = {}, {}, {}, {}
    for i in range(400):
        clock[0] = T0 + i * 9.0  # one hour
        y = float(rng.normal(50, 10))
        yhat = y + float(rng.normal(0, 3))
        p = rng.dirichlet(np.ones(3))
        body = json.dumps({"value": yhat, "cls": ["a", "b", "c"][int(p.argmax())], "scores": p.tolist()}).encode()
        w.offer_bytes("m", 1, "application/json", b"[[1]]", "application/json", body, f"r{i}")
        truth[f"r{i}"] = y
        value[f"r{i}"] = yhat
        klass[f"r{i}"] = ["a", "b", "c"][int(rng.integers(0, 3))]
        probs[f"r{i}"] = p
    w.close()
    ids = list(truth)
    (tmp_path / "reg.csv").write_text("id,y\n" + "".join(f"{k},{truth[k]!r}\n" for k in ids))
    (tmp_path / "cls.csv").write_text("id,y\n" + "".join(f"{k},{klass[k]}\n" for k in ids))
    for name in ("reg", "cls"):
        cli("monitor", "labels", "--data", str(tmp_path / f"{name}.csv"), "--id-column", "id", "--label-column", "y",
            "--store", str(tmp_path / name))  # fmt: skip
    reg = Constraints.from_json(
        {"regression_constraints": {"mae": {"threshold": 1.0, "comparison_operator": "GreaterThanThreshold"}}}
    )
    cfg = QualityConfig(window=3600, inference_attribute="value")
    (win,) = run_quality(str(tmp_path / "cap"), load(tmp_path / "reg"), reg, cfg).windows
    y = np.array([truth[k] for k in ids])
    yhat = np.array([value[k] for k in ids])
    m = win.result["metrics"]
    assert abs(m["mae"] - sk.mean_absolute_error(y, yhat)) < 1e-9 and abs(m["r2"] - sk.r2_score(y, yhat)) < 1e-9
    assert abs(m["rmse"] - sk.root_mean_squared_error(y, yhat)) < 1e-9
    assert abs(m["mape"] - sk.mean_absolute_percentage_error(y, yhat)) < 1e-9
    assert [v["metric_name"] for v in win.violations] == ["mae"]

    multi = Constraints.from_json({"multiclass_classification_constraints": {"accuracy": {"threshold": 0.2}}})
    cfg = QualityConfig(
        window=3600, inference_attribute="cls", probability_attribute="scores", class_labels=("a", "b", "c")
    )
    (win,) = run_quality(str(tmp_path / "cap"), load(tmp_path / "cls"), multi, cfg).windows
    t = [klass[k] for k in ids]
    pred = [["a", "b", "c"][int(probs[k].argmax())] for k in ids]
    proba = np.array([probs[k] for k in ids])
    m = win.result["metrics"]
    assert abs(m["accuracy"] - sk.accuracy_score(t, pred)) < 1e-9
    assert abs(m["auc"] - sk.roc_auc_score(t, proba, multi_class="ovr")) < 1e-9
    assert abs(m["weighted_f1"] - sk.f1_score(t, pred, average="weighted")) < 1e-9
    assert win.violations == []


def test_a_quality_run_releases_panes_as_windows_finish(world: dict[str, Any]) -> None:
    from servekit.services.monitoring.quality.labels import load
    from servekit.services.monitoring.quality.run import Constraints, QualityConfig, QualityPane, run_quality
    from servekit.services.monitoring.stream.panes import PaneStore

    tmp: Path = world["tmp"]
    cli("monitor", "labels", "--data", str(world["labels"]), "--id-column", "inference_id", "--store", str(tmp / "s"))
    constraints = Constraints.from_json({"binary_classification_constraints": {"accuracy": {"threshold": 0.5}}})
    store: PaneStore[QualityPane] = PaneStore(3600, 3600, QualityPane)
    result = run_quality(str(tmp / "capture"), load(tmp / "s"), constraints, QualityConfig(window=3600), store=store)
    assert len(result.windows) == HOURS and result.stats.late_rows == 0
    assert store.peak <= 3  # hourly partitions with an hour of slack: never all ten hours
