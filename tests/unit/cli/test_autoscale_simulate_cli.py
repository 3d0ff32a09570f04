"""``servekit autoscale simulate`` through typer's CliRunner: the contract command of the seed's case (JSON with
steps, cost_per_hour and total_cost), the table, the HTML chart, side-by-side scenarios and exit 2 with one line
for bad inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from servekit.cli.main import app

SEED = (50, 90, 150, 300, 500, 300, 120, 50, 80, 200)
CONTRACT = ("--capacity-rps", "100", "--min", "2", "--max", "8", "--target-utilization", "0.7",
            "--price-per-hour", "0.75", "--cooldown-s", "0", "--step-s", "60")  # fmt: skip


def run(*args: str) -> Any:
    return CliRunner().invoke(app, ["autoscale", "simulate", *args], env={"COLUMNS": "160"})


@pytest.fixture
def seed_csv(tmp_path: Path) -> Path:
    path = tmp_path / "curve.csv"
    path.write_text("time_s,rps\n" + "".join(f"{i * 60},{r}\n" for i, r in enumerate(SEED)))
    return path


def test_the_contract_command(seed_csv: Path) -> None:
    result = run("--traffic", str(seed_csv), *CONTRACT, "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert [s["instances"] for s in doc["steps"]] == [2, 2, 3, 5, 8, 5, 2, 2, 2, 3]
    assert [(s["time_s"], s["rps"]) for s in doc["steps"]] == [(i * 60, r) for i, r in enumerate(SEED)]
    assert doc["cost_per_hour"] == 2.25
    assert doc["total_cost"] == 0.425
    assert doc["mode"] == "formula"


def test_the_table_and_the_real_policy_beside_it(seed_csv: Path, tmp_path: Path) -> None:
    html = tmp_path / "whatif.html"
    result = run("--traffic", str(seed_csv), *CONTRACT, "--mode", "formula", "--mode", "real", "--html", str(html))
    assert result.exit_code == 0, result.output
    assert "target 0.7 (formula)" in result.output and "target 0.7 (real)" in result.output
    assert "total cost: 0.4250" in result.output
    assert "AlarmHigh needs 3 periods" in result.output
    page = html.read_text()
    assert page.count("<svg") == 6 and "Traffic and capacity" in page and "SLO" in page


def test_json_of_several_scenarios(seed_csv: Path) -> None:
    args = [a for a in CONTRACT if a != "0.7"]
    args.remove("--target-utilization")
    result = run("--traffic", str(seed_csv), *args, "--target-utilization", "0.7", "--target-utilization", "1.0",
                 "--schedule", "cron(2 0 * * ? *)=4", "--compare-without-schedule", "--json")  # fmt: skip
    assert result.exit_code == 0, result.output
    scenarios = json.loads(result.output)["scenarios"]
    assert len(scenarios) == 4
    floors = [min(s["instances"] for s in sc["steps"][2:]) for sc in scenarios]
    assert floors == [4, 2, 4, 2]


@pytest.mark.parametrize(
    ("curve", "extra", "message"),
    [
        ("time_s,rps\n0,50\n60,-1\n", (), "negative rate"),
        ("time_s,rps\n", (), "is empty"),
        ("time_s,rps\n0,abc\n", (), "is not a number"),
        ("time_s,rps\n0,5\n", ("--min", "9"), "--min 9 is more than --max 8"),
        ("time_s,rps\n0,5\n", ("--capacity-rps", "0"), "capacity must be greater than 0"),
    ],
)
def test_bad_inputs_exit_2_with_one_line(tmp_path: Path, curve: str, extra: tuple[str, ...], message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(curve)
    result = run("--traffic", str(path), *CONTRACT, *extra)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_missing_curve_file_and_no_curve(tmp_path: Path) -> None:
    result = run("--traffic", str(tmp_path / "nope.csv"), *CONTRACT)
    assert result.exit_code == 2 and "cannot read the traffic curve" in result.output
    result = run(*CONTRACT)
    assert result.exit_code == 2 and "give one of --traffic FILE" in result.output


def test_the_price_from_the_instance_types_table(seed_csv: Path) -> None:
    args = list(CONTRACT)
    i = args.index("--price-per-hour")
    del args[i : i + 2]
    result = run("--traffic", str(seed_csv), *args, "--instance-type", "ml.m5.large", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["fleet"]["instance_type"] == "ml.m5.large" and doc["fleet"]["price_per_hour"] > 0
