"""Results written per the output shape: JSON protocols and rest-json."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from servekit.aws.models import service
from servekit.aws.protocol import JsonProtocol, RestJsonProtocol
from servekit.aws.serialize import OutputShapeError, json_structure, rest_output

SM = service("sagemaker")
RT = service("sagemaker-runtime")
WHEN = datetime(2024, 1, 2, 3, 4, 5, 250000, tzinfo=UTC)


def _describe() -> dict[str, object]:
    return {
        "EndpointName": "ep", "EndpointArn": "arn", "EndpointStatus": "InService", "CreationTime": WHEN,
        "LastModifiedTime": WHEN, "FailureReason": None,
        "ProductionVariants": [{"VariantName": "v", "CurrentWeight": 1, "CurrentInstanceCount": 2}],
    }  # fmt: skip


def test_timestamps_are_epoch_seconds_and_none_is_absent() -> None:
    op = SM.operation("DescribeEndpoint")
    assert op is not None
    out = json_structure(op.output_shape, _describe(), strict=True)
    assert out["CreationTime"] == WHEN.timestamp() == 1704164645.25
    assert "FailureReason" not in out
    assert out["ProductionVariants"] == [{"VariantName": "v", "CurrentWeight": 1.0, "CurrentInstanceCount": 2}]
    assert isinstance(out["ProductionVariants"][0]["CurrentWeight"], float)


def test_strict_mode_catches_unknown_keys_missing_members_and_wrong_types() -> None:
    op = SM.operation("DescribeEndpoint")
    assert op is not None
    with pytest.raises(OutputShapeError, match="Cost"):
        json_structure(op.output_shape, {**_describe(), "Cost": 1}, strict=True)
    with pytest.raises(OutputShapeError, match="EndpointStatus"):
        json_structure(op.output_shape, {**_describe(), "EndpointStatus": None}, strict=True)
    with pytest.raises(OutputShapeError, match=r"ProductionVariants.*CurrentInstanceCount"):
        bad = {**_describe(), "ProductionVariants": [{"VariantName": "v", "CurrentInstanceCount": "2"}]}
        json_structure(op.output_shape, bad, strict=True)
    # lenient: extension fields pass through as JSON
    assert json_structure(op.output_shape, {**_describe(), "Cost": WHEN})["Cost"] == WHEN.timestamp()


def test_json_error_bodies() -> None:
    from servekit.aws import ApiError

    proto = JsonProtocol(SM)
    resp = proto.error(ApiError("ResourceNotFound", "no such thing"))
    assert resp.status == 400
    assert json.loads(resp.body) == {"__type": "ResourceNotFound", "Message": "no such thing"}
    assert resp.headers["Content-Type"] == "application/x-amz-json-1.1"
    resp = proto.error(ApiError("ValidationException", "bad"))
    assert json.loads(resp.body) == {"__type": "ValidationException", "message": "bad"}
    cw = JsonProtocol(service("cloudwatch"))
    resp = cw.error(ApiError("ResourceNotFound", "no alarm", status=None))
    assert resp.status == 404  # the model's httpStatusCode
    assert resp.headers["x-amzn-query-error"] == "ResourceNotFound;Sender"
    assert resp.headers["Content-Type"] == "application/x-amz-json-1.0"


def test_rest_output_headers_payload_and_status() -> None:
    invoke = RT.operation("InvokeEndpoint")
    assert invoke is not None
    out = rest_output(
        invoke, {"Body": b"\x00raw", "ContentType": "application/x-npy", "InvokedProductionVariant": "blue"}, True
    )
    assert (out.status, out.body) == (200, b"\x00raw")
    assert out.headers == {"Content-Type": "application/x-npy", "x-Amzn-Invoked-Production-Variant": "blue"}
    async_op = RT.operation("InvokeEndpointAsync")
    assert async_op is not None
    out = rest_output(async_op, {"InferenceId": "i", "OutputLocation": "s3://o"}, True)
    assert out.status == 202
    assert json.loads(out.body) == {"InferenceId": "i"}
    assert out.headers["X-Amzn-SageMaker-OutputLocation"] == "s3://o"
    with pytest.raises(OutputShapeError):
        rest_output(invoke, {"Body": b"", "Nope": 1}, True)


def test_rest_routes_come_from_the_model() -> None:
    proto = RestJsonProtocol(RT)
    assert proto.operation_name("POST", "/endpoints/a%2Fb/invocations") == "InvokeEndpoint"
    assert proto.operation_name("POST", "/endpoints/ep/async-invocations") == "InvokeEndpointAsync"
    assert proto.operation_name("POST", "/endpoints/ep/invocations-response-stream") == (
        "InvokeEndpointWithResponseStream"
    )
    found = proto.match("POST", "/endpoints/a%2Fb/invocations")
    assert found is not None and found[1] == {"EndpointName": "a/b"}
    assert proto.match("GET", "/endpoints/ep/invocations") is None
    assert proto.match("POST", "/endpoints/ep/invocations/extra") is None
