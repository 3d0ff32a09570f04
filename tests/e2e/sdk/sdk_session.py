"""The SageMaker Python SDK code a user writes, run unchanged by `make test-sdk` in a virtualenv of its own (the
SDK's, with no servekit in it) after `eval "$(servekit env)"`. Prints one ``STEP <name> <json>`` line per step."""

import json
import sys
from pathlib import Path

import sagemaker
from sagemaker.deserializers import JSONDeserializer
from sagemaker.predictor import Predictor
from sagemaker.s3 import S3Downloader, S3Uploader
from sagemaker.serializers import JSONSerializer
from sagemaker.sklearn import SKLearnModel
from sagemaker.transformer import Transformer

ROLE = "arn:aws:iam::000000000000:role/servekit-sdk-test"


def step(name, value):
    print("STEP", name, json.dumps(value), flush=True)


model_tar, entry_point, work = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
session = sagemaker.Session()
bucket = session.default_bucket()
step("bucket", bucket)

# upload_data / download_data, S3Uploader / S3Downloader
data_dir = work / "data"
data_dir.mkdir()
(data_dir / "rows.jsonl").write_text("[1.0, 2.0]\n[3.0, 4.0]\n[5.0, 6.0]\n")
input_uri = session.upload_data(str(data_dir), key_prefix="sdk-test/input")
step("upload_data", input_uri)
hello = f"s3://{bucket}/sdk-test/hello.txt"
S3Uploader.upload_string_as_file_body("hello from the SDK", hello, sagemaker_session=session)
step("read_file", S3Downloader.read_file(hello, sagemaker_session=session))
back = work / "back"
session.download_data(str(back), bucket, key_prefix="sdk-test/input")
step("download_data", sorted(p.name for p in back.rglob("*") if p.is_file()))
step("list", sorted(S3Downloader.list(f"s3://{bucket}/sdk-test", sagemaker_session=session)))

# a model.tar.gz deployed with SKLearnModel, invoked with predict(), then deleted
model_uri = S3Uploader.upload(str(model_tar), f"s3://{bucket}/sdk-test/model", sagemaker_session=session)
model = SKLearnModel(
    model_data=model_uri,
    role=ROLE,
    entry_point=str(entry_point),
    framework_version="1.2-1",
    sagemaker_session=session,
)
predictor = model.deploy(
    initial_instance_count=1,
    instance_type="ml.m5.large",
    serializer=JSONSerializer(),
    deserializer=JSONDeserializer(),
)
step("endpoint", predictor.endpoint_name)
step("predict", predictor.predict([[1.0, 2.0], [3.0, 4.0]]))

# batch transform through the same model, waiting and printing the job's log as the SDK does
transformer = Transformer(
    model_name=model.name,
    instance_count=1,
    instance_type="ml.m5.large",
    output_path=f"s3://{bucket}/sdk-test/output",
    accept="application/json",
    assemble_with="Line",
    sagemaker_session=session,
)
transformer.transform(input_uri, content_type="application/json", split_type="Line", wait=True, logs=True)
out = S3Downloader.read_file(f"s3://{bucket}/sdk-test/output/rows.jsonl.out", sagemaker_session=session)
step("transform", out.split())

Predictor(predictor.endpoint_name, sagemaker_session=session).delete_endpoint()
waiter = session.sagemaker_client.get_waiter("endpoint_deleted")
waiter.wait(EndpointName=predictor.endpoint_name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
model.delete_model()
step("deleted", [e["EndpointName"] for e in session.sagemaker_client.list_endpoints()["Endpoints"]])
