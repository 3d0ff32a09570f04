"""Training jobs on a real ``servekit up`` through boto3, as the SageMaker SDK sends them: a script-mode job on the
scikit-learn image sees SageMaker's contract at its real paths (``/opt/ml/...``, ``SM_*``, ``--name value``),
its model lands in S3 as model.tar.gz and its output in CloudWatch Logs; a failing script, a script writing outside
``/opt/ml``, MaxRuntimeInSeconds and StopTrainingJob end the job as SageMaker does."""

from __future__ import annotations

import datetime
import io
import json
import tarfile
import textwrap
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.exceptions
import botocore.waiter
import pytest

from servekit.aws import Credentials
from servekit.testing.hosting import UpProcess

pytestmark = pytest.mark.e2e
IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
BUCKET = "sagemaker-us-east-1-000000000000"
ROLE = "arn:aws:iam::000000000000:role/trainer"
FAST = {"Delay": 1, "MaxAttempts": 120}

TRAIN = """
import argparse, json, os, sys
p = argparse.ArgumentParser()
p.add_argument("--alpha", type=float)
p.add_argument("--tag", type=str)
a = p.parse_args()
rows = open(os.path.join(os.environ["SM_CHANNEL_TRAIN"], "data.csv")).read().split()
seen = {
    "alpha": a.alpha, "tag": a.tag, "rows": len(rows),
    "channels": json.loads(os.environ["SM_CHANNELS"]), "hosts": json.loads(os.environ["SM_HOSTS"]),
    "hp_file": json.load(open("/opt/ml/input/config/hyperparameters.json"))["alpha"],
    "cwd": os.getcwd(),
    "home_visible": os.path.exists(os.path.join(os.environ.get("SERVEKIT_PROBE", "/none"), "credentials.json")),
}
print("training with", json.dumps(seen))
print("validation:accuracy=0.75")
print("validation:accuracy=0.91")
with open(os.path.join(os.environ["SM_MODEL_DIR"], "model.json"), "w") as f:
    json.dump(seen, f)
"""


def tar_gz(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpProcess]:
    u = UpProcess(tmp_path_factory.mktemp("training") / "home")
    u.start()
    try:
        yield u
    finally:
        u.stop()


def clients(up: UpProcess) -> tuple[Any, Any, Any]:
    key = Credentials.load_or_create(up.home).admin
    kw = {
        "endpoint_url": up.url,
        "region_name": "us-east-1",
        "aws_access_key_id": key.access_key_id,
        "aws_secret_access_key": key.secret_access_key,
    }
    session = boto3.session.Session()
    return session.client("sagemaker", **kw), session.client("s3", **kw), session.client("logs", **kw)


def job(s3: Any, name: str, script: str, **extra: Any) -> dict[str, Any]:
    s3.put_object(Bucket=BUCKET, Key=f"{name}/source/sourcedir.tar.gz", Body=tar_gz({"train.py": script}))
    s3.put_object(Bucket=BUCKET, Key=f"data/{name}/data.csv", Body=b"1,2\n3,4\n5,6\n")
    hps = {
        "alpha": json.dumps(0.5),
        "tag": json.dumps("first run"),
        "sagemaker_program": json.dumps("train.py"),
        "sagemaker_submit_directory": json.dumps(f"s3://{BUCKET}/{name}/source/sourcedir.tar.gz"),
        "sagemaker_region": json.dumps("us-east-1"),
    }
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "RoleArn": ROLE,
        "AlgorithmSpecification": {
            "TrainingImage": IMAGE,
            "TrainingInputMode": "File",
            "MetricDefinitions": [{"Name": "validation:accuracy", "Regex": "validation:accuracy=([0-9.]+)"}],
        },
        "HyperParameters": hps,
        "InputDataConfig": [
            {
                "ChannelName": "train",
                "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/data/{name}"}},
            }
        ],
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/output"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 3600},
    }
    request.update(extra)
    return request


def test_a_script_mode_job_sees_sagemakers_contract_and_its_model_lands_in_s3(up: UpProcess) -> None:
    sm, s3, logs = clients(up)
    sm.create_training_job(**job(s3, "fit-1", TRAIN, Environment={"SERVEKIT_PROBE": str(up.home)}))
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="fit-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="fit-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    assert d["SecondaryStatus"] == "Completed"
    assert d["OutputDataConfig"] == {"KmsKeyId": "", "S3OutputPath": f"s3://{BUCKET}/output"}  # as AWS says it
    assert [t["Status"] for t in d["SecondaryStatusTransitions"]] == [
        "Starting",
        "Downloading",
        "Training",
        "Uploading",
        "Completed",
    ]
    assert d["FinalMetricDataList"][0]["MetricName"] == "validation:accuracy"
    assert d["FinalMetricDataList"][0]["Value"] == pytest.approx(0.91)
    artifacts = d["ModelArtifacts"]["S3ModelArtifacts"]
    assert artifacts == f"s3://{BUCKET}/output/fit-1/output/model.tar.gz"
    body = s3.get_object(Bucket=BUCKET, Key="output/fit-1/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        seen = json.load(tar.extractfile("model.json"))  # type: ignore[arg-type]
    assert seen == {
        "alpha": 0.5,
        "tag": "first run",
        "rows": 3,
        "channels": ["train"],
        "hosts": ["algo-1"],
        "hp_file": "0.5",
        "cwd": "/opt/ml/code",
        "home_visible": False,
    }
    streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="fit-1/")
    stream = streams["logStreams"][0]["logStreamName"]
    assert stream.startswith("fit-1/algo-1-")
    events = logs.get_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=stream, startFromHead=True)
    assert any("validation:accuracy=0.91" in e["message"] for e in events["events"])
    listed = sm.list_training_jobs(NameContains="fit-")["TrainingJobSummaries"]
    assert [j["TrainingJobName"] for j in listed] == ["fit-1"]


def test_a_failing_script_fails_the_job_with_its_last_line(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    failing = "import sys\nprint('about to fail')\nraise ValueError('the learning rate must be positive')\n"
    sm.create_training_job(**job(s3, "fail-1", failing))
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="fail-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="fail-1")
    assert d["TrainingJobStatus"] == "Failed"
    assert "ValueError: the learning rate must be positive" in d["FailureReason"]
    assert "exit code: 1" in d["FailureReason"]


def test_the_failure_file_and_writes_outside_opt_ml(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    script = textwrap.dedent(
        """
        try:
            open("/usr/evil.txt", "w")
        except OSError as exc:
            open("/opt/ml/output/failure", "w").write(f"refused: {exc.strerror}")
            raise SystemExit(2)
        """
    )
    sm.create_training_job(**job(s3, "outside-1", script))
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="outside-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="outside-1")
    assert (d["TrainingJobStatus"], d["FailureReason"]) == ("Failed", "refused: Read-only file system")


def test_max_runtime_and_stop_end_the_job_stopped(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    forever = "import time\nprint('working', flush=True)\nwhile True:\n    time.sleep(0.1)\n"
    sm.create_training_job(**job(s3, "slow-1", forever, StoppingCondition={"MaxRuntimeInSeconds": 2}))
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="slow-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="slow-1")
    assert (d["TrainingJobStatus"], d["SecondaryStatus"]) == ("Stopped", "MaxRuntimeExceeded")
    sm.create_training_job(**job(s3, "slow-2", forever))
    sm.stop_training_job(TrainingJobName="slow-2")
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="slow-2", WaiterConfig=FAST)
    assert sm.describe_training_job(TrainingJobName="slow-2")["TrainingJobStatus"] == "Stopped"


def test_bad_requests_get_clear_errors(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    bad_image = job(s3, "bad-1", TRAIN)
    bad_image["AlgorithmSpecification"]["TrainingImage"] = "123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:1"
    with pytest.raises(botocore.exceptions.ClientError) as image:
        sm.create_training_job(**bad_image)
    assert "not an image servekit runs" in image.value.response["Error"]["Message"]
    sm.create_training_job(**job(s3, "dup-1", TRAIN))
    with pytest.raises(botocore.exceptions.ClientError) as dup:
        sm.create_training_job(**job(s3, "dup-1", TRAIN))
    assert dup.value.response["Error"]["Code"] == "ResourceInUse"
    missing = job(s3, "nochannel-1", TRAIN)
    missing["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] = f"s3://{BUCKET}/no/such/prefix"
    sm.create_training_job(**missing)
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="nochannel-1", WaiterConfig=FAST)
    reason = sm.describe_training_job(TrainingJobName="nochannel-1")["FailureReason"]
    assert "channel train" in reason and "no such object or prefix" in reason
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="dup-1", WaiterConfig=FAST)


XGB_IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"


def builtin(s3: Any, name: str, train: bytes, **hps: str) -> dict[str, Any]:
    s3.put_object(Bucket=BUCKET, Key=f"xgb/{name}/train/train.csv", Body=train)
    s3.put_object(Bucket=BUCKET, Key=f"xgb/{name}/validation/validation.csv", Body=train)
    channels = [
        {
            "ChannelName": ch,
            "ContentType": "text/csv",
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"s3://{BUCKET}/xgb/{name}/{ch}"}},
        }
        for ch in ("train", "validation")
    ]
    return {
        "TrainingJobName": name,
        "RoleArn": ROLE,
        "AlgorithmSpecification": {"TrainingImage": XGB_IMAGE, "TrainingInputMode": "File"},
        "HyperParameters": hps,
        "InputDataConfig": channels,
        "OutputDataConfig": {"S3OutputPath": f"s3://{BUCKET}/xgb-output"},
        "ResourceConfig": {"InstanceType": "ml.m5.large", "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }


def test_the_builtin_xgboost_algorithm_trains_on_csv_with_the_label_first(up: UpProcess, tmp_path: Any) -> None:
    import xgboost

    sm, s3, _ = clients(up)
    rows = "".join(f"{3 * x + 2},{x},{x % 3}\n" for x in range(60)).encode()
    sm.create_training_job(
        **builtin(s3, "xgb-1", rows, num_round="20", objective="reg:squarederror", max_depth="3", eta="0.5")
    )
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="xgb-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="xgb-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    metrics = {m["MetricName"]: m["Value"] for m in d["FinalMetricDataList"]}
    assert set(metrics) == {"train:rmse", "validation:rmse"} and metrics["train:rmse"] < 5.0
    body = s3.get_object(Bucket=BUCKET, Key="xgb-output/xgb-1/output/model.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        tar.extractall(tmp_path, filter="data")
    booster = xgboost.Booster()  # XGBoost's UBJSON inside SageMaker's file name (XGBoost warns on a bare name)
    (tmp_path / "xgboost-model").rename(tmp_path / "model.ubj")
    booster.load_model(str(tmp_path / "model.ubj"))
    assert booster.num_boosted_rounds() == 20
    # deployed as the built-in algorithm's model is: its image, no script, the artefact holding only xgboost-model
    image = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-xgboost:1.7-1"
    artefact = d["ModelArtifacts"]["S3ModelArtifacts"]
    sm.create_model(ModelName="xgb-1", PrimaryContainer={"Image": image, "ModelDataUrl": artefact})
    variant = {"VariantName": "AllTraffic", "ModelName": "xgb-1", "InitialInstanceCount": 1}
    sm.create_endpoint_config(
        EndpointConfigName="xgb-1", ProductionVariants=[{**variant, "InstanceType": "ml.m5.large"}]
    )
    sm.create_endpoint(EndpointName="xgb-1", EndpointConfigName="xgb-1")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="xgb-1", WaiterConfig=FAST)
    out = up.rt().invoke_endpoint(EndpointName="xgb-1", Body=b"10,1\n20,2\n", ContentType="text/csv", Accept="text/csv")
    predicted = [float(v) for v in out["Body"].read().decode().replace("\n", ",").split(",") if v.strip()]
    assert len(predicted) == 2 and abs(predicted[0] - 32) < 4 and abs(predicted[1] - 62) < 4, predicted

    with pytest.raises(botocore.exceptions.ClientError) as missing:
        sm.create_training_job(**builtin(s3, "xgb-2", rows, objective="reg:squarederror"))
    assert "num_round" in missing.value.response["Error"]["Message"]
    sm.create_training_job(**builtin(s3, "xgb-3", b"a,b,c\n", num_round="2"))
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="xgb-3", WaiterConfig=FAST)
    reason = sm.describe_training_job(TrainingJobName="xgb-3")["FailureReason"]
    assert reason.startswith("ClientError: train.csv is not numeric CSV with the label first")


def test_a_malformed_hyperparameter_fails_the_job_with_the_scripts_own_message(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    request = job(s3, "badhp-1", TRAIN)
    request["HyperParameters"]["alpha"] = json.dumps("not-a-number")
    sm.create_training_job(**request)
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="badhp-1", WaiterConfig=FAST)
    reason = sm.describe_training_job(TrainingJobName="badhp-1")["FailureReason"]
    assert "argument --alpha: invalid float value: 'not-a-number'" in reason and "exit code: 2" in reason


CHECKPOINTED = """
import os, sys
folder = "/opt/ml/custom-checkpoints"
step = int(open(os.path.join(folder, "step")).read()) if os.path.exists(os.path.join(folder, "step")) else 0
step += 1
with open(os.path.join(folder, "step"), "w") as f:
    f.write(str(step))
print("resumed at step", step, flush=True)
if step == 1:
    raise SystemExit("interrupted after saving step 1")
"""


def test_checkpoints_survive_a_failed_job_and_a_rerun_resumes_from_them(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    uri = f"s3://{BUCKET}/checkpoints/resume"
    checkpoint = {"S3Uri": uri, "LocalPath": "/opt/ml/custom-checkpoints"}
    sm.create_training_job(**job(s3, "ckpt-1", CHECKPOINTED, CheckpointConfig=checkpoint))
    with pytest.raises(botocore.exceptions.WaiterError):
        sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="ckpt-1", WaiterConfig=FAST)
    assert sm.describe_training_job(TrainingJobName="ckpt-1")["TrainingJobStatus"] == "Failed"
    saved = s3.get_object(Bucket=BUCKET, Key="checkpoints/resume/step")["Body"].read()
    assert saved == b"1"  # uploaded although the job failed
    sm.create_training_job(**job(s3, "ckpt-2", CHECKPOINTED, CheckpointConfig=checkpoint))
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="ckpt-2", WaiterConfig=FAST)
    assert sm.describe_training_job(TrainingJobName="ckpt-2")["TrainingJobStatus"] == "Completed"
    assert s3.get_object(Bucket=BUCKET, Key="checkpoints/resume/step")["Body"].read() == b"2"


def test_metric_definitions_become_cloudwatch_metrics_and_a_bad_regex_is_refused(up: UpProcess) -> None:
    sm, s3, _ = clients(up)
    key = Credentials.load_or_create(up.home).admin
    cw = boto3.session.Session().client(
        "cloudwatch",
        endpoint_url=up.url,
        region_name="us-east-1",
        aws_access_key_id=key.access_key_id,
        aws_secret_access_key=key.secret_access_key,
    )
    sm.create_training_job(**job(s3, "metrics-1", TRAIN))
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="metrics-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="metrics-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    stats = cw.get_metric_statistics(
        Namespace="/aws/sagemaker/TrainingJobs",
        MetricName="validation:accuracy",
        Dimensions=[{"Name": "TrainingJobName", "Value": "metrics-1"}],
        StartTime=d["TrainingStartTime"] - datetime.timedelta(minutes=5),
        EndTime=d["TrainingEndTime"] + datetime.timedelta(minutes=5),
        Period=60,
        Statistics=["SampleCount", "Maximum", "Minimum"],
    )["Datapoints"]
    assert sum(p["SampleCount"] for p in stats) == 2  # the script printed the metric twice
    assert max(p["Maximum"] for p in stats) == pytest.approx(0.91)
    assert min(p["Minimum"] for p in stats) == pytest.approx(0.75)
    listed = cw.list_metrics(Namespace="/aws/sagemaker/TrainingJobs")["Metrics"]
    assert {
        "Namespace": "/aws/sagemaker/TrainingJobs",
        "MetricName": "validation:accuracy",
        "Dimensions": [{"Name": "TrainingJobName", "Value": "metrics-1"}],
    } in listed

    bad = job(s3, "metrics-2", TRAIN)
    bad["AlgorithmSpecification"]["MetricDefinitions"] = [{"Name": "loss", "Regex": "loss=([0-9.]+"}]
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        sm.create_training_job(**bad)
    assert "MetricDefinitions loss: 'loss=([0-9.]+' is not a regular expression" in str(refused.value)


GRACEFUL = """
import signal, sys, time
def on_term(signum, frame):
    open("/opt/ml/model/stopped.txt", "w").write("saved on SIGTERM")
    print("got SIGTERM, saved", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print("ready", flush=True)
while True:
    time.sleep(0.05)
"""


def test_stop_sends_the_script_sigterm_first(up: UpProcess) -> None:
    """StopTrainingJob is SIGTERM to the script itself (inside the sandbox), so it can save its state; SIGKILL would
    come only after the grace."""
    sm, s3, logs = clients(up)
    sm.create_training_job(**job(s3, "graceful-1", GRACEFUL))
    ready = botocore.waiter.create_waiter_with_client(
        "Ready",
        botocore.waiter.WaiterModel(
            {
                "version": 2,
                "waiters": {
                    "Ready": {
                        "operation": "FilterLogEvents",
                        "delay": 1,
                        "maxAttempts": 120,
                        "acceptors": [
                            {
                                "state": "success",
                                "matcher": "path",
                                "argument": "contains(events[].message, 'ready')",
                                "expected": True,
                            },
                            {"state": "retry", "matcher": "error", "expected": "ResourceNotFoundException"},
                        ],
                    }
                },
            }
        ),
        logs,
    )
    ready.wait(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="graceful-1/")
    sm.stop_training_job(TrainingJobName="graceful-1")
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="graceful-1", WaiterConfig=FAST)
    assert sm.describe_training_job(TrainingJobName="graceful-1")["TrainingJobStatus"] == "Stopped"
    events = logs.filter_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="graceful-1/")
    assert "got SIGTERM, saved" in [e["message"] for e in events["events"]]


def test_a_manifest_channel_gets_the_listed_objects_and_augmented_manifests_are_refused(up: UpProcess) -> None:
    sm, s3, logs = clients(up)
    for key in ("listed/a.csv", "listed/sub/b.csv", "listed/not-me.csv"):
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"1,2\n")
    manifest = json.dumps([{"prefix": f"s3://{BUCKET}/listed/"}, "a.csv", "sub/b.csv"])
    s3.put_object(Bucket=BUCKET, Key="manifests/train.json", Body=manifest.encode())
    lister = textwrap.dedent(
        """
        import os
        top = "/opt/ml/input/data/train"
        for root, _, names in sorted(os.walk(top)):
            for n in sorted(names):
                print("has", os.path.relpath(os.path.join(root, n), top))
        """
    )
    channel = {
        "ChannelName": "train",
        "DataSource": {"S3DataSource": {"S3DataType": "ManifestFile", "S3Uri": f"s3://{BUCKET}/manifests/train.json"}},
    }
    sm.create_training_job(**job(s3, "manifest-1", lister, InputDataConfig=[channel]))
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="manifest-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="manifest-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    events = logs.filter_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="manifest-1/")
    assert [e["message"] for e in events["events"] if e["message"].startswith("has ")] == ["has a.csv", "has sub/b.csv"]

    channel["DataSource"]["S3DataSource"]["S3DataType"] = "AugmentedManifestFile"
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        sm.create_training_job(**job(s3, "manifest-2", lister, InputDataConfig=[channel]))
    assert "S3DataType AugmentedManifestFile is not supported here" in str(refused.value)


XGB_SCRIPT = """
import os
import xgboost as xgb
from sagemaker_xgboost_container import encoder
from sagemaker_xgboost_container.data_utils import get_dmatrix

dtrain = get_dmatrix(os.environ["SM_CHANNEL_TRAIN"], "libsvm")
booster = xgb.train({"max_depth": 2, "objective": "reg:squarederror"}, dtrain, num_boost_round=3)
probe = encoder.decode("1.0,2.0\\n3.0,4.0", "text/csv")
print("rows", dtrain.num_row(), "features", dtrain.num_col(), "probe", probe.num_row())
booster.save_model(os.path.join(os.environ["SM_MODEL_DIR"], "xgboost-model"))
"""


def test_a_script_for_the_xgboost_container_imports_its_library(up: UpProcess) -> None:
    """Scripts written for SageMaker's XGBoost container import ``sagemaker_xgboost_container`` (the SDK's abalone
    example: ``get_dmatrix(channel, "libsvm")``); servekit puts its stand-in beside the script."""
    pytest.importorskip("xgboost")
    sm, s3, logs = clients(up)
    request = job(s3, "xgb-script-1", XGB_SCRIPT)
    request["AlgorithmSpecification"]["TrainingImage"] = XGB_IMAGE
    s3.put_object(Bucket=BUCKET, Key="data/xgb-script-1/data.csv", Body=b"1 1:0.5 2:1.0\n0 1:0.1\n1 2:3.0\n")
    sm.create_training_job(**request)
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName="xgb-script-1", WaiterConfig=FAST)
    d = sm.describe_training_job(TrainingJobName="xgb-script-1")
    assert d["TrainingJobStatus"] == "Completed", d.get("FailureReason")
    stream = logs.describe_log_streams(logGroupName="/aws/sagemaker/TrainingJobs", logStreamNamePrefix="xgb-script-1/")
    name = stream["logStreams"][0]["logStreamName"]
    events = logs.get_log_events(logGroupName="/aws/sagemaker/TrainingJobs", logStreamName=name, startFromHead=True)
    assert any("rows 3 features 3 probe 2" in e["message"] for e in events["events"])
