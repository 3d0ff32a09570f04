"""The console's training, processing and tuning job pages on a real ``servekit up``: jobs made through boto3 (the
training, processing and tuning e2e tests' own requests and scripts) show on the lists and on their pages as the
API describes them — status, failure reason, model artifact, hyperparameters, inputs, the metric chart's values as
the job's log lines say them, the tuning job's training jobs with their objective values and the best one marked —
and a name that does not exist is a clear 404."""

from __future__ import annotations

import html
import re

import botocore.exceptions
import pytest
import requests
from botocore.waiter import WaiterModel, create_waiter_with_client
from tests.e2e import test_processing_jobs as processing_e2e
from tests.e2e import test_training_jobs as training_e2e
from tests.e2e import test_tuning_jobs as tuning_e2e
from tests.e2e.test_training_jobs import FAST, TRAIN, clients, job

from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
up = training_e2e.up  # the training tests' servekit up (module-scoped: this module gets its own)

# botocore has no waiter for tuning jobs (the SDK polls DescribeHyperParameterTuningJob): the same, as a waiter
_TUNING = WaiterModel(
    {
        "version": 2,
        "waiters": {
            "TuningJobEnded": {
                "operation": "DescribeHyperParameterTuningJob",
                "delay": 1,
                "maxAttempts": 300,
                "acceptors": [
                    {"state": "success", "matcher": "path", "argument": "HyperParameterTuningJobStatus", "expected": s}
                    for s in ("Completed", "Failed", "Stopped")
                ],
            }
        },
    }
)


def get(up: UpProcess, path: str, status: int = 200) -> requests.Response:
    r = requests.get(up.url + path, timeout=30)
    assert r.status_code == status, (path, r.status_code, r.text[-2000:])
    return r


def row_of(page: str, name: str) -> str:
    """The table row whose job link is ``name`` (each list links a job by ``data-job``)."""
    rows = [r for r in re.findall(r"<tr>(.*?)</tr>", page, re.S) if f'data-job="{html.escape(name)}"' in r]
    assert len(rows) == 1, (name, rows)
    return rows[0]


def test_training_jobs_show_their_status_facts_metrics_and_log(up: UpProcess) -> None:
    sm, s3, logs = clients(up)
    sm.create_training_job(**job(s3, "console-fit", TRAIN))
    failing = "raise ValueError('the learning rate must be positive')\n"
    sm.create_training_job(**job(s3, "console-fail", failing))
    waiter = sm.get_waiter("training_job_completed_or_stopped")
    waiter.wait(TrainingJobName="console-fit", WaiterConfig=FAST)
    with pytest.raises(botocore.exceptions.WaiterError):
        waiter.wait(TrainingJobName="console-fail", WaiterConfig=FAST)
    fit = sm.describe_training_job(TrainingJobName="console-fit")
    fail = sm.describe_training_job(TrainingJobName="console-fail")
    assert (fit["TrainingJobStatus"], fail["TrainingJobStatus"]) == ("Completed", "Failed")

    listed = get(up, "/console/training").text
    row = row_of(listed, "console-fit")
    assert ">Completed<" in row and "validation:accuracy = 0.91" in row and "1 &times; ml.m5.large" in row
    failed = row_of(listed, "console-fail")
    assert ">Failed<" in failed and html.escape(fail["FailureReason"]) in failed

    page = get(up, "/console/training/console-fit").text
    facts = page.split('data-live="job"', 1)[1].split("</section>", 1)[0]
    assert ">Completed<" in facts
    assert f'<code data-field="artifact">{fit["ModelArtifacts"]["S3ModelArtifacts"]}</code>' in facts
    assert "<td><code>alpha</code></td><td><code>0.5</code></td>" in page  # as the API holds it
    assert f"<code>s3://{training_e2e.BUCKET}/data/console-fit</code>" in page
    assert "<td>0.91</td>" in page  # FinalMetricDataList
    assert "validation:accuracy=0.91" in page.split('<h2 id="h-logs">Logs</h2>', 1)[1]

    # the chart: each line of the job's log that the metric's regex matches, at the line's time
    group = "/aws/sagemaker/TrainingJobs"
    (stream,) = logs.describe_log_streams(logGroupName=group, logStreamNamePrefix="console-fit/")["logStreams"]
    events = logs.get_log_events(logGroupName=group, logStreamName=stream["logStreamName"], startFromHead=True)
    matched = [e for e in events["events"] if "validation:accuracy=" in e["message"]]
    live = get(up, "/console/api/training/console-fit").json()
    (chart,) = live["charts"]
    assert chart["key"] == "metric:validation:accuracy"
    assert chart["data"] == [[e["timestamp"] / 1000 for e in matched], [0.75, 0.91]]
    assert live["job"]["TrainingJobStatus"] == "Completed" and "Completed" in live["html"]["transitions"]

    failed_page = get(up, "/console/training/console-fail").text
    assert ">Failed<" in failed_page and html.escape(fail["FailureReason"]) in failed_page
    missing = get(up, "/console/training/no-such-job", 404).text
    assert "No training job named no-such-job." in missing
    get(up, "/console/api/training/no-such-job", 404)


def test_a_processing_job_shows_its_status_inputs_outputs_and_log(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    sm.create_processing_job(**processing_e2e.request(s3, "console-clean", processing_e2e.CLEAN))
    sm.get_waiter("processing_job_completed_or_stopped").wait(ProcessingJobName="console-clean", WaiterConfig=FAST)
    d = sm.describe_processing_job(ProcessingJobName="console-clean")
    assert d["ProcessingJobStatus"] == "Completed", d.get("FailureReason")

    assert ">Completed<" in row_of(get(up, "/console/processing").text, "console-clean")
    page = get(up, "/console/processing/console-clean").text
    assert "<code>python3 /opt/ml/processing/input/code/clean.py</code>" in page
    for i in d["ProcessingInputs"]:
        assert f"<code>{i['S3Input']['S3Uri']}</code>" in page
    for o in d["ProcessingOutputConfig"]["Outputs"]:
        assert f"<code>{o['S3Output']['S3Uri']}</code>" in page and f"<code>{o['S3Output']['LocalPath']}</code>" in page
    assert "cleaned 2 rows" in page.split('<h2 id="h-logs">Logs</h2>', 1)[1]
    assert "No processing job named nope." in get(up, "/console/processing/nope", 404).text


def test_a_tuning_job_shows_its_training_jobs_objectives_and_the_best_one(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    sm.create_hyper_parameter_tuning_job(**tuning_e2e.tuning(s3, "console-tune", "Random", jobs=3, parallel=2))
    create_waiter_with_client("TuningJobEnded", _TUNING, sm).wait(HyperParameterTuningJobName="console-tune")
    d = sm.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="console-tune")
    assert d["HyperParameterTuningJobStatus"] == "Completed", d.get("FailureReason")
    launched = sm.list_training_jobs_for_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="console-tune", MaxResults=100
    )["TrainingJobSummaries"]
    scores = {s["TrainingJobName"]: s["FinalHyperParameterTuningJobObjectiveMetric"]["Value"] for s in launched}
    best = d["BestTrainingJob"]["TrainingJobName"]
    assert len(scores) == 3 and scores[best] == max(scores.values())

    row = row_of(get(up, "/console/tuning").text, "console-tune")
    assert ">Completed<" in row and f'data-field="best">{best}</a> ({scores[best]})' in row
    assert "3 completed" in row

    page = get(up, "/console/tuning/console-tune").text
    table = page.split('data-live="training-jobs"', 1)[1]
    for name, value in scores.items():
        shown = row_of(table, name)
        assert f'<span data-field="objective">{value}</span>' in shown
        assert ('data-field="best-mark">best</span>' in shown) == (name == best)
        assert f'href="/console/training/{name}"' in shown
    live = get(up, "/console/api/tuning/console-tune").json()
    (chart,) = live["charts"]
    ended = sorted((s["TrainingEndTime"].timestamp(), s["TrainingJobName"]) for s in launched)
    assert chart["data"][0] == pytest.approx([t for t, _ in ended], abs=1e-3)
    assert chart["data"][1] == [scores[n] for _, n in ended]
    assert [m["label"] for m in chart["marks"]] == [f"best: {best}"]

    # its training jobs are training jobs too, each linking back to the search
    training = get(up, "/console/training").text
    assert all('<a href="/console/tuning/console-tune">console-tune</a>' in row_of(training, n) for n in scores)
    assert "No tuning job named nope." in get(up, "/console/tuning/nope", 404).text
