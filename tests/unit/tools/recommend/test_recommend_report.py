"""The report built from measurements (no processes): figures follow the stated formulas, scaled types are marked,
the ranking is by cost per 1K, the HTML holds well-formed inline charts; /proc CPU parsing on a fake tree."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from servekit.services.hosting.instance_types import InstanceType
from servekit.tools.recommend.html import render_html
from servekit.tools.recommend.procstat import parse_stat_cpu_ticks, tree_cpu_seconds
from servekit.tools.recommend.report import build_report
from servekit.tools.recommend.runner import ConfigRun, Measurements, Trial, TypeRun, measured_vcpus
from servekit.tools.recommend.sizing import Phase, Slo, slo_verdict
from servekit.tools.recommend.spec import BatchingChoice, RecommendSpec, parse_batching
from servekit.tools.recommend.svg import nice_ticks
from servekit.tools.recommend.text import table_text

SLO = Slo("p99", 50.0)


def open_phase(rate: float, p99: float, cpu_per_request: float = 0.001, rss: int = 200 << 20) -> Phase:
    ok = int(rate)
    return Phase(
        "open", rate, 1.0, ok, ok, 0, {"p50": p99 / 3, "p95": p99 * 0.8, "p99": p99}, ok * cpu_per_request, rss
    )


def config(choice: BatchingChoice, capacity: float, rates: list[float]) -> ConfigRun:
    run = ConfigRun(choice, setup_s=1.2, rss_idle=150 << 20)
    for r in rates:
        p = open_phase(r, 10.0 if r <= capacity else 400.0)
        run.trials.append(Trial(p, slo_verdict(p, SLO)))
    return run


def measurements(q: float = 3000.0) -> Measurements:
    spec = RecommendSpec(
        model_dir="/m/iris", model_name="iris", instance_types=("small", "big", "slow"), target_qps=q, slo_ms=50.0
    )
    small = TypeRun(InstanceType("small", 1, 1.0, 0.10, "test"), 1, (1,))
    small.runs = [config(BatchingChoice(), 900, [500, 750, 1125, 900]), config(BatchingChoice(8, 1000), 1000, [500])]
    big = TypeRun(InstanceType("big", 4, 4.0, 0.30, "test"), 1, (1,))  # measured on 1 of its 4 vCPUs
    big.runs = [config(BatchingChoice(), 800, [400, 600, 800, 1200])]
    big.sweep = [Phase("closed", c, 1.0, 100 * c, 100 * c, 0, {"p99": 1.0}) for c in (1, 2, 4)]
    slow = TypeRun(InstanceType("slow", 1, 1.0, 0.01, "test"), 1, (1,))
    slow.runs = [config(BatchingChoice(), 0, [100, 50])]
    return Measurements(spec, 2, 8.0, [small, big, slow], 1000.0, 1060.0)


def test_figures_follow_the_formulas_and_scaled_types_are_marked() -> None:
    report = build_report(measurements())
    f = {t["name"]: t for t in report["types"]}
    small, big, slow = f["small"], f["big"], f["slow"]
    assert small["basis"] == "measured" and small["r_max_measured"] == small["r_max"] == 900
    assert small["batching"] == "off"  # 900/s without batching beat 500/s with it
    assert big["basis"] == "scaled" and big["r_max_measured"] == 800 and big["r_max"] == 3200
    for t in (small, big):
        assert t["instances"] == max(1, math.ceil(3000 / (0.7 * t["r_max"]) - 1e-9))
        assert t["cost_per_hour"] == pytest.approx(t["instances"] * t["price_per_hour"])
        assert t["cost_per_1k"] == pytest.approx(t["cost_per_hour"] / (3000 * 3600) * 1000)
        assert t["c_cpu_s_per_request"] == pytest.approx(0.001)
        assert t["cpu_bound_rps"] == pytest.approx(t["vcpus"] / 0.001)
        assert t["m_bytes_per_rps"] == pytest.approx((50 << 20) / t["r_max_measured"])
    assert (small["instances"], big["instances"]) == (5, 2)
    assert not slow["meets_slo"] and slow["basis"] == "none" and slow["rank"] is None
    assert report["ranking"] == ["small", "big"]  # 5 x $0.10/h = $0.50/h under 2 x $0.30/h = $0.60/h
    assert [r["EndpointConfiguration"]["InstanceType"] for r in report["InferenceRecommendations"]] == ["small", "big"]


def test_ranking_goes_by_cost_per_1k() -> None:
    report = build_report(measurements())
    costs = {t["name"]: t["cost_per_1k"] for t in report["types"] if t["meets_slo"]}
    assert report["ranking"] == sorted(costs, key=lambda n: costs[n])
    recs = report["InferenceRecommendations"]
    assert recs[0]["Metrics"]["CostPerHour"] == pytest.approx(0.5)
    assert recs[0]["Metrics"]["MaxInvocations"] == 900 * 60
    assert recs[1]["ModelConfiguration"]["EnvironmentParameters"] == [
        {"Key": "SAGEMAKER_TFS_ENABLE_BATCHING", "ValueType": "String", "Value": "false"}
    ]
    assert any("SCALED x4" in n for n in report["notes"])


def test_html_and_text_render_the_report() -> None:
    report = build_report(measurements())
    html = render_html(report)
    assert html.count("<svg") == 5 and "<script" not in html
    start = 0
    while (start := html.find("<svg", start)) >= 0:
        end = html.index("</svg>", start) + 6
        ET.fromstring(html[start:end])
        start = end
    assert "Recommended: small" in html and "misses the SLO" in html
    text = table_text(report)
    assert "| 1 | small |" in text and "| - | slow |" in text


def test_measured_vcpus_keeps_cpus_for_the_load_generator() -> None:
    assert measured_vcpus(1, 2, 1) == 1
    assert measured_vcpus(4, 2, 1) == 1
    assert measured_vcpus(4, 8, 1) == 4
    assert measured_vcpus(2, 1, 1) == 1  # never below one


def test_parse_batching() -> None:
    assert parse_batching("off, 8:1000,32:4000,off") == (
        BatchingChoice(),
        BatchingChoice(8, 1000),
        BatchingChoice(32, 4000),
    )
    assert parse_batching("16")[0] == BatchingChoice(16, 1000)
    with pytest.raises(Exception, match="MAX_BATCH_SIZE:BATCH_TIMEOUT_MICROS"):
        parse_batching("eight")


def test_nice_ticks_cover_the_range() -> None:
    ticks = nice_ticks(0, 937)
    assert ticks[0] == 0 and ticks[-1] >= 937 and len(ticks) <= 7
    assert ticks == sorted(set(ticks))


def test_stat_parsing_survives_odd_command_names() -> None:
    line = "42 (serve (x) y) S 1 42 42 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 3 0 100 0 0"
    assert parse_stat_cpu_ticks(line) == 300


def test_tree_cpu_seconds_sums_descendants(tmp_path: Path) -> None:
    def proc(pid: int, ticks: tuple[int, int], children: list[int]) -> None:
        d = tmp_path / str(pid)
        (d / "task" / str(pid)).mkdir(parents=True)
        (d / "stat").write_text(f"{pid} (python3) S 1 1 1 0 -1 0 0 0 0 0 {ticks[0]} {ticks[1]} 0 0 20 0 1 0 1 0 0\n")
        (d / "task" / str(pid) / "children").write_text(" ".join(map(str, children)))

    proc(10, (100, 50), [11])
    proc(11, (30, 20), [12])
    proc(12, (0, 100), [])
    assert tree_cpu_seconds(10, tmp_path, ticks=100) == pytest.approx(3.0)
    assert tree_cpu_seconds(99, tmp_path, ticks=100) is None
