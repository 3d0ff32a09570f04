"""The console's training, processing and tuning job pages from fake API answers (as DescribeTrainingJob,
DescribeProcessingJob, DescribeHyperParameterTuningJob and ListTrainingJobsForHyperParameterTuningJob answer, epoch
seconds for times): lists, facts, the metric and objective charts, the best job marked in words, logs from the
job's own streams, escaping, and a clear 404 for a name that does not exist in each of the ways the API says so."""

from __future__ import annotations

import html
import json
import re
from typing import Any

from starlette.testclient import TestClient
from tests.unit.console.test_console_logs import EVIL, NOW, FakeApi, no_keys

from servekit.console import ApiFailure, ConsoleConfig, charts, create_app
from servekit.console.pages import processing, training, tuning
from servekit.console.render import NAV, duration

TUNING_ARN = "arn:aws:sagemaker:us-east-1:000000000000:hyper-parameter-tuning-job/search"
FIT = {
    "TrainingJobName": "fit-1",
    "TrainingJobArn": "arn:aws:sagemaker:us-east-1:000000000000:training-job/fit-1",
    "TrainingJobStatus": "InProgress",
    "SecondaryStatus": "Training",
    "AlgorithmSpecification": {
        "TrainingImage": "sagemaker-scikit-learn:1.2-1-cpu-py3",
        "TrainingInputMode": "File",
        "MetricDefinitions": [
            {"Name": "validation:accuracy", "Regex": "validation:accuracy=([0-9.]+)"},
            {"Name": "broken", "Regex": "(["},
        ],
    },
    "HyperParameters": {"alpha": "0.5", "tag": json.dumps(EVIL)},
    "InputDataConfig": [
        {
            "ChannelName": "train",
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://b/data/fit-1"}},
        }
    ],
    "OutputDataConfig": {"S3OutputPath": "s3://b/output"},
    "ModelArtifacts": {"S3ModelArtifacts": "s3://b/output/fit-1/output/model.tar.gz"},
    "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 2, "VolumeSizeInGB": 10},
    "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    "CreationTime": 1_700_000_000.0,
    "TrainingStartTime": 1_700_000_001.0,
    "SecondaryStatusTransitions": [
        {"Status": "Starting", "StartTime": 1_700_000_000.0, "EndTime": 1_700_000_001.0, "StatusMessage": "Preparing"},
        {"Status": "Training", "StartTime": 1_700_000_001.0, "StatusMessage": "Training in progress."},
    ],
    "TuningJobArn": TUNING_ARN,
}
DONE = {
    **FIT,
    "TrainingJobStatus": "Completed",
    "SecondaryStatus": "Completed",
    "TrainingEndTime": 1_700_000_066.0,
    "FinalMetricDataList": [{"MetricName": "validation:accuracy", "Value": 0.91, "Timestamp": 1_700_000_066.0}],
}
LOG = {
    "fit-1/algo-1-1700000000": [
        (1_700_000_002_000, "epoch 1 validation:accuracy=0.75"),
        (1_700_000_003_000, EVIL),
        (1_700_000_004_000, "epoch 2 validation:accuracy=0.91"),
    ],
    "fit-10/algo-1-1700000000": [(1_700_000_002_500, "validation:accuracy=0.11")],  # another job's stream
}


def console(api: Any) -> TestClient:
    return TestClient(create_app(api, no_keys, ConsoleConfig(clock=lambda: NOW)), follow_redirects=False)


def charts_of(page: str) -> list[dict[str, Any]]:
    found = re.search(r'id="charts" data-charts="([^"]*)"', page)
    assert found is not None
    loaded: list[dict[str, Any]] = json.loads(html.unescape(found.group(1)))
    return loaded


def test_durations_read_as_hours_minutes_and_seconds() -> None:
    assert duration(0, 45) == "45 s"
    assert duration(0, 185) == "3 min 05 s"
    assert duration(0, 3720) == "1 h 02 min"
    assert duration(10, None) == "—" and duration(10, 5) == "—"


def test_the_navigation_links_each_job_kind() -> None:
    assert ("/console/training", "Training") in NAV
    assert ("/console/processing", "Processing") in NAV
    assert ("/console/tuning", "Tuning") in NAV


def test_a_metric_is_charted_from_its_log_lines_or_else_its_final_value() -> None:
    definitions = FIT["AlgorithmSpecification"]["MetricDefinitions"]  # type: ignore[index]
    lines = [
        (2.0, "validation:accuracy=0.75 validation:accuracy=0.8"),
        (3.0, "nothing"),
        (4.0, "validation:accuracy=x"),
    ]
    final = [
        {"MetricName": "validation:accuracy", "Value": 0.91, "Timestamp": 9.0},
        {"MetricName": "train:rmse", "Value": 1.5, "Timestamp": 9.0},  # a built-in algorithm's: no definition
    ]
    got = charts.training_metric_charts(definitions, final, lines)
    assert [(c.key, c.title, c.unit, c.labels) for c in got] == [
        ("metric:validation:accuracy", "validation:accuracy", "value", ("validation:accuracy",)),
        ("metric:train:rmse", "train:rmse", "value", ("train:rmse",)),
    ]  # the uncompilable regex has no values and no chart
    assert got[0].data == ((2.0, 2.0), (0.75, 0.8))  # every match of a line, at its time
    assert got[1].data == ((9.0,), (1.5,))
    no_logs = charts.training_metric_charts(definitions, final, [])
    assert no_logs[0].data == ((9.0,), (0.91,))
    assert charts.training_metric_charts(definitions, [], []) == []


def test_the_training_list_shows_status_times_metrics_and_links() -> None:
    out = training.training_table([DONE, {**FIT, "TrainingJobName": EVIL, "FailureReason": EVIL}])
    assert '<a href="/console/training/fit-1" data-job="fit-1">fit-1</a>' in out
    assert "badge-good" in out and "validation:accuracy = 0.91" in out
    assert "2 &times; ml.m5.large" in out and "1 min 05 s" in out
    assert '<a href="/console/tuning/search">search</a>' in out
    assert "Training</span>" in out  # the running job's secondary status beside its status
    assert "<script>" not in out and "&lt;script&gt;" in out
    assert "none yet" in training.training_table([])


def test_a_training_jobs_page_shows_its_facts_metrics_chart_and_its_own_log_lines() -> None:
    api = FakeApi({training.GROUP: LOG}, {"DescribeTrainingJob": DONE})
    with console(api) as client:
        r = client.get("/console/training/fit-1")
        assert r.status_code == 200
        page = r.text
        assert "<script>alert" not in page
        assert 'data-src="/console/api/training/fit-1"' in page
        assert "s3://b/output/fit-1/output/model.tar.gz" in page and "(written when it completes)" not in page
        assert "s3://b/data/fit-1" in page and "<code>alpha</code>" in page and "&lt;script&gt;" in page
        assert "Preparing" in page and "Training in progress." in page
        assert '<a href="/console/tuning/search">search</a>' in page
        assert "<td>0.91</td>" in page  # the final metrics table
        shown = charts_of(page)
        assert [(c["key"], c["data"]) for c in shown] == [
            ("metric:validation:accuracy", [[1_700_000_002.0, 1_700_000_004.0], [0.75, 0.91]])
        ]  # fit-10's stream is not this job's
        logs = page.split('<h2 id="h-logs">Logs</h2>', 1)[1]
        assert "epoch 2 validation:accuracy=0.91" in logs and "0.11" not in logs
        assert f'href="/console/training/fit-1?refresh={int(NOW * 1000)}#h-logs"' in logs
        live = client.get("/console/api/training/fit-1").json()
        assert live["job"]["TrainingJobName"] == "fit-1"
        assert set(live["html"]) == {"job", "metrics", "transitions"}
        assert live["charts"] == shown
    running = FakeApi({}, {"DescribeTrainingJob": FIT})
    with console(running) as client:
        page = client.get("/console/training/fit-1").text
        assert "(written when it completes)" in page and "none yet: the job&#x27;s MetricDefinitions" in page
        assert "No logs yet in <code>/aws/sagemaker/TrainingJobs</code>" in page
        assert charts_of(page) == []


def test_unknown_jobs_are_a_clear_404_whichever_way_the_api_says_it() -> None:
    answers = {
        "DescribeTrainingJob": ApiFailure("ValidationException", "Requested resource not found: nope", 400),
        "DescribeProcessingJob": ApiFailure("ValidationException", "Could not find requested job with name nope", 400),
        "DescribeHyperParameterTuningJob": ApiFailure("ResourceNotFound", "can't find a tuning job named nope", 400),
    }
    with console(FakeApi({}, answers)) as client:
        for kind, what in (("training", "training job"), ("processing", "processing job"), ("tuning", "tuning job")):
            r = client.get(f"/console/{kind}/nope")
            assert r.status_code == 404, kind
            assert f"No {what} named nope." in r.text
            assert f'<a href="/console/{kind}">All {what}s</a>' in r.text
            assert client.get(f"/console/api/{kind}/nope").status_code == 404
    monitor = ApiFailure("ResourceNotFound", "Could not find processing job nope (servekit runs only …)", 400)
    with console(FakeApi({}, {"DescribeProcessingJob": monitor})) as client:
        assert client.get("/console/processing/nope").status_code == 404
    broken = ApiFailure("InternalFailure", "the plane broke", 500)
    with console(FakeApi({}, {"DescribeTrainingJob": broken})) as client:
        assert client.get("/console/training/x").status_code == 502
        assert client.get("/console/api/training/x").status_code == 502


CLEAN = {
    "ProcessingJobName": "clean-1",
    "ProcessingJobStatus": "Failed",
    "FailureReason": "AlgorithmError: RuntimeError: no rows, exit code: 1",
    "AppSpecification": {
        "ImageUri": "sagemaker-scikit-learn:1.2-1-cpu-py3",
        "ContainerEntrypoint": ["python3", "/opt/ml/processing/input/code/clean.py"],
        "ContainerArguments": ["--split", "0.2"],
    },
    "ProcessingResources": {"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.m5.xlarge"}},
    "ProcessingInputs": [
        {
            "InputName": "input-1",
            "S3Input": {"S3Uri": "s3://b/raw", "LocalPath": "/opt/ml/processing/input", "S3DataType": "S3Prefix"},
        }
    ],
    "ProcessingOutputConfig": {
        "Outputs": [
            {
                "OutputName": "train",
                "S3Output": {
                    "S3Uri": "s3://b/out",
                    "LocalPath": "/opt/ml/processing/train",
                    "S3UploadMode": "EndOfJob",
                },
            }
        ]
    },
    "CreationTime": 1_700_000_000.0,
    "ProcessingStartTime": 1_700_000_001.0,
    "ProcessingEndTime": 1_700_000_004.0,
}


def test_a_processing_jobs_list_and_page() -> None:
    out = processing.processing_table([CLEAN])
    assert '<a href="/console/processing/clean-1" data-job="clean-1">clean-1</a>' in out
    assert "badge-bad" in out and "no rows" in out and "1 &times; ml.m5.xlarge" in out and "3 s" in out
    group = {"clean-1/algo-1-1700000000": [(1_700_000_002_000, "cleaning")]}
    with console(FakeApi({processing.GROUP: group}, {"DescribeProcessingJob": CLEAN})) as client:
        page = client.get("/console/processing/clean-1").text
        assert "python3 /opt/ml/processing/input/code/clean.py" in page and "--split 0.2" in page
        assert "s3://b/raw" in page and "/opt/ml/processing/train" in page and "EndOfJob" in page
        assert 'data-src="/console/api/processing/clean-1"' in page
        assert "cleaning" in page.split('<h2 id="h-logs">Logs</h2>', 1)[1]
        live = client.get("/console/api/processing/clean-1").json()
        assert "no rows" in live["html"]["job"]
    stopped = {**CLEAN, "ProcessingJobStatus": "Stopped", "ExitMessage": "Stopped by the user"}
    stopped.pop("FailureReason")
    assert "Stopped by the user" in processing.job_facts(stopped)


def summary(name: str, value: float | None, ended: float, status: str = "Completed") -> dict[str, Any]:
    out: dict[str, Any] = {
        "TrainingJobName": name,
        "TrainingJobStatus": status,
        "TunedHyperParameters": {"alpha": str(value), "kind": '"a"'},
        "TrainingStartTime": ended - 2,
        "TrainingEndTime": ended,
        "ObjectiveStatus": "Succeeded" if value is not None else "Failed",
    }
    if value is not None:
        out["FinalHyperParameterTuningJobObjectiveMetric"] = {"Type": "Maximize", "MetricName": "score", "Value": value}
    return out


SEARCH = {
    "HyperParameterTuningJobName": "search",
    "HyperParameterTuningJobArn": TUNING_ARN,
    "HyperParameterTuningJobStatus": "Completed",
    "HyperParameterTuningJobConfig": {
        "Strategy": "Random",
        "HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "score"},
        "ResourceLimits": {"MaxNumberOfTrainingJobs": 3, "MaxParallelTrainingJobs": 2},
        "ParameterRanges": {
            "ContinuousParameterRanges": [{"Name": "alpha", "MinValue": "0", "MaxValue": "1"}],
            "CategoricalParameterRanges": [{"Name": "kind", "Values": ['"a"', '"b"']}],
        },
    },
    "TrainingJobDefinition": {
        "StaticHyperParameters": {"sagemaker_program": '"train.py"'},
        "AlgorithmSpecification": {"TrainingImage": "sagemaker-scikit-learn:1.2-1-cpu-py3"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1},
    },
    "TrainingJobStatusCounters": {"Completed": 2, "InProgress": 0, "RetryableError": 0, "NonRetryableError": 1},
    "ObjectiveStatusCounters": {"Succeeded": 2, "Pending": 0, "Failed": 1},
    "CreationTime": 1_700_000_000.0,
    "HyperParameterTuningEndTime": 1_700_000_030.0,
    "BestTrainingJob": summary("search-002", 0.97, 1_700_000_020.0),
}
LAUNCHED = [
    summary("search-003", None, 1_700_000_025.0, "Failed"),
    summary("search-002", 0.97, 1_700_000_020.0),
    summary("search-001", 0.5, 1_700_000_010.0),
]


class TuningApi:
    """DescribeHyperParameterTuningJob, and its training jobs one per ListTrainingJobsForHyperParameterTuningJob
    page (the console must follow NextToken)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, service: str, operation: str, params: dict[str, Any], acting: str | None) -> Any:
        if operation == "DescribeHyperParameterTuningJob":
            return SEARCH
        assert operation == "ListTrainingJobsForHyperParameterTuningJob"
        self.calls.append(params)
        start = int(params.get("NextToken", 0))
        return {
            "TrainingJobSummaries": LAUNCHED[start : start + 1],
            **({"NextToken": str(start + 1)} if start < 2 else {}),
        }


def test_a_tuning_jobs_page_marks_the_best_training_job_and_charts_the_objectives() -> None:
    out = tuning.tuning_table([SEARCH])
    assert '<a href="/console/tuning/search" data-job="search">search</a>' in out
    assert "2 completed, 0 in progress, 0 stopped, 1 failed" in out
    assert '<a href="/console/training/search-002" data-field="best">search-002</a> (0.97)' in out
    api = TuningApi()
    with console(api) as client:
        page = client.get("/console/tuning/search").text
        assert [c.get("NextToken") for c in api.calls] == [None, "1", "2"]
        table = page.split("Training jobs launched", 1)[1]
        rows = re.findall(r"<tr>(.*?)</tr>", table)
        best = [r for r in rows if 'data-field="best-mark">best</span>' in r]
        assert len(best) == 1 and "search-002" in best[0] and '<span data-field="objective">0.97</span>' in best[0]
        assert '<span data-field="objective">Failed</span>' in table  # the job without an objective says why
        assert "Maximize <code>score</code>" in page and "3 training jobs, 2 at once" in page
        assert "0 to 1" in page and "&quot;a&quot;, &quot;b&quot;" in page and "sagemaker_program" in page
        (chart,) = charts_of(page)
        assert chart["key"] == "objective" and chart["unit"] == "objective"
        assert chart["data"] == [[1_700_000_010.0, 1_700_000_020.0], [0.5, 0.97]]  # by end time
        assert chart["marks"] == [{"t": 1_700_000_020.0, "label": "best: search-002", "status": "best"}]
        live = client.get("/console/api/tuning/search").json()
        assert set(live["html"]) == {"job", "training-jobs"} and live["charts"] == [chart]
        assert [j["TrainingJobName"] for j in live["training_jobs"]] == ["search-003", "search-002", "search-001"]
