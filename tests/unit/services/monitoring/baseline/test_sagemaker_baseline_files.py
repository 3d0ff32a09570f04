"""SageMaker's own statistics.json / constraints.json as a servekit baseline: the conversion, judging a window against
it, bad and hostile files, and the control plane's reading of a job definition's baseline (SageMaker's files, servekit's
own folder, none at all). The files are built here in the shapes Model Monitor documents ("Schema for Statistics",
"Schema for Constraints"), including the variants the SageMaker SDK's test data uses (a feature only in the
constraints, ``monitoring_config_overrides`` inside ``string_constraints``, ``enable_comparisons``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servekit.services.monitoring.baseline import from_sagemaker, sagemaker_files, store, window_statistics
from servekit.services.monitoring.baseline.sagemaker_files import SageMakerFileError
from servekit.services.monitoring.baseline.store import BaselineError
from servekit.services.monitoring.config import MonitorConfig
from servekit.services.monitoring.drift.profiles import CategoricalProfile, NumericProfile
from servekit.services.monitoring.runs.run import run
from servekit.services.monitoring.schedules import baselines
from servekit.services.monitoring.schedules.jobs import (
    WINDOW_STATISTICS,
    JobSpecError,
    MonitoringType,
    monitor_command,
    read_statistics_only,
    spec_from_definition,
)
from servekit.services.monitoring.stream.windows import parse_time
from servekit.testing.capture_files import feature_rows, synthetic_features, write_capture_files

T0 = parse_time("2026-11-30T00:00:00Z")


def numeric_feature(name: str, values: np.ndarray[Any, Any], sketch: bool = False) -> dict[str, Any]:
    """A numerical feature as the analyzer writes it: moments and ten equal-width KLL buckets (and a sketch)."""
    counts, edges = np.histogram(values, bins=10)
    kll: dict[str, Any] = {
        "buckets": [
            {"lower_bound": float(edges[i]), "upper_bound": float(edges[i + 1]), "count": float(counts[i])}
            for i in range(10)
        ]
    }
    if sketch:  # level 0 holds every value (weight 1): the sketch of a small dataset
        kll["sketch"] = {"parameters": {"c": 0.64, "k": 2048.0}, "data": [sorted(values.tolist())]}
    return {
        "name": name,
        "inferred_type": "Fractional",
        "numerical_statistics": {
            "common": {"num_present": len(values), "num_missing": 0},
            "mean": float(values.mean()),
            "sum": float(values.sum()),
            "std_dev": float(values.std()),
            "min": float(values.min()),
            "max": float(values.max()),
            "distribution": {"kll": kll},
        },
    }


def string_feature(name: str, counts: dict[str, int]) -> dict[str, Any]:
    return {
        "name": name,
        "inferred_type": "String",
        "string_statistics": {
            "common": {"num_present": sum(counts.values()), "num_missing": 0},
            "distinct_count": float(len(counts)),
            "distribution": {"categorical": {"buckets": [{"value": v, "count": float(n)} for v, n in counts.items()]}},
        },
    }


def constraints_doc(threshold: float = 0.1, **config: Any) -> dict[str, Any]:
    return {
        "version": 0.0,
        "features": [
            {"name": "num_0", "inferred_type": "Fractional", "completeness": 1.0,
             "num_constraints": {"is_non_negative": False}},
            {"name": "cat_0", "inferred_type": "String", "completeness": 1.0,
             "string_constraints": {"domains": ["a", "b", "c", "z"],
                                    "monitoring_config_overrides": {"evaluate_constraints": "Enabled"}}},
        ],
        "monitoring_config": {
            "evaluate_constraints": "Enabled",
            "emit_metrics": "Enabled",
            "datatype_check_threshold": 0.1,
            "domain_content_threshold": 0.1,
            "distribution_constraints": {"perform_comparison": "Enabled", "comparison_threshold": threshold,
                                         "comparison_method": "Robust"},
            **config,
        },
    }  # fmt: skip


def write_files(folder: Path, statistics: dict[str, Any] | None, constraints: dict[str, Any] | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    if statistics is not None:
        (folder / "statistics.json").write_text(json.dumps(statistics))
    if constraints is not None:
        (folder / "constraints.json").write_text(json.dumps(constraints))
    return folder


def training_statistics(sketch: bool = False) -> dict[str, Any]:
    cols = synthetic_features(5000, 1, numerical=1, categorical=1)
    values, counts = np.unique(cols["cat_0"].astype(str), return_counts=True)
    cats = {str(v): int(n) for v, n in zip(values, counts, strict=True)}
    return {
        "version": 0.0,
        "dataset": {"item_count": 5000},
        "features": [numeric_feature("num_0", cols["num_0"], sketch), string_feature("cat_0", cats)],
    }


# ---------------------------------------------------------------------------------------------- conversion
def test_statistics_and_constraints_become_profiles_thresholds_and_the_checks(tmp_path: Path) -> None:
    stats = training_statistics()
    folder = write_files(tmp_path / "b", stats, constraints_doc(threshold=0.25))
    loaded = store.load(folder)  # what `servekit monitor run --baseline` does with such a folder
    b = loaded.baseline
    assert b.columns == ("num_0", "cat_0") and b.rows == 5000 and b.version == "sagemaker"
    num = b.profiles["num_0"]
    assert isinstance(num, NumericProfile) and num.values is None  # no values: KS from the bins
    given = stats["features"][0]["numerical_statistics"]
    assert num.summary.present == 5000
    assert num.summary.mean() == pytest.approx(given["mean"]) and num.summary.std() == pytest.approx(given["std_dev"])
    assert (num.minimum, num.maximum) == (given["min"], given["max"])
    uppers = [b["upper_bound"] for b in given["distribution"]["kll"]["buckets"]]
    assert set(uppers) <= set(num.binning.edges.tolist())  # each bucket's count sits at its upper bound
    assert b.thresholds["num_0"]["ks_statistic"].for_window(100, 5000) == 0.25  # comparison_threshold, fixed
    cat = b.profiles["cat_0"]
    assert isinstance(cat, CategoricalProfile)
    assert cat.domain[:3] == ("a", "b", "c") and cat.domain[3] == "z"  # z: allowed by the constraints, count 0
    assert cat.summary.counts.tolist()[3:] == [0, 0] and cat.complete
    assert b.constraints["features"][1]["string_constraints"]["domains"] == ["a", "b", "c", "z"]  # used as given


def test_a_kll_sketch_gives_finer_bins_than_the_ten_buckets(tmp_path: Path) -> None:
    b = from_sagemaker.load_folder(write_files(tmp_path / "b", training_statistics(sketch=True), None))
    num = b.profiles["num_0"]
    assert isinstance(num, NumericProfile)
    assert num.binning.size > 1000 and num.summary.present == 5000


def test_a_sketchs_levels_weigh_two_to_the_level(tmp_path: Path) -> None:
    feature = numeric_feature("x", np.array([1.0, 2.0, 3.0, 4.0]))
    feature["numerical_statistics"]["common"]["num_present"] = 6
    feature["numerical_statistics"]["distribution"]["kll"]["sketch"] = {"data": [[1.0, 2.0], [3.0, 4.0]]}
    b = from_sagemaker.load_folder(write_files(tmp_path / "b", {"features": [feature]}, None))
    num = b.profiles["x"]
    assert isinstance(num, NumericProfile)
    by_edge = dict(zip(num.binning.edges.tolist(), num.summary.counts.tolist(), strict=False))
    assert [by_edge[v] for v in (1.0, 2.0, 3.0, 4.0)] == [1, 1, 2, 2]  # levels 0 and 1, scaled to num_present 6


def test_statistics_alone_judge_drift_only_and_constraints_alone_check_only(tmp_path: Path) -> None:
    only_stats = from_sagemaker.load_folder(write_files(tmp_path / "s", training_statistics(), None))
    assert only_stats.constraints["monitoring_config"]["evaluate_constraints"] == "Disabled"
    assert only_stats.thresholds["num_0"]["ks_statistic"].fixed == 0.1  # the analyzer's default
    only_constraints = from_sagemaker.load_folder(write_files(tmp_path / "c", None, constraints_doc()))
    num = only_constraints.profiles["num_0"]
    assert isinstance(num, NumericProfile) and num.summary.present == 0
    assert all(v is None for k, v in num.compare(num.empty()).items() if k != "missing_share")


def test_the_sdk_test_datas_variants_are_read(tmp_path: Path) -> None:
    """Constraints naming a feature the statistics lack, overrides inside string_constraints, enable_comparisons."""
    stats = {"version": 0.0, "dataset": {"item_count": 4},
             "features": [string_feature("message", {"hello": 4})]}  # fmt: skip
    cons = {
        "version": 0.0,
        "features": [
            {"name": n, "inferred_type": "String", "completeness": 1.0,
             "string_constraints": {"domains": ["hello"], "monitoring_config_overrides": {"emit_metrics": "Enabled"}}}
            for n in ("message", "second_message")
        ],
        "monitoring_config": {"evaluate_constraints": "Enabled", "emit_metrics": "Enabled",
                              "distribution_constraints": {"enable_comparisons": True, "min_domain_mass": 1.0,
                                                           "comparison_threshold": 1.0}},
    }  # fmt: skip
    b = from_sagemaker.load_folder(write_files(tmp_path / "b", stats, cons))
    assert b.columns == ("message", "second_message")
    second = b.profiles["second_message"]
    assert isinstance(second, CategoricalProfile) and second.domain == ("hello",) and second.summary.present == 0
    assert sagemaker_files.comparison_threshold(cons) == 1.0
    cons["monitoring_config"]["distribution_constraints"]["enable_comparisons"] = False
    assert sagemaker_files.comparison_threshold(cons) is None


# ---------------------------------------------------------------------------------------------- judging
def capture(dest: Path, shift: float, unseen: float = 0.0) -> Path:
    cols = synthetic_features(600, 7, numerical=1, categorical=1, mean_shift=shift, unseen_share=unseen)
    records = [(T0 + i * 5.0, [row]) for i, row in enumerate(feature_rows(cols))]
    write_capture_files(dest, records)
    return dest


def test_a_window_is_judged_against_sagemakers_files_as_against_servekits(tmp_path: Path) -> None:
    baseline = from_sagemaker.load_folder(write_files(tmp_path / "b", training_statistics(), constraints_doc()))
    cfg = MonitorConfig(window=3600, since=T0, until=T0 + 3600)
    calm = run(baseline, str(capture(tmp_path / "calm", 0.0)), cfg).windows[0]
    assert calm.status == "ok" and calm.violations == []
    assert calm.features["num_0"].approx is not None and calm.features["num_0"].approx["method"] == "bins"
    moved = run(baseline, str(capture(tmp_path / "moved", 1.0, unseen=0.3)), cfg).windows[0]
    checks = {(v["feature_name"], v["constraint_check_type"]) for v in moved.violations}
    assert ("num_0", "baseline_drift_check") in checks  # KS > comparison_threshold 0.1
    assert ("cat_0", "categorical_values_check") in checks  # 30% outside the constraints' domains
    assert moved.features["num_0"].metrics["ks_statistic"] > 0.1  # type: ignore[operator]


# ---------------------------------------------------------------------------------------------- bad files
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("not json", "not a JSON document"),
        ("[1, 2]", "expected a JSON object, not list"),
        ('{"features": {}}', "features must be a list"),
        ('{"features": [{"name": "x", "inferred_type": "Weird"}]}', "features[0].inferred_type must be"),
        ('{"features": [{"name": "x", "inferred_type": "Fractional"}]}', "needs numerical_statistics"),
        ('{"features": [{"name": "x", "inferred_type": "String", "string_statistics": {"common": {"num_present": 1},'
         ' "distribution": {"categorical": {"buckets": [{"value": "a", "count": -1}]}}}}]}', "count must be a count"),
        ('{"features": [{"name": "x", "inferred_type": "Fractional", "numerical_statistics": {"common": '
         '{"num_present": 1}, "mean": NaN}}]}', "mean must be a finite number"),
        ('{"features": [{"name": "x", "inferred_type": "Fractional", "numerical_statistics": {"common": '
         '{"num_present": 1}, "distribution": {"kll": {"buckets": [{"lower_bound": 2, "upper_bound": 1, '
         '"count": 1}]}}}}]}', "lower_bound <= upper_bound"),
        ('{"features": [{"name": "x", "inferred_type": "Unknown"}, {"name": "x", "inferred_type": "Unknown"}]}',
         "appears twice"),
    ],
)  # fmt: skip
def test_a_bad_statistics_file_is_refused_naming_the_file_and_the_field(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "statistics.json"
    path.write_text(text)
    with pytest.raises(SageMakerFileError) as info:
        sagemaker_files.load(path, None)
    assert str(path) in str(info.value)
    assert expected.split(" must")[0] in str(info.value) or expected in str(info.value)


def test_hostile_sizes_are_refused_before_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "constraints.json"
    path.write_text(json.dumps(constraints_doc()))
    monkeypatch.setattr(sagemaker_files, "MAX_FILE_BYTES", 100)
    with pytest.raises(SageMakerFileError, match="more than the 100 servekit reads"):
        sagemaker_files.load(None, path)
    monkeypatch.setattr(sagemaker_files, "MAX_FILE_BYTES", 1 << 20)
    monkeypatch.setattr(sagemaker_files, "MAX_SKETCH_ITEMS", 3)
    feature = numeric_feature("x", np.arange(5.0), sketch=True)
    (tmp_path / "statistics.json").write_text(json.dumps({"features": [feature]}))
    with pytest.raises(SageMakerFileError, match="more than 3 items"):
        sagemaker_files.load(tmp_path / "statistics.json", None)


def test_bad_constraints_are_refused_and_the_monitor_says_so(tmp_path: Path) -> None:
    bad = constraints_doc()
    bad["features"][1]["string_constraints"]["domains"] = "abc"
    folder = write_files(tmp_path / "b", None, bad)
    with pytest.raises(BaselineError, match=r"features\[1\]\.string_constraints\.domains must be a list"):
        store.load(folder)


# ---------------------------------------------------------------------------------------------- control plane
def definition(baseline: dict[str, Any] | None, out: Path) -> dict[str, Any]:
    request: dict[str, Any] = {
        "JobDefinitionName": "dq",
        "DataQualityAppSpecification": {"ImageUri": "x"},
        "DataQualityJobInput": {"EndpointInput": {"EndpointName": "ep", "LocalPath": "/opt/ml/processing/input"}},
        "DataQualityJobOutputConfig": {"MonitoringOutputs": [{"S3Output": {"S3Uri": f"file://{out}"}}]},
        "JobResources": {},
    }
    if baseline is not None:
        request["DataQualityBaselineConfig"] = baseline
    return request


def test_files_under_separate_prefixes_of_the_store_are_checked_and_staged(tmp_path: Path) -> None:
    store_root = tmp_path / "store"
    write_files(store_root / "bucket" / "s1", training_statistics(), None)
    write_files(store_root / "bucket" / "c1", None, constraints_doc())

    def objects(uri: str) -> Path | None:
        path = store_root / uri.removeprefix("s3://")
        return path if path.exists() else None

    config = {
        "StatisticsResource": {"S3Uri": "s3://bucket/s1/statistics.json"},
        "ConstraintsResource": {"S3Uri": "s3://bucket/c1/constraints.json"},
    }
    spec = spec_from_definition(MonitoringType.DATA_QUALITY, definition(config, tmp_path / "o"), objects)
    assert spec.baseline is None and spec.sagemaker_baseline is not None and not spec.statistics_only
    out = tmp_path / "o" / "exec"
    staged = baselines.stage(spec.sagemaker_baseline, out)
    assert sorted(p.name for p in staged.iterdir()) == ["constraints.json", "statistics.json"]
    command = monitor_command(spec, "/capture", str(out), T0, T0 + 3600)
    assert command[command.index("--baseline") + 1] == str(staged)
    assert from_sagemaker.load_folder(staged).columns == ("num_0", "cat_0")


def test_a_file_that_is_not_json_or_not_there_is_refused_and_a_wrong_shape_fails_the_execution(tmp_path: Path) -> None:
    (tmp_path / "n").mkdir()
    (tmp_path / "n" / "statistics.json").write_text("{not json")
    config = {"StatisticsResource": {"S3Uri": f"file://{tmp_path}/n/statistics.json"}}
    with pytest.raises(JobSpecError, match=r"DataQualityBaselineConfig\.StatisticsResource\.S3Uri file://.*not a JSON"):
        spec_from_definition(MonitoringType.DATA_QUALITY, definition(config, tmp_path / "o"))
    missing = {"ConstraintsResource": {"S3Uri": f"file://{tmp_path}/nowhere/constraints.json"}}
    with pytest.raises(JobSpecError, match=r"no constraints\.json there"):
        spec_from_definition(MonitoringType.DATA_QUALITY, definition(missing, tmp_path / "o"))
    # a JSON object of the wrong shape is taken (SageMaker reads the files when an execution runs) ...
    write_files(tmp_path / "b", {"features": "nope"}, None)
    config = {"StatisticsResource": {"S3Uri": f"file://{tmp_path}/b/statistics.json"}}
    spec = spec_from_definition(MonitoringType.DATA_QUALITY, definition(config, tmp_path / "o"))
    assert spec.sagemaker_baseline is not None
    # ... and the execution's conversion refuses it, naming the field
    staged = baselines.stage(spec.sagemaker_baseline, tmp_path / "out")
    with pytest.raises(BaselineError, match=r"statistics\.json.*features"):
        store.load(staged)


def test_servekits_own_folder_is_still_preferred(tmp_path: Path) -> None:
    folder = write_files(tmp_path / "v0001", training_statistics(), constraints_doc())
    (folder / "baseline.json").write_text("{}")
    config = {"ConstraintsResource": {"S3Uri": f"file://{folder}/constraints.json"}}
    spec = spec_from_definition(MonitoringType.DATA_QUALITY, definition(config, tmp_path / "o"))
    assert spec.baseline == str(folder) and spec.sagemaker_baseline is None


def test_without_a_baseline_an_execution_computes_the_windows_statistics(tmp_path: Path) -> None:
    spec = spec_from_definition(MonitoringType.DATA_QUALITY, definition(None, tmp_path / "o"))
    assert spec.statistics_only
    command = monitor_command(spec, "/capture", "/out", T0, T0 + 3600, python="py")
    assert command[:3] == ["py", "-m", WINDOW_STATISTICS]
    cap = capture(tmp_path / "cap", 0.0)
    out = tmp_path / "out"
    assert window_statistics.main(["--data", str(cap), "--out", str(out), "--since", "2026-11-30T00:00:00Z",
                                   "--until", "2026-11-30T00:30:00Z"]) == 0  # fmt: skip
    statistics = json.loads((out / "statistics.json").read_text())
    assert statistics["dataset"]["item_count"] == 360  # one row every 5 s for 30 minutes
    # positional rows, no baseline to name them: Spark's names, as SageMaker's analyzer gives them
    assert [(f["name"], f["inferred_type"]) for f in statistics["features"]] == [
        ("_c0", "Fractional"),
        ("_c1", "String"),
    ]
    outcome = read_statistics_only(out)
    assert outcome.status.value == "Completed" and outcome.rows == 360 and not outcome.violations_uri
    empty = tmp_path / "empty"
    assert window_statistics.main(["--data", str(cap), "--out", str(empty), "--since", "2026-12-01T00:00:00Z",
                                   "--until", "2026-12-01T01:00:00Z"]) == 0  # fmt: skip
    assert not (empty / "statistics.json").exists()
    assert read_statistics_only(empty).status.value == "Failed"


def test_a_file_replaced_after_creation_is_checked_again(tmp_path: Path) -> None:
    """The scheduler re-reads plans on every tick, so checks are remembered per file version, not forever."""
    folder = write_files(tmp_path / "b", training_statistics(), None)
    config = {"StatisticsResource": {"S3Uri": f"file://{folder}/statistics.json"}}
    assert baselines.resolve(config, "BaselineConfig", lambda _: None) is not None
    (folder / "statistics.json").write_text('{"features": 3')
    with pytest.raises(JobSpecError, match="not a JSON document"):
        baselines.resolve(config, "BaselineConfig", lambda _: None)


def test_a_baselining_job_named_alone_stands_for_its_output_files() -> None:
    """What the SDK's create_monitoring_schedule() sends after suggest_baseline: only BaseliningJobName."""
    from servekit.aws.errors import ApiError
    from servekit.services.monitoring.schedules.plans import Planner

    outputs = {"baseline-suggestion-job-1": "s3://bucket/model-monitor/baselining/job-1/results/"}
    planner = Planner(None, None, baselining_output=outputs.get)  # type: ignore[arg-type]
    request = {
        "JobDefinitionName": "dq",
        "DataQualityBaselineConfig": {"BaseliningJobName": "baseline-suggestion-job-1"},
    }
    filled = planner.with_baselining_job(MonitoringType.DATA_QUALITY, request)["DataQualityBaselineConfig"]
    root = "s3://bucket/model-monitor/baselining/job-1/results"
    assert filled == {
        "BaseliningJobName": "baseline-suggestion-job-1",
        "StatisticsResource": {"S3Uri": f"{root}/statistics.json"},
        "ConstraintsResource": {"S3Uri": f"{root}/constraints.json"},
    }
    given = {"DataQualityBaselineConfig": {"BaseliningJobName": "x", "ConstraintsResource": {"S3Uri": "s3://b/c.json"}}}
    assert planner.with_baselining_job(MonitoringType.DATA_QUALITY, given) == given  # files given: left as they are
    with pytest.raises(ApiError, match="no processing job nope"):
        planner.with_baselining_job(
            MonitoringType.DATA_QUALITY, {"DataQualityBaselineConfig": {"BaseliningJobName": "nope"}}
        )
    unwired = Planner(None, None)  # type: ignore[arg-type]
    assert unwired.with_baselining_job(MonitoringType.DATA_QUALITY, request) == request
