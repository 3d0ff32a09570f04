"""Plumbing for end-to-end tests of SageMaker's first-party algorithms (k-means, PCA, Random Cut Forest, Linear
Learner, Factorization Machines, LDA, k-NN) on a real ``servekit up`` through boto3, as the SDK drives them: a
CreateTrainingJob request over S3 channels, training and waiting for the job, deploying its artefact to an endpoint
and waiting, and reading the algorithms' RecordIO-protobuf answers back as label dicts. The tests keep their data
and their checks; these helpers are only the calls between them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import numpy.typing as npt

from servekit.serving.codecs import recordio_protobuf as rp
from servekit.testing.hosting import UpProcess

# The SDK's default bucket and a role for the account servekit up's admin key belongs to.
BUCKET = "sagemaker-us-east-1-000000000000"
ROLE = "arn:aws:iam::000000000000:role/SageMakerRole"
# boto3 waiters polling every second (their defaults poll every 30 to 60 seconds), for up to three minutes.
FAST = {"Delay": 1, "MaxAttempts": 180}
# The tensor kinds a RecordIO-protobuf ``Value`` holds numbers in.
_TENSOR_KINDS = frozenset({"float32_tensor", "float64_tensor", "int32_tensor"})


@contextmanager
def running_up(home: Path) -> Iterator[UpProcess]:
    """A ``servekit up`` with ``home`` as its home, started (``/ping`` answering) and stopped on exit: the body of a
    test module's ``up`` fixture, whatever its scope."""
    up = UpProcess(home)
    up.start()
    try:
        yield up
    finally:
        up.stop()


class TempPathFactory(Protocol):
    """What :func:`up_fixture` needs of pytest's ``tmp_path_factory``."""

    def mktemp(self, basename: str, numbered: bool = True) -> Path: ...


def up_fixture(name: str) -> Callable[[TempPathFactory], Iterator[UpProcess]]:
    """A test module's ``up`` fixture function: a :func:`running_up` in a fresh temporary folder ``name``. The
    module gives it its scope: ``up = pytest.fixture(scope="module")(algorithms.up_fixture("pca"))``."""

    def up(tmp_path_factory: TempPathFactory) -> Iterator[UpProcess]:
        with running_up(tmp_path_factory.mktemp(name) / "home") as process:
            yield process

    return up


def s3_uri(key: str) -> str:
    """``s3://BUCKET/<key>``: where a test's data, channels and artefacts live."""
    return f"s3://{BUCKET}/{key}"


def s3_channels(
    prefix: str, names: Sequence[str], content_types: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """InputDataConfig's channels, one per name, each the S3 prefix ``s3://BUCKET/<prefix>/<name>``; a channel named
    in ``content_types`` gets that ContentType (others none: RecordIO-protobuf for the algorithms)."""
    channels: list[dict[str, Any]] = []
    for name in names:
        source = {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": s3_uri(f"{prefix}/{name}")}}
        channel: dict[str, Any] = {"ChannelName": name, "DataSource": source}
        if content_types and name in content_types:
            channel["ContentType"] = content_types[name]
        channels.append(channel)
    return channels


def training_job_request(
    name: str,
    image: str,
    hyperparameters: Mapping[str, str],
    channels: Sequence[Mapping[str, Any]],
    output_path: str,
    instance_type: str = "ml.m4.xlarge",
) -> dict[str, Any]:
    """CreateTrainingJob's arguments for the algorithm ``image`` (File input mode, one ``instance_type`` instance,
    ml.m4.xlarge by default as in the SDK's tests, ten minutes at most) run as ``ROLE``, writing its artefact under
    ``output_path``."""
    return {
        "TrainingJobName": name,
        "RoleArn": ROLE,
        "AlgorithmSpecification": {"TrainingImage": image, "TrainingInputMode": "File"},
        "HyperParameters": dict(hyperparameters),
        "InputDataConfig": [dict(c) for c in channels],
        "OutputDataConfig": {"S3OutputPath": output_path},
        "ResourceConfig": {"InstanceType": instance_type, "InstanceCount": 1, "VolumeSizeInGB": 10},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }


def wait_for_training(sm: Any, name: str) -> dict[str, Any]:
    """The training job ``name``'s DescribeTrainingJob answer once it has completed or stopped; botocore's
    ``WaiterError`` when it failed (DescribeTrainingJob then says why)."""
    sm.get_waiter("training_job_completed_or_stopped").wait(TrainingJobName=name, WaiterConfig=FAST)
    answer: dict[str, Any] = sm.describe_training_job(TrainingJobName=name)
    return answer


def train(sm: Any, request: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """Creates the training job ``request`` (with ``extra`` arguments, such as ``Tags``) and waits for it:
    :func:`wait_for_training`'s answer."""
    sm.create_training_job(**request, **extra)
    return wait_for_training(sm, request["TrainingJobName"])


def create_model(sm: Any, name: str, image: str, artefact: str, **extra: Any) -> None:
    """CreateModel ``name``: the algorithm ``image`` over the model artefact ``artefact`` (an S3 URI), run as
    ``ROLE``; ``extra`` arguments (such as ``Tags``) go with it."""
    sm.create_model(
        ModelName=name,
        PrimaryContainer={"Image": image, "ModelDataUrl": artefact},
        ExecutionRoleArn=ROLE,
        **extra,
    )


def create_endpoint(sm: Any, name: str, instance_type: str = "ml.m5.large") -> None:
    """An endpoint config and an endpoint, both called ``name``, serving the model ``name`` on one instance
    (variant ``AllTraffic``); returns once the endpoint is InService."""
    variant = {"VariantName": "AllTraffic", "ModelName": name, "InitialInstanceCount": 1, "InstanceType": instance_type}
    sm.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[variant])
    sm.create_endpoint(EndpointName=name, EndpointConfigName=name)
    sm.get_waiter("endpoint_in_service").wait(EndpointName=name, WaiterConfig=FAST)


def deploy(sm: Any, name: str, image: str, artefact: str) -> None:
    """The model artefact ``artefact`` served by the algorithm ``image`` at the endpoint ``name`` (model, endpoint
    config and endpoint all called ``name``), once it is InService."""
    create_model(sm, name, image, artefact)
    create_endpoint(sm, name)


def decode_labels(body: bytes) -> list[dict[str, list[float]]]:
    """A RecordIO-protobuf answer's records, each its ``label`` map as a dict of name to the tensor's values (as
    the SDK's ``RecordDeserializer`` reads them: ``closest_cluster``, ``score``, ``projection``, ...)."""
    records = []
    for payload in rp.frames(body):
        record = rp.Record()
        record.ParseFromString(payload)
        labels: dict[str, list[float]] = {}
        for name, value in record.label.items():
            kind = value.WhichOneof("value")
            if kind not in _TENSOR_KINDS:
                raise ValueError(f"label {name!r} holds {kind or 'nothing'}, not a tensor of numbers")
            labels[name] = list(getattr(value, kind).values)
        records.append(labels)
    return records


def invoke_records(rt: Any, endpoint: str, rows: npt.ArrayLike) -> list[dict[str, list[float]]]:
    """InvokeEndpoint with ``rows`` as RecordIO-protobuf, asking for RecordIO-protobuf back: the answer's
    :func:`decode_labels`."""
    out = rt.invoke_endpoint(
        EndpointName=endpoint, Body=rp.write(rows), ContentType=rp.CONTENT_TYPE, Accept=rp.CONTENT_TYPE
    )
    return decode_labels(out["Body"].read())
