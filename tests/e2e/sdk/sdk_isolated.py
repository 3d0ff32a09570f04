"""An SKLearn estimator with enable_network_isolation=True, run unchanged (make test-sdk): the SDK ships the source
directory as a `code` channel and points sagemaker_submit_directory into it; the script finds no network, not even
this machine's loopback, and its model still comes back."""

import json
import sys
from pathlib import Path

import sagemaker
from sagemaker.sklearn import SKLearn

ROLE = "arn:aws:iam::000000000000:role/servekit-sdk-test"


def step(name, value):
    print("STEP", name, json.dumps(value), flush=True)


script, work = Path(sys.argv[1]), Path(sys.argv[2])
session = sagemaker.Session()
(work / "data").mkdir(parents=True)
(work / "data" / "train.csv").write_text("".join(f"{2 * x + 1},{x}\n" for x in range(20)))
train_uri = session.upload_data(str(work / "data"), key_prefix="sdk-isolated/train")
estimator = SKLearn(
    entry_point=str(script),
    framework_version="1.2-1",
    instance_type="ml.m5.large",
    instance_count=1,
    role=ROLE,
    enable_network_isolation=True,
    sagemaker_session=session,
)
estimator.fit({"train": train_uri}, logs="All")
described = session.sagemaker_client.describe_training_job(TrainingJobName=estimator.latest_training_job.name)
step("status", described["TrainingJobStatus"])
step("isolated", described["EnableNetworkIsolation"])
step("channels", sorted(c["ChannelName"] for c in described["InputDataConfig"]))
step("model_data", estimator.model_data)
