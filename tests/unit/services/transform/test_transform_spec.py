"""The transform job spec: CreateTransformJob in and out, defaults, validation at the edge."""

from __future__ import annotations

from typing import Any

import pytest

from servekit.errors import ConfigError, IllegalTransition
from servekit.services.transform.spec import (
    BatchStrategy,
    JoinSource,
    SplitType,
    TransformSpec,
    changed_fields,
    spec_from_request,
    spec_to_request,
)
from servekit.services.transform.status import TRANSITIONS, JobStatus, check_transition


def request(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "TransformJobName": "iris-batch-1",
        "ModelName": "/models/iris/1",
        "TransformInput": {
            "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "/data/in"}},
            "ContentType": "application/jsonlines",
            "SplitType": "Line",
        },
        "TransformOutput": {"S3OutputPath": "/data/out", "AssembleWith": "Line"},
        "TransformResources": {"InstanceType": "ml.m5.large", "InstanceCount": 2},
    }
    doc.update(over)
    return doc


def test_create_transform_job_shape_round_trips() -> None:
    doc = request(
        MaxConcurrentTransforms=4,
        MaxPayloadInMB=2,
        DataProcessing={"InputFilter": "$[1:]", "OutputFilter": "$[0,-1]", "JoinSource": "Input"},
        ModelClientConfig={"InvocationsTimeoutInSeconds": 30, "InvocationsMaxRetries": 1},
        Environment={"A": "1"},
        Tags=[{"Key": "team", "Value": "ml"}],
        DataCaptureConfig={"DestinationS3Uri": "s3://b/capture", "KmsKeyId": "k", "GenerateInferenceId": False},
    )
    spec = spec_from_request(doc)
    assert (spec.capture_destination, spec.capture_kms_key) == ("s3://b/capture", "k")
    assert spec_to_request(spec)["DataCaptureConfig"] == doc["DataCaptureConfig"]
    assert spec.split_type is SplitType.LINE
    assert spec.batch_strategy is BatchStrategy.MULTI  # the default once records are split
    assert spec.instance_count == 2 and spec.max_concurrent_transforms == 4
    assert spec.max_payload_bytes == 2 * 1024 * 1024
    assert spec.join_source is JoinSource.INPUT and spec.needs_records
    assert spec.invocation_timeout_s == 30 and spec.max_retries == 1
    assert spec.environment == (("A", "1"),) and spec.tags == (("team", "ml"),)
    assert spec_from_request(spec_to_request(spec)) == spec


def test_sagemaker_defaults() -> None:
    spec = spec_from_request(
        {
            "TransformJobName": "j",
            "ModelName": "/m/1",
            "TransformInput": {"DataSource": {"S3DataSource": {"S3Uri": "/in"}}},
            "TransformOutput": {"S3OutputPath": "/out"},
        }
    )
    assert spec.split_type is SplitType.NONE and spec.batch_strategy is BatchStrategy.SINGLE
    assert (spec.max_payload_mb, spec.max_concurrent_transforms, spec.instance_count) == (6, 1, 1)
    assert (spec.max_retries, spec.invocation_timeout_s) == (3, 600)
    assert spec.input_filter == spec.output_filter == "$" and not spec.needs_records


@pytest.mark.parametrize(
    ("over", "message"),
    [
        ({"TransformJobName": "bad_name!"}, "job name"),
        ({"EndpointUrl": "http://127.0.0.1:8080"}, "exactly one of"),
        ({"ModelName": ""}, "exactly one of"),
        ({"MaxConcurrentTransforms": 20, "MaxPayloadInMB": 6}, "<= 100"),
        ({"MaxPayloadInMB": 101}, "0..100"),
        ({"BatchStrategy": "Sometimes"}, "SingleRecord | MultiRecord"),
        ({"Unknown": 1}, "unknown field"),
        ({"DataCaptureConfig": {"DestinationS3Uri": "s3://x", "GenerateInferenceId": True}}, "not supported"),
        ({"DataCaptureConfig": {"KmsKeyId": "k"}}, "DestinationS3Uri is required"),
        ({"DataProcessing": {"InputFilter": "features"}}, r"InputFilter: .* must start with \$"),
        ({"DataProcessing": {"OutputFilter": "$[1:].x"}}, "several children"),
        ({"ModelClientConfig": {"InvocationsMaxRetries": 9}}, "0..3"),
        ({"TransformResources": {"InstanceCount": 0}}, "1..100"),
    ],
)
def test_bad_requests_are_refused_with_the_field_named(over: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        spec_from_request(request(**over))


def test_multirecord_needs_a_split_and_filters_need_text_records() -> None:
    tin = {"DataSource": {"S3DataSource": {"S3Uri": "/in"}}, "SplitType": "None"}
    with pytest.raises(ConfigError, match="MultiRecord needs a SplitType"):
        spec_from_request(request(TransformInput=tin, BatchStrategy="MultiRecord"))
    tin = {"DataSource": {"S3DataSource": {"S3Uri": "/in"}}, "SplitType": "RecordIO"}
    with pytest.raises(ConfigError, match="JSON and CSV records"):
        spec_from_request(request(TransformInput=tin, DataProcessing={"JoinSource": "Input"}))
    with pytest.raises(ConfigError, match="SplitType None only"):
        spec_from_request(request(MaxPayloadInMB=0))


def test_only_output_deciding_fields_block_a_resume() -> None:
    spec = spec_from_request(request())
    assert changed_fields(spec, spec.with_changes(instance_count=7, max_concurrent_transforms=3)) == []
    assert changed_fields(spec, spec.with_changes(accept="text/csv")) == ["accept"]


def test_job_status_transitions() -> None:
    assert check_transition(None, JobStatus.IN_PROGRESS) is JobStatus.IN_PROGRESS
    assert check_transition(JobStatus.STOPPED, JobStatus.IN_PROGRESS) is JobStatus.IN_PROGRESS
    assert check_transition(JobStatus.IN_PROGRESS, JobStatus.IN_PROGRESS)  # a re-run takes over a dead run
    for done in (JobStatus.COMPLETED, JobStatus.COMPLETED_WITH_ERRORS):
        assert done.terminal and TRANSITIONS[done] == frozenset()
        with pytest.raises(IllegalTransition):
            check_transition(done, JobStatus.IN_PROGRESS)
    with pytest.raises(IllegalTransition):
        check_transition(JobStatus.STOPPING, JobStatus.COMPLETED)
    with pytest.raises(IllegalTransition):
        check_transition(None, JobStatus.COMPLETED)
    assert set(TRANSITIONS) == {None, *JobStatus}


def test_a_spec_is_frozen() -> None:
    spec = TransformSpec(name="j", input_uri="/in", output_path="/out", model="/m/1")
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]
