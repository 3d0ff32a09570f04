"""Model Monitor's analyzer as servekit runs it: the job's environment as the SDK sets it, the dataset read in the
format it names, and servekit's baseline translated into SageMaker's ``statistics.json`` / ``constraints.json``
(checked value by value against numpy on the same data) with servekit's own summaries beside them, so the output
folder is the same baseline ``servekit monitor baseline`` makes."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
import pyarrow.parquet as pq  # type: ignore[import-untyped]
import pytest

from servekit.services.monitoring.baseline import store
from servekit.services.monitoring.baseline.analyzer import AnalyzerError, Job, analyze, job_from_env, main, parse_format
from servekit.services.monitoring.baseline.build import build
from servekit.services.monitoring.baseline.datasets import DatasetError, tables
from servekit.services.monitoring.baseline.statistics_constraints import MONITORING_CONFIG
from servekit.services.monitoring.config import BaselineConfig
from servekit.services.monitoring.stream.sources import SourceStats

CSV = '{"csv": {"header": true, "output_columns_position": "START"}}'  # DatasetFormat.csv(header=True)
N = 200


def training_rows() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], list[str]]:
    rng = np.random.default_rng(3)
    age = rng.integers(18, 80, N)
    income = np.round(rng.normal(-5.0, 2.0, N), 3)
    plan = [["basic", "plus", "pro"][i % 3] for i in range(N)]
    return age, income, plan


def write_train(folder: Path, header: bool = True) -> Path:
    age, income, plan = training_rows()
    lines = [f"{a},{'' if i % 10 == 0 else income[i]},{plan[i]}" for i, a in enumerate(age)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "train.csv").write_text(("age,income,plan\n" if header else "") + "\n".join(lines) + "\n")
    return folder


def env_for(source: Path, output: Path, **more: str) -> dict[str, str]:
    return {
        "dataset_format": CSV,
        "dataset_source": str(source),
        "output_path": str(output),
        "publish_cloudwatch_metrics": "Disabled",
        **more,
    }


def load(path: Path) -> Any:
    return json.loads(path.read_text())


def test_statistics_json_is_sagemakers_shape_with_the_datas_values(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert main([], env_for(write_train(tmp_path / "in"), out), tmp_path / "message") == 0
    stats = load(out / "statistics.json")
    assert stats["version"] == 0 and stats["dataset"] == {"item_count": N}
    features = {f["name"]: f for f in stats["features"]}
    assert list(features) == ["age", "income", "plan"]
    age, income, plan = training_rows()

    a = features["age"]
    assert a["inferred_type"] == "Integral"
    ns = a["numerical_statistics"]
    assert ns["common"] == {"num_present": N, "num_missing": 0}
    assert ns["sum"] == pytest.approx(float(age.sum()))
    assert ns["mean"] == pytest.approx(float(age.mean()))
    assert ns["std_dev"] == pytest.approx(float(age.std()))  # population std, as Deequ's
    assert (ns["min"], ns["max"]) == (float(age.min()), float(age.max()))
    buckets = ns["distribution"]["kll"]["buckets"]
    counts, edges = np.histogram(age, bins=10, range=(age.min(), age.max()))
    assert [b["count"] for b in buckets] == counts.tolist()
    assert [b["lower_bound"] for b in buckets] == pytest.approx(edges[:-1].tolist())
    assert [b["upper_bound"] for b in buckets] == pytest.approx(edges[1:].tolist())
    assert "sketch" not in ns["distribution"]["kll"]  # servekit keeps quantile edges, not a KLL sketch

    present = np.array([v for i, v in enumerate(income) if i % 10 != 0])
    inc = features["income"]
    assert inc["inferred_type"] == "Fractional"
    ns = inc["numerical_statistics"]
    assert ns["common"] == {"num_present": len(present), "num_missing": N - len(present)}
    assert ns["mean"] == pytest.approx(float(present.mean()))
    assert ns["std_dev"] == pytest.approx(float(present.std()))
    assert sum(b["count"] for b in ns["distribution"]["kll"]["buckets"]) == len(present)

    p = features["plan"]
    assert p["inferred_type"] == "String"
    ss = p["string_statistics"]
    assert ss["common"] == {"num_present": N, "num_missing": 0}
    assert ss["distinct_count"] == 3
    want = {v: float(plan.count(v)) for v in set(plan)}
    assert {b["value"]: b["count"] for b in ss["distribution"]["categorical"]["buckets"]} == want


def test_constraints_json_is_sagemakers_shape_and_takes_the_sdks_drift_method(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = env_for(write_train(tmp_path / "in"), out, categorical_drift_method="ChiSquared")
    assert main([], env, tmp_path / "message") == 0
    cons = load(out / "constraints.json")
    assert cons["version"] == 0
    features = {f["name"]: f for f in cons["features"]}
    assert features["age"] == {
        "name": "age",
        "inferred_type": "Integral",
        "completeness": 1.0,
        "num_constraints": {"is_non_negative": True},
    }
    assert features["income"]["completeness"] == pytest.approx(0.9)
    assert features["income"]["num_constraints"] == {"is_non_negative": False}
    assert features["plan"]["string_constraints"] == {"domains": ["basic", "plus", "pro"]}
    config = cons["monitoring_config"]
    assert config["distribution_constraints"]["categorical_drift_method"] == "ChiSquared"
    assert {k: v for k, v in config.items() if k != "distribution_constraints"} == {
        k: v for k, v in MONITORING_CONFIG.items() if k != "distribution_constraints"
    }
    assert MONITORING_CONFIG["distribution_constraints"]["categorical_drift_method"] == "LInfinity"  # untouched


def test_the_output_folder_is_the_baseline_servekit_monitor_baseline_makes(tmp_path: Path) -> None:
    source = write_train(tmp_path / "in")
    out = tmp_path / "out"
    assert main([], env_for(source, out), tmp_path / "message") == 0
    loaded = store.load(out)  # a version folder given as is: what a monitoring schedule loads
    made = build(str(source / "train.csv"), BaselineConfig())
    assert loaded.baseline.columns == made.columns and loaded.baseline.rows == made.rows
    for name, profile in made.profiles.items():
        got = loaded.baseline.profiles[name]
        assert got.feature == profile.feature
        assert got.summary.present == profile.summary.present and got.summary.missing == profile.summary.missing
    assert set(loaded.baseline.thresholds) == set(made.thresholds)
    assert sorted(p.name for p in out.iterdir()) == [
        "baseline.json",
        "constraints.json",
        "statistics.json",
        "thresholds.json",
        "values",
    ]


def test_a_csv_without_a_header_names_its_columns_as_spark_does(tmp_path: Path) -> None:
    out = tmp_path / "out"
    env = env_for(write_train(tmp_path / "in", header=False), out, dataset_format='{"csv": {"header": false}}')
    assert main([], env, tmp_path / "message") == 0
    stats = load(out / "statistics.json")
    assert [f["name"] for f in stats["features"]] == ["_c0", "_c1", "_c2"]
    assert stats["dataset"]["item_count"] == N  # the first line is a row


def test_json_lines_documents_parquet_and_gzip_read_as_their_format_says(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "part-0").write_text('{"x": 1, "meta": {"country": "fr"}, "tags": [1, 2]}\n\n{"x": 2.5}\n')
    with gzip.open(folder / "part-1.gz", "wt") as f:
        f.write('{"x": 3, "meta": {"country": "de"}}\n')
    (folder / "_SUCCESS").write_text("")
    (folder / ".part-2.crc").write_text("not data")

    def read(kind: str, **kw: bool) -> pa.Table:
        stats = SourceStats()
        table = pa.concat_tables(
            list(tables(folder, kind, batch_rows=1000, stats=stats, **kw)), promote_options="permissive"
        )
        assert stats.files == 2 and stats.rows == table.num_rows
        return table

    lines = read("json")
    assert lines.num_rows == 3 and set(lines.column_names) == {"x", "meta.country", "tags"}
    assert lines.column("meta.country").to_pylist() == ["fr", None, "de"]
    assert lines.column("tags").to_pylist()[0] == "[1,2]"  # a list is kept as JSON text

    (folder / "part-0").write_text('[{"x": 1}, {"x": 2}]')
    with gzip.open(folder / "part-1.gz", "wt") as f:
        f.write('{"x": 3}')
    assert read("json", lines=False).column("x").to_pylist() == [1, 2, 3]

    (folder / "part-0").unlink()
    (folder / "part-1.gz").unlink()
    pq.write_table(pa.table({"x": [1.0, 2.0]}), folder / "a")
    pq.write_table(pa.table({"x": [3.0]}), folder / "b")
    assert read("parquet").column("x").to_pylist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(
    ("content", "kind", "words"),
    [
        ("a,b\n1,2,3\n", "csv", "train.csv: not a readable CSV file"),
        ("{not json}\n", "json", "train.csv: not JSON lines"),
        ("a,b\n", "parquet", "train.csv: not a readable Parquet file"),
    ],
)
def test_a_file_not_in_its_format_names_the_file(tmp_path: Path, content: str, kind: str, words: str) -> None:
    (tmp_path / "train.csv").write_text(content)
    with pytest.raises(DatasetError, match=re.escape(words)):
        list(tables(tmp_path, kind, batch_rows=10, stats=SourceStats()))


def test_dataset_formats_in_the_sdks_and_the_apis_spellings() -> None:
    assert parse_format('{"csv": {"header": false, "output_columns_position": "END"}}') == ("csv", False, True)
    assert parse_format('{"Csv": {"Header": "true"}}') == ("csv", True, True)
    assert parse_format('{"json": {"lines": false}}') == ("json", True, False)
    assert parse_format('{"Json": {"Line": true}}') == ("json", True, True)
    assert parse_format('{"Parquet": {}}') == ("parquet", True, True)
    assert parse_format('{"sagemakerCaptureJson": {}}') == ("capture", True, True)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"dataset_format": ""}, "Environment dataset_format is required"),
        ({"dataset_format": "csv"}, "dataset_format is not JSON"),
        ({"dataset_format": '{"avro": {}}'}, "'avro' is not one servekit's analyzer reads"),
        ({"dataset_format": '{"csv": {"header": "yes"}}'}, "csv.header must be true or false"),
        ({"dataset_source": "/nowhere/at/all"}, "dataset_source /nowhere/at/all does not exist"),
        ({"record_preprocessor_script": "/opt/ml/processing/code/pre.py"}, "record_preprocessor_script is not"),
        ({"post_analytics_processor_script": "/p.py"}, "post_analytics_processor_script is not supported"),
        ({"analysis_type": "MODEL_QUALITY"}, "servekit monitor quality-baseline"),
        ({"categorical_drift_method": "Hellinger"}, "LInfinity or ChiSquared"),
        ({"publish_cloudwatch_metrics": "Yes"}, "Enabled or Disabled"),
    ],
)
def test_a_job_the_analyzer_cannot_run_fails_with_the_reason(
    tmp_path: Path, change: dict[str, str], words: str
) -> None:
    env = env_for(write_train(tmp_path / "in"), tmp_path / "out")
    env.update(change)
    with pytest.raises(AnalyzerError, match=re.escape(words)):
        job_from_env(env)
    message = tmp_path / "output" / "message"
    message.parent.mkdir()
    assert main([], env, message) == 1
    assert message.read_text().startswith("ClientError: ") and words in message.read_text()
    assert not (tmp_path / "out").exists()


def test_a_dataset_without_rows_is_a_client_error(tmp_path: Path) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "empty.csv").write_text("")
    job = Job("csv", True, True, tmp_path / "in", tmp_path / "out")
    with pytest.raises(AnalyzerError, match="has no rows to build a baseline from"):
        analyze(job, say=lambda _: None)


def test_the_defaults_are_the_sdks_container_paths() -> None:
    with pytest.raises(AnalyzerError, match="/opt/ml/processing/input/baseline_dataset_input does not exist"):
        job_from_env({"dataset_format": CSV})
