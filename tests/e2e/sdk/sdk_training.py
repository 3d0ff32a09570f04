"""The SageMaker SDK's script-mode training, run unchanged (make test-sdk): an SKLearn estimator fits on data
uploaded with the SDK and prints the script's log; the job's model data and metrics come back through the SDK."""

import json
import sys
from pathlib import Path

import numpy as np
import sagemaker
from sagemaker import image_uris
from sagemaker.estimator import Estimator
from sagemaker.inputs import TrainingInput
from sagemaker.processing import ProcessingInput, ProcessingOutput
from sagemaker.s3 import S3Downloader
from sagemaker.sklearn import SKLearn
from sagemaker.sklearn.processing import SKLearnProcessor
from sagemaker.tuner import ContinuousParameter, HyperparameterTuner

ROLE = "arn:aws:iam::000000000000:role/servekit-sdk-test"


def step(name, value):
    print("STEP", name, json.dumps(value), flush=True)


train_py, preprocess_py, tune_py, work = (Path(a) for a in sys.argv[1:5])
session = sagemaker.Session()
raw = work / "raw"
raw.mkdir(parents=True)
(raw / "raw.csv").write_text("".join(f"{2 * x + 1},{x}\n" for x in range(20)) + "7,\n")  # one row to drop
raw_uri = session.upload_data(str(raw), key_prefix="sdk-training/raw")

# an SKLearnProcessor whose script hard-codes /opt/ml/processing/... (run with logs=True: its lines printed)
processor = SKLearnProcessor(
    framework_version="1.2-1", role=ROLE, instance_type="ml.m5.large", instance_count=1, sagemaker_session=session
)
processor.run(
    code=str(preprocess_py),
    inputs=[ProcessingInput(source=raw_uri, destination="/opt/ml/processing/input")],
    outputs=[ProcessingOutput(output_name="train", source="/opt/ml/processing/train")],
    wait=True,
    logs=True,
)
job = processor.latest_job.describe()
step("processing", job["ProcessingJobStatus"])
train_uri = job["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"]
step("train_uri", train_uri)

estimator = SKLearn(
    entry_point=str(train_py),
    framework_version="1.2-1",
    instance_type="ml.m5.large",
    instance_count=1,
    role=ROLE,
    hyperparameters={"fit_intercept": True, "note": "from the sdk"},
    metric_definitions=[{"Name": "train:r2", "Regex": "r2=([0-9.]+)"}],
    sagemaker_session=session,
)
estimator.fit({"train": train_uri}, logs="All")
step("model_data", estimator.model_data)
described = session.sagemaker_client.describe_training_job(TrainingJobName=estimator.latest_training_job.name)
step("status", described["TrainingJobStatus"])
step("metrics", {m["MetricName"]: m["Value"] for m in described.get("FinalMetricDataList", [])})

# deploy the trained estimator (the framework's inference contract: train.py's model_fn, the toolkit's defaults)
predictor = estimator.deploy(initial_instance_count=1, instance_type="ml.m5.large")
step("predict", predictor.predict(np.array([[3.0], [4.0]])).tolist())

# and a batch transform of the same model, through estimator.transformer()
rows = work / "rows"
rows.mkdir()
(rows / "rows.csv").write_text("5\n6\n")
rows_uri = session.upload_data(str(rows), key_prefix="sdk-training/rows")
transformer = estimator.transformer(
    instance_count=1, instance_type="ml.m5.large", assemble_with="Line", accept="text/csv"
)
transformer.transform(rows_uri, content_type="text/csv", split_type="Line", wait=True, logs=False)
out = S3Downloader.read_file(f"{transformer.output_path}/rows.csv.out", sagemaker_session=session)
step("transform", out.split())
predictor.delete_endpoint()

# a HyperparameterTuner of 6 jobs, 2 at a time; its best job must be the one with the best score
tuned_estimator = SKLearn(
    entry_point=str(tune_py),
    framework_version="1.2-1",
    instance_type="ml.m5.large",
    role=ROLE,
    sagemaker_session=session,
)
tuner = HyperparameterTuner(
    tuned_estimator,
    objective_metric_name="score",
    hyperparameter_ranges={"alpha": ContinuousParameter(0.0, 1.0)},
    metric_definitions=[{"Name": "score", "Regex": "score=([-0-9.]+)"}],
    objective_type="Maximize",
    strategy="Random",
    max_jobs=6,
    max_parallel_jobs=2,
)
tuner.fit({"train": train_uri}, wait=True)
frame = tuner.analytics().dataframe()
step(
    "tuning",
    {
        "best": tuner.best_training_job(),
        "scores": dict(zip(frame["TrainingJobName"], frame["FinalObjectiveValue"], strict=True)),
    },
)

# SageMaker's built-in XGBoost algorithm (no script) on the processed CSV, label first
xgb = Estimator(
    image_uri=image_uris.retrieve("xgboost", session.boto_region_name, "1.7-1"),
    role=ROLE,
    instance_count=1,
    instance_type="ml.m5.large",
    output_path=f"s3://{session.default_bucket()}/sdk-training/xgb",
    sagemaker_session=session,
)
xgb.set_hyperparameters(objective="reg:squarederror", num_round=15, max_depth=3)
xgb.fit({"train": TrainingInput(train_uri, content_type="text/csv")}, logs=False)
done = session.sagemaker_client.describe_training_job(TrainingJobName=xgb.latest_training_job.name)
step(
    "xgboost", {"status": done["TrainingJobStatus"], "metrics": [m["MetricName"] for m in done["FinalMetricDataList"]]}
)
