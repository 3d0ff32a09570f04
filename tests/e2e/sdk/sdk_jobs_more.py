"""More of the SDK's training surface, run unchanged (make test-sdk): a PyTorch estimator with instance_count=2
whose script all-reduces over gloo; a failing script (fit raises, FailureReason has the exception); max_run
stopping a job."""

import json
import sys

import sagemaker
from sagemaker.exceptions import UnexpectedStatusException
from sagemaker.pytorch import PyTorch
from sagemaker.sklearn import SKLearn

ROLE = "arn:aws:iam::000000000000:role/servekit-sdk-test"


def step(name, value):
    print("STEP", name, json.dumps(value), flush=True)


dist_py, fail_py, slow_py = sys.argv[1:4]
session = sagemaker.Session()

pytorch = PyTorch(
    entry_point=dist_py,
    framework_version="2.1",
    py_version="py310",
    instance_count=2,
    instance_type="ml.m5.large",
    role=ROLE,
    sagemaker_session=session,
)
pytorch.fit(logs="All")
described = session.sagemaker_client.describe_training_job(TrainingJobName=pytorch.latest_training_job.name)
step("pytorch", {"status": described["TrainingJobStatus"], "model_data": pytorch.model_data})

failing = SKLearn(
    entry_point=fail_py, framework_version="1.2-1", instance_type="ml.m5.large", role=ROLE, sagemaker_session=session
)
try:
    failing.fit(logs="None")
    step("failing", "fit returned")
except UnexpectedStatusException as exc:
    name = failing.latest_training_job.name
    d = session.sagemaker_client.describe_training_job(TrainingJobName=name)
    step("failing", {"raised": str(exc), "status": d["TrainingJobStatus"], "reason": d["FailureReason"]})

slow = SKLearn(
    entry_point=slow_py,
    framework_version="1.2-1",
    instance_type="ml.m5.large",
    role=ROLE,
    max_run=2,
    sagemaker_session=session,
)
slow.fit(logs="None")
d = session.sagemaker_client.describe_training_job(TrainingJobName=slow.latest_training_job.name)
step("slow", {"status": d["TrainingJobStatus"], "secondary": d["SecondaryStatus"]})
