"""``monitor run`` flags for the family alpha, the values kept per pane and the lateness of unordered data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from servekit.cli.main import app

runner = CliRunner()


def test_alpha_window_values_and_lateness(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    (tmp_path / "train.csv").write_text("a\n" + "\n".join(f"{v:.5f}" for v in rng.normal(size=3000)) + "\n")
    t0 = 1_795_000_000 - 1_795_000_000 % 3600
    live = "\n".join(f"{t0 + i * 4},{v:.5f}" for i, v in enumerate(rng.normal(size=900)))
    (tmp_path / "live.csv").write_text("ts,a\n" + live + "\n")
    r = runner.invoke(app, ["monitor", "baseline", "--data", str(tmp_path / "train.csv"), "--out", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    args = ["monitor", "run", "--baseline", str(tmp_path / "b"), "--data", str(tmp_path / "live.csv"),
            "--timestamp-column", "ts", "--out", str(tmp_path / "o"), "--window", "1h"]  # fmt: skip
    r = runner.invoke(app, [*args, "--alpha", "0.2", "--window-values", "150", "--lateness", "10m"])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "o" / "metrics.json").read_text())
    (window,) = doc["windows"]
    feature = window["features"]["a"]
    assert feature["test"]["alpha"] == 0.2
    assert feature["approx"]["method"] == "uniform_sample"  # 900 values, 150 kept per pane
    for bad in (["--alpha", "2"], ["--window-values", "5"], ["--lateness", "soon"]):
        r = runner.invoke(app, [*args, *bad])
        assert r.exit_code == 2, (bad, r.output)
