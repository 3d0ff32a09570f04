"""The SageMaker Python SDK against a real ``servekit up``, with nothing but ``eval "$(servekit env)"``: the SDK
runs in a virtualenv of its own (``make test-sdk`` builds it; ``SERVEKIT_SDK_PYTHON`` names its interpreter), as in a
user's notebook beside a servekit installed elsewhere."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from servekit.testing.hosting import UpProcess

pytestmark = [pytest.mark.e2e, pytest.mark.sdk]
HERE = Path(__file__).resolve().parent


def steps_of(stdout: str) -> dict[str, object]:
    """The scripts' ``STEP <name> <json>`` lines (the SDK prints progress dots without a newline before some)."""
    return {m.group(1): json.loads(m.group(2)) for m in re.finditer(r"STEP (\S+) (.*)$", stdout, re.MULTILINE)}


def model_tar(path: Path) -> Path:
    """SageMaker's model.tar.gz: the weights and the handler's code/inference.py at the root."""
    with tarfile.open(path, "w:gz") as tar:
        for name, data in (
            ("weights.json", json.dumps([2.0, 10.0]).encode()),
            ("code/inference.py", (HERE / "inference.py").read_bytes()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def run_sdk(
    tmp_path: Path, script: str | Path, *args: object, cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """``script`` (in this folder) run with ``args`` by the SDK's interpreter after ``eval "$(servekit env)"``, against
    a ``servekit up`` of its own; the run (it must succeed) and the STEP lines it printed."""
    python = os.environ.get("SERVEKIT_SDK_PYTHON")
    if not python:
        pytest.fail("SERVEKIT_SDK_PYTHON names the SageMaker SDK's interpreter: run `make test-sdk`")
    up = UpProcess(tmp_path / "home")
    up.start()
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SAGEMAKER_"))}
        env.update(SERVEKIT_HOME=str(up.home), HOME=str(tmp_path), PYTHONUNBUFFERED="1")
        servekit = f"{shlex.quote(sys.executable)} -m servekit.cli.main"
        command = " ".join(shlex.quote(str(a)) for a in (python, HERE / script, *args))
        run = subprocess.run(
            ["bash", "-c", f'eval "$({servekit} env)" && exec {command}'],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            timeout=540,
        )
        assert run.returncode == 0, f"{run.stdout[-4000:]}\n{run.stderr[-6000:]}\n{up.log.read_text()[-3000:]}"
        return run, steps_of(run.stdout)
    finally:
        up.stop()


@pytest.mark.timeout(600)
def test_the_sdk_runs_unchanged_after_servekit_env(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    run, steps = run_sdk(tmp_path, "sdk_session.py", model_tar(tmp_path / "model.tar.gz"), HERE / "inference.py", work)
    assert steps["bucket"] == "sagemaker-us-east-1-000000000000"
    assert steps["upload_data"] == "s3://sagemaker-us-east-1-000000000000/sdk-test/input"
    assert steps["read_file"] == "hello from the SDK"
    assert steps["download_data"] == ["rows.jsonl"]
    assert "s3://sagemaker-us-east-1-000000000000/sdk-test/hello.txt" in steps["list"]
    assert steps["predict"] == [22.0, 46.0]
    assert steps["transform"] == ["[22.0]", "[46.0]", "[70.0]"]
    assert steps["deleted"] == []
    # Transformer.transform(wait=True, logs=True) printed the job's own log (read from CloudWatch Logs): the
    # run's summary lines, which nothing else in this process prints
    assert "objects: 1 done, 0 failed" in run.stdout and "records: 3 out" in run.stdout, run.stdout


@pytest.mark.timeout(600)
def test_the_readmes_sdk_quickstart_runs_as_written(tmp_path: Path) -> None:
    """The README's SageMaker SDK block (marked ``<!-- sdk-example``), in a folder holding what it names: data/ with
    a training CSV, rows/ with feature rows, and train.py (this folder's script-mode script)."""
    text = (HERE.parents[2] / "README.md").read_text()
    match = re.search(r"<!-- sdk-example[^\n]*-->\n```python\n(.*?)\n```\n", text, re.DOTALL)
    assert match, "the README marks its SDK quickstart with <!-- sdk-example"
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "train.csv").write_text("".join(f"{2 * x + 1},{x}\n" for x in range(20)))
    (work / "rows").mkdir()
    (work / "rows" / "rows.csv").write_text("5\n6\n")
    (work / "train.py").write_text((HERE / "train.py").read_text())
    (work / "quickstart.py").write_text(match.group(1) + '\nprint("STEP done true")\n')
    run, steps = run_sdk(tmp_path, work / "quickstart.py", cwd=work)
    assert steps["done"] is True, run.stdout[-3000:]


@pytest.mark.timeout(600)
def test_an_estimator_with_network_isolation_runs_unchanged(tmp_path: Path) -> None:
    """enable_network_isolation=True (issue 44): the code comes as the `code` channel, the script reaches nothing."""
    run, steps = run_sdk(tmp_path, "sdk_isolated.py", HERE / "isolated_train.py", tmp_path / "work")
    assert steps["status"] == "Completed" and steps["isolated"] is True
    assert steps["channels"] == ["code", "train"]
    assert str(steps["model_data"]).endswith("/output/model.tar.gz")
    assert "isolated: reached the plane False" in run.stdout  # fit(logs="All") printed the script's line


@pytest.mark.timeout(600)
def test_an_sklearn_processor_and_estimator_run_unchanged(tmp_path: Path) -> None:
    args = (HERE / "train.py", HERE / "preprocess.py", HERE / "tune.py", tmp_path / "work")
    run, steps = run_sdk(tmp_path, "sdk_training.py", *args)
    assert steps["processing"] == "Completed"
    assert "preprocess kept 20 of 21 rows" in run.stdout  # processor.run(logs=True) printed the script's line
    assert steps["status"] == "Completed"
    assert steps["model_data"].startswith("s3://sagemaker-us-east-1-000000000000/")
    assert steps["model_data"].endswith("/output/model.tar.gz")
    assert steps["metrics"] == {"train:r2": 1.0}
    assert steps["predict"] == pytest.approx([7.0, 9.0])  # y = 2x + 1, fitted exactly
    assert [float(v) for v in steps["transform"]] == pytest.approx([11.0, 13.0])
    tuning = steps["tuning"]
    assert isinstance(tuning, dict) and len(tuning["scores"]) == 6
    assert tuning["scores"][tuning["best"]] == max(tuning["scores"].values())
    assert steps["xgboost"] == {"status": "Completed", "metrics": ["train:rmse"]}
    # fit(logs="All") printed the script's own lines, read back from CloudWatch Logs
    assert "note=from the sdk hosts=['algo-1']" in run.stdout, run.stdout


@pytest.mark.timeout(600)
def test_a_two_host_pytorch_job_a_failing_script_and_max_run(tmp_path: Path) -> None:
    args = (HERE / "dist_train.py", HERE / "fail_train.py", HERE / "slow_train.py")
    run, steps = run_sdk(tmp_path, "sdk_jobs_more.py", *args)
    assert steps["pytorch"]["status"] == "Completed"
    # fit(logs="All") printed both hosts' lines, read back from their CloudWatch Logs streams
    assert "host algo-1 rank 0 of 2 sum=3.0" in run.stdout, run.stdout
    assert "host algo-2 rank 1 of 2 sum=3.0" in run.stdout, run.stdout
    failing = steps["failing"]
    assert failing["status"] == "Failed"
    assert "ValueError: the label column is missing" in failing["reason"]
    assert "the label column is missing" in failing["raised"]
    assert steps["slow"] == {"status": "Stopped", "secondary": "MaxRuntimeExceeded"}


@pytest.mark.timeout(600)
def test_model_monitor_suggests_a_baseline_and_schedules_on_an_endpoint(tmp_path: Path) -> None:
    model = model_tar(tmp_path / "model.tar.gz")
    run, steps = run_sdk(tmp_path, "sdk_model_monitor.py", model, HERE / "inference.py", tmp_path / "work")
    assert str(steps["image"]).endswith("/sagemaker-model-monitor-analyzer")
    assert steps["baseline_job"] == "Completed"
    # suggest_baseline(logs=True) printed the analyzer's own log, read back from CloudWatch Logs
    assert "servekit analyzer: 1000 rows from 1 files, 2 features" in run.stdout, run.stdout
    assert steps["statistics_uri"] == (
        "s3://sagemaker-us-east-1-000000000000/model-monitor/sdk-baseline/statistics.json"
    )
    statistics = steps["statistics"]
    assert isinstance(statistics, dict) and statistics["item_count"] == 1000
    features = statistics["features"]
    assert list(features) == ["x", "y"] and [t for t, _ in features.values()] == ["Fractional", "Fractional"]
    assert abs(features["x"][1]) < 0.15 and abs(features["y"][1] - 5.0) < 0.3
    assert steps["constraints"] == {"features": {"x": 1.0, "y": 1.0}, "comparison_threshold": 0.1}
    assert steps["predict"] == [22.0]
    assert steps["schedule"] == {
        "name": True,
        "type": "DataQuality",
        "expression": "cron(0 * ? * * *)",
        "endpoint": True,
    }
    assert steps["found"] is True
    assert ["x", "baseline_drift_check"] in steps["violations"], steps["violations"]
    assert ["y", "baseline_drift_check"] not in steps["violations"], steps["violations"]
    assert steps["deleted"] == []


@pytest.mark.timeout(600)
def test_a_pipeline_of_the_sdks_workflow_steps_runs_unchanged(tmp_path: Path) -> None:
    work = tmp_path / "work"
    args = (HERE / "train.py", HERE / "tune.py", HERE / "pipe_prep.py", HERE / "pipe_evaluate.py")
    model = model_tar(tmp_path / "model.tar.gz")
    _, steps = run_sdk(tmp_path, "sdk_pipeline.py", *args, model, HERE / "inference.py", work)
    assert steps["described"] == "upserted twice: UpdatePipeline"
    assert steps["first_status"] == "Succeeded"
    assert steps["first_steps"] == dict.fromkeys(
        ("Prep", "Train", "Evaluate", "CheckR2", "Register-RegisterModel"), "Succeeded"
    )
    assert steps["approval"] == "PendingManualApproval"
    assert str(steps["statistics"]).endswith("/evaluation.json") and str(steps["statistics"]).startswith("s3://")
    assert steps["condition"] == {"Condition": {"Outcome": "True"}}
    assert steps["second_raised"] == "WaiterError"  # execution.wait() raises for a Failed execution, as on AWS
    assert steps["second"] == {"status": "Failed", "reason": "r2 below 1.5"}
    assert steps["second_fail"] == {"Fail": {"ErrorMessage": "r2 below 1.5"}}
    assert steps["second_cache"] is True  # the processing step's job reused
    assert steps["second_registered"] is False and steps["versions"] == 1
    more = steps["more_steps"]
    assert {k: v[0] for k, v in more.items()} == dict.fromkeys(
        ("Tune", "CreateModel-CreateModel", "Transform"), "Succeeded"
    ), more
    assert steps["tune_metadata"] == ["TuningJob"]
    assert steps["transform_out"] == ["[22.0]", "[46.0]"]
