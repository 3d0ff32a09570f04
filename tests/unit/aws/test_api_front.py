"""The wire layer as real botocore clients see it: codes, messages, extra error fields, scopes, timestamps."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from servekit.aws import Api, ApiError, Call, Credentials

MakeClient = Callable[..., Any]


def _error(exc: pytest.ExceptionInfo[ClientError]) -> dict[str, Any]:
    return dict(exc.value.response["Error"])


def test_create_describe_delete_round_trip(boto_client: MakeClient, api_keys: Credentials) -> None:
    sm = boto_client("sagemaker", api_keys.admin)
    arn = sm.create_endpoint(EndpointName="ep-1", EndpointConfigName="cfg")["EndpointArn"]
    assert arn.endswith(":endpoint/ep-1")
    described = sm.describe_endpoint(EndpointName="ep-1")
    assert described["EndpointStatus"] == "InService"
    assert isinstance(described["CreationTime"], datetime)
    assert described["CreationTime"].tzinfo is not None
    assert described["ResponseMetadata"]["RequestId"]
    sm.delete_endpoint(EndpointName="ep-1")
    with pytest.raises(ClientError) as e:
        sm.describe_endpoint(EndpointName="ep-1")
    assert _error(e) == {"Code": "ValidationException", "Message": 'Could not find endpoint "ep-1".'}
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400


def test_pattern_violation_is_a_validation_exception_in_the_services_words(
    boto_client: MakeClient, api_keys: Credentials
) -> None:
    sm = boto_client("sagemaker", api_keys.admin)
    with pytest.raises(ClientError) as e:
        sm.create_endpoint(EndpointName="bad name!", EndpointConfigName="x" * 64)
    err = _error(e)
    assert err["Code"] == "ValidationException"
    # the pattern as botocore 1.43's model spells it (no ``^``), matched against the whole value
    pattern = "Member must satisfy regular expression pattern: [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}"
    long = "x" * 64  # too long, and so also outside the pattern's {0,62}: both are reported
    assert err["Message"] == (
        f"3 validation errors detected: Value 'bad name!' at 'endpointName' failed to satisfy constraint: {pattern}; "
        f"Value '{long}' at 'endpointConfigName' failed to satisfy constraint: Member must have length less "
        f"than or equal to 63; Value '{long}' at 'endpointConfigName' failed to satisfy constraint: {pattern}"
    )


def test_nested_list_members_are_named_with_their_index(boto_client: MakeClient, api_keys: Credentials) -> None:
    sm = boto_client("sagemaker", api_keys.admin)
    with pytest.raises(ClientError) as e:
        sm.create_endpoint_config(
            EndpointConfigName="cfg",
            ProductionVariants=[
                {"VariantName": "a", "ModelName": "m", "InstanceType": "ml.m5.large", "InitialInstanceCount": 1},
                {
                    "VariantName": "b_",
                    "ModelName": "m",
                    "InstanceType": "ml.m5.large",
                    "InitialInstanceCount": 1,
                    "RoutingConfig": {"RoutingStrategy": "NEAREST"},
                },
            ],
        )
    message = _error(e)["Message"]
    assert message.startswith("2 validation errors detected: ")
    assert "Value 'b_' at 'productionVariants.2.member.variantName' failed to satisfy constraint" in message
    assert "Value 'NEAREST' at 'productionVariants.2.member.routingConfig.routingStrategy' failed to satisfy " \
        "constraint: Member must satisfy enum value set: [" in message  # fmt: skip


def test_waiter_endpoint_deleted_succeeds_on_validation_exception(
    boto_client: MakeClient, api_keys: Credentials
) -> None:
    sm = boto_client("sagemaker", api_keys.admin)
    sm.get_waiter("endpoint_deleted").wait(EndpointName="never-existed", WaiterConfig={"Delay": 0, "MaxAttempts": 1})
    sm.create_endpoint(EndpointName="ep", EndpointConfigName="cfg")
    sm.get_waiter("endpoint_in_service").wait(EndpointName="ep", WaiterConfig={"Delay": 0, "MaxAttempts": 1})


def test_model_error_extra_fields_reach_the_client(boto_client: MakeClient, api_keys: Credentials) -> None:
    boto_client("sagemaker", api_keys.admin).create_endpoint(EndpointName="ep", EndpointConfigName="cfg")
    rt = boto_client("sagemaker-runtime", api_keys.admin)
    with pytest.raises(ClientError) as e:
        rt.invoke_endpoint(EndpointName="ep", Body=b"fail", ContentType="text/csv")
    response = e.value.response
    assert response["Error"]["Code"] == "ModelError"
    assert response["Error"]["Message"].startswith("Received client error (422)")
    assert response["OriginalStatusCode"] == 422
    assert response["OriginalMessage"] == "bad input"
    assert response["LogStreamArn"].startswith("arn:aws:logs:")
    assert response["ResponseMetadata"]["HTTPStatusCode"] == 424
    assert isinstance(e.value, rt.exceptions.ModelError)


def test_invoke_endpoint_headers_and_body(boto_client: MakeClient, api_keys: Credentials, fake_hosting: Any) -> None:
    boto_client("sagemaker", api_keys.admin).create_endpoint(EndpointName="ep", EndpointConfigName="cfg")
    rt = boto_client("sagemaker-runtime", api_keys.admin)
    out = rt.invoke_endpoint(
        EndpointName="ep", Body=b"1,2,3", ContentType="text/csv", Accept="text/plain", CustomAttributes="k=v",
        TargetVariant="AllTraffic",
    )  # fmt: skip
    assert out["Body"].read() == b"3,2,1"
    assert out["ContentType"] == "text/plain"
    assert out["InvokedProductionVariant"] == "AllTraffic"
    assert out["CustomAttributes"] == "k=v"
    params = fake_hosting.calls[-1].params
    assert params == {
        "EndpointName": "ep", "Body": b"1,2,3", "ContentType": "text/csv", "Accept": "text/plain",
        "CustomAttributes": "k=v", "TargetVariant": "AllTraffic",
    }  # fmt: skip


def test_runtime_errors_carry_their_codes(boto_client: MakeClient, api_keys: Credentials) -> None:
    rt = boto_client("sagemaker-runtime", api_keys.admin)
    with pytest.raises(rt.exceptions.ValidationError) as e:
        rt.invoke_endpoint(EndpointName="nope", Body=b"x")
    assert e.value.response["Error"]["Message"] == "Endpoint nope of account 000000000000 not found."
    assert json.loads(rt.last_response.body) == {
        "ErrorCode": "NO_SUCH_ENDPOINT", "Message": "Endpoint nope of account 000000000000 not found."
    }  # fmt: skip
    assert rt.last_response.headers["x-amzn-ErrorType"].startswith("ValidationError:")
    with pytest.raises(rt.exceptions.ServiceUnavailable) as e2:
        rt.invoke_endpoint(EndpointName="down", Body=b"x")
    assert e2.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503


def test_runtime_header_members_are_validated(boto_client: MakeClient, api_keys: Credentials) -> None:
    rt = boto_client("sagemaker-runtime", api_keys.admin)
    with pytest.raises(ClientError) as e:
        rt.invoke_endpoint(EndpointName="bad name", Body=b"x", TargetVariant="v" * 64, CustomAttributes="é")
    err = _error(e)
    assert err["Code"] == "ValidationError"
    assert err["Message"].startswith("3 validation errors detected: Value 'bad name' at 'endpointName'")
    assert (
        "at 'targetVariant' failed to satisfy constraint: Member must have length less than or equal to 63"
        in err["Message"]
    )
    # CustomAttributes is a sensitive member: its value stays out of the message
    assert "Value at 'customAttributes' failed to satisfy constraint: Member must satisfy regular expression " \
        "pattern: \\p{ASCII}*" in err["Message"]  # fmt: skip


def test_invoke_endpoint_async_binds_headers_and_answers_202(boto_client: MakeClient, api_keys: Credentials) -> None:
    seen: list[Call] = []

    def dispatch(call: Call) -> dict[str, Any]:
        seen.append(call)
        return {"InferenceId": "abc", "OutputLocation": "s3://out/abc.out"}

    rt = boto_client("sagemaker-runtime", api_keys.admin, dispatch)
    out = rt.invoke_endpoint_async(EndpointName="ep", InputLocation="s3://b/k", RequestTTLSeconds=100)
    assert out["ResponseMetadata"]["HTTPStatusCode"] == 202
    assert out["InferenceId"] == "abc" and out["OutputLocation"] == "s3://out/abc.out"
    assert seen[0].operation == "InvokeEndpointAsync"
    assert seen[0].params == {"EndpointName": "ep", "InputLocation": "s3://b/k", "RequestTTLSeconds": 100}
    with pytest.raises(ClientError) as e:
        rt.invoke_endpoint_async(EndpointName="ep", InputLocation="s3://b/k", InvocationTimeoutSeconds=4000)
    assert _error(e)["Message"] == (
        "1 validation error detected: Value '4000' at 'invocationTimeoutSeconds' failed to satisfy constraint: "
        "Member must have value less than or equal to 3600"
    )


def test_invoke_only_key_is_refused_for_admin_operations(boto_client: MakeClient, api_keys: Credentials) -> None:
    invoker = api_keys.add_key("invoke", "app")
    sm = boto_client("sagemaker", invoker)
    with pytest.raises(ClientError) as e:
        sm.create_endpoint(EndpointName="ep", EndpointConfigName="cfg")
    err = _error(e)
    assert err["Code"] == "AccessDeniedException"
    assert "sagemaker:CreateEndpoint" in err["Message"]
    assert invoker.secret_access_key not in err["Message"]
    boto_client("sagemaker", api_keys.admin).create_endpoint(EndpointName="ep", EndpointConfigName="cfg")
    rt = boto_client("sagemaker-runtime", invoker)
    assert rt.invoke_endpoint(EndpointName="ep", Body=b"ab")["Body"].read() == b"ba"


def test_wrong_secret_is_invalid_signature(boto_client: MakeClient, api_keys: Credentials) -> None:
    from servekit.aws import AccessKey

    forged = AccessKey(api_keys.admin.access_key_id, "wrong" * 8, "admin")
    for service, call in (
        ("sagemaker", lambda c: c.describe_endpoint(EndpointName="x")),
        ("sagemaker-runtime", lambda c: c.invoke_endpoint(EndpointName="x", Body=b"1")),
    ):
        client = boto_client(service, forged)
        with pytest.raises(ClientError) as e:
            call(client)
        err = _error(e)
        assert err["Code"] == "InvalidSignatureException"
        assert err["Message"].startswith("The request signature we calculated does not match the signature")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        assert api_keys.admin.secret_access_key not in client.last_response.body.decode()


def test_unknown_access_key_is_unrecognized_client(boto_client: MakeClient) -> None:
    sm = boto_client("sagemaker", None)
    with pytest.raises(ClientError) as e:
        sm.list_endpoints()
    assert _error(e) == {
        "Code": "UnrecognizedClientException",
        "Message": "The security token included in the request is invalid.",
    }


def test_unsigned_request_is_missing_authentication_token(boto_client: MakeClient) -> None:
    from botocore import UNSIGNED
    from botocore.config import Config

    sm = boto_client("sagemaker", None, config=Config(signature_version=UNSIGNED))
    with pytest.raises(ClientError) as e:
        sm.list_endpoints()
    assert _error(e)["Code"] == "MissingAuthenticationTokenException"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403


def test_timestamps_in_and_out(boto_client: MakeClient, api_keys: Credentials) -> None:
    seen: list[Call] = []
    when = datetime(2024, 5, 6, 7, 8, 9, 500000, tzinfo=UTC)

    def dispatch(call: Call) -> dict[str, Any]:
        seen.append(call)
        return {"Endpoints": [{
            "EndpointName": "ep", "EndpointArn": "arn:aws:sagemaker:us-east-1:0:endpoint/ep", "CreationTime": when,
            "LastModifiedTime": when.replace(tzinfo=None), "EndpointStatus": "InService",
        }]}  # fmt: skip

    sm = boto_client("sagemaker", api_keys.admin, dispatch)
    out = sm.list_endpoints(CreationTimeAfter=datetime(2024, 1, 1, tzinfo=UTC), MaxResults=5)
    assert seen[0].params == {"CreationTimeAfter": datetime(2024, 1, 1, tzinfo=UTC), "MaxResults": 5}
    assert out["Endpoints"][0]["CreationTime"] == when
    assert out["Endpoints"][0]["LastModifiedTime"] == when  # naive datetimes are UTC
    assert json.loads(sm.last_response.body)["Endpoints"][0]["CreationTime"] == when.timestamp()


def test_application_autoscaling_and_cloudwatch_are_served_too(boto_client: MakeClient, api_keys: Credentials) -> None:
    seen: list[Call] = []

    def dispatch(call: Call) -> dict[str, Any]:
        seen.append(call)
        if call.operation == "PutMetricAlarm":
            raise ApiError("LimitExceeded", "The maximum number of alarms has been reached.")
        if call.operation == "DescribeAlarms":
            return {"MetricAlarms": [{"AlarmName": "a", "StateValue": "OK", "Threshold": 1}]}
        return {"ScalableTargetARN": "arn:aws:application-autoscaling:us-east-1:0:scalable-target/x"}

    aas = boto_client("application-autoscaling", api_keys.admin, dispatch)
    out = aas.register_scalable_target(
        ServiceNamespace="sagemaker", ResourceId="endpoint/ep/variant/v", MinCapacity=1, MaxCapacity=2,
        ScalableDimension="sagemaker:variant:DesiredInstanceCount",
    )  # fmt: skip
    assert out["ScalableTargetARN"].endswith("scalable-target/x")
    assert aas.sent[-1][2]["X-Amz-Target"] == "AnyScaleFrontendService.RegisterScalableTarget"
    with pytest.raises(ClientError) as e:
        aas.register_scalable_target(
            ServiceNamespace="nope", ResourceId="r", ScalableDimension="sagemaker:variant:DesiredInstanceCount"
        )
    assert _error(e)["Code"] == "ValidationException"
    assert (
        "Value 'nope' at 'serviceNamespace' failed to satisfy constraint: Member must satisfy enum value set"
        in _error(e)["Message"]
    )

    cw = boto_client("cloudwatch", api_keys.admin, dispatch)
    alarms = cw.describe_alarms(AlarmNames=["a"])["MetricAlarms"]
    assert alarms == [{"AlarmName": "a", "StateValue": "OK", "Threshold": 1.0}]
    assert cw.sent[-1][2]["X-Amz-Target"] == "GraniteServiceVersion20100801.DescribeAlarms"
    assert cw.sent[-1][2]["Content-Type"] == "application/x-amz-json-1.0"
    with pytest.raises(cw.exceptions.LimitExceededFault) as e2:
        cw.put_metric_alarm(
            AlarmName="a", EvaluationPeriods=1, ComparisonOperator="GreaterThanThreshold", MetricName="m",
            Namespace="n", Period=60, Statistic="Sum", Threshold=1.0,
        )  # fmt: skip
    assert e2.value.response["Error"]["Code"] == "LimitExceeded"
    assert e2.value.response["Error"]["Message"] == "The maximum number of alarms has been reached."


def test_unknown_target_and_bad_json(wire_api: Api, api_keys: Credentials) -> None:
    # signed by botocore's own signer, then sent with a target no service has / a body that is not JSON
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials as BotoCredentials

    def signed(target: str, body: bytes) -> tuple[dict[str, str], bytes]:
        req = AWSRequest("POST", "http://127.0.0.1:8765/", data=body, headers={
            "X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.1",
        })  # fmt: skip
        key = api_keys.admin
        SigV4Auth(BotoCredentials(key.access_key_id, key.secret_access_key), "sagemaker", "us-east-1").add_auth(req)
        return {**dict(req.headers), "Host": "127.0.0.1:8765"}, body

    def dispatch(call: Call) -> dict[str, Any]:
        raise AssertionError("never dispatched")

    for target in ("SageMaker.NoSuchOperation", "Nope.ListEndpoints"):
        headers, body = signed(target, b"{}")
        resp = wire_api.handle("POST", "/", headers, body, dispatch)
        assert resp is not None and resp.status == 400
        assert json.loads(resp.body)["__type"] == "UnknownOperationException"
    for body, fragment in (
        (b"{not json", "not valid JSON"),
        (b"[1]", "Start of list"),
        (b'{"MaxResults": "5"}', "STRING_VALUE can not be converted to an Integer"),
    ):
        headers, body = signed("SageMaker.ListEndpoints", body)
        resp = wire_api.handle("POST", "/", headers, body, dispatch)
        assert resp is not None and resp.status == 400
        answer = json.loads(resp.body)
        assert answer["__type"] == "SerializationException"
        assert fragment in answer["message"]


def test_not_an_aws_request_is_left_to_the_app(wire_api: Api) -> None:
    assert wire_api.handle("GET", "/ping", {}, b"", lambda c: {}) is None
    assert wire_api.handle("GET", "/endpoints/x/invocations", {}, b"", lambda c: {}) is None


def test_a_handler_crash_is_internal_failure_without_details(boto_client: MakeClient, api_keys: Credentials) -> None:
    def dispatch(call: Call) -> dict[str, Any]:
        raise RuntimeError("secret internals")

    sm = boto_client("sagemaker", api_keys.admin, dispatch)
    with pytest.raises(ClientError) as e:
        sm.list_endpoints()
    assert _error(e)["Code"] == "InternalFailure"
    assert "secret internals" not in _error(e)["Message"]


def test_strict_output_refuses_results_that_do_not_fit(boto_client: MakeClient, api_keys: Credentials) -> None:
    sm = boto_client("sagemaker", api_keys.admin, lambda call: {"EndpointArn": "a", "Bogus": 1})
    with pytest.raises(ClientError) as e:
        sm.create_endpoint(EndpointName="ep", EndpointConfigName="cfg")
    assert _error(e)["Code"] == "InternalFailure"
    lenient = Api(api_keys)
    sm2 = boto_client("sagemaker", api_keys.admin, lambda call: {"EndpointArn": "a", "CostPerHour": 0.1}, lenient)
    assert sm2.create_endpoint(EndpointName="ep", EndpointConfigName="cfg")["EndpointArn"] == "a"
    assert json.loads(sm2.last_response.body) == {"EndpointArn": "a", "CostPerHour": 0.1}


def test_response_stream_events_are_read_by_boto3(boto_client: MakeClient, api_keys: Credentials) -> None:
    from servekit.aws.eventstream import payload_part, stream_error

    stream = payload_part(b"hel") + payload_part(b"lo") + stream_error("ModelStreamError", "died", "MODEL_ERR")

    def dispatch(call: Call) -> dict[str, Any]:
        assert call.operation == "InvokeEndpointWithResponseStream"
        assert call.params["Body"] == b"x"
        # a streaming gateway writes the frames as they come; here the whole stream is one body
        return {"Body": stream, "ContentType": "text/plain", "InvokedProductionVariant": "AllTraffic"}

    rt = boto_client("sagemaker-runtime", api_keys.admin, dispatch)
    out = rt.invoke_endpoint_with_response_stream(EndpointName="ep", Body=b"x")
    assert out["ContentType"] == "text/plain"
    assert out["InvokedProductionVariant"] == "AllTraffic"
    assert rt.last_response.headers["Content-Type"] == "application/vnd.amazon.eventstream"
    events = iter(out["Body"])
    assert next(events) == {"PayloadPart": {"Bytes": b"hel"}}
    assert next(events) == {"PayloadPart": {"Bytes": b"lo"}}
    with pytest.raises(ClientError) as e:
        next(events)
    assert e.value.response["Error"]["Code"] == "ModelStreamError"
    assert e.value.response["Error"]["Message"] == "died"


DEEP_OBJECT = b'{"a":' * 1500 + b"1" + b"}" * 1500


@pytest.mark.parametrize(
    ("body", "code"),
    [
        # out of the years a datetime holds: OverflowError in the parser before
        (b'{"LastModifiedTimeBefore": 1e20}', "ValidationException"),
        (b'{"CreationTimeAfter": -1e308}', "ValidationException"),
        # nested past the recursion limit: RecursionError in the JSON parser before
        (b"[" * 2000 + b"]" * 2000, "SerializationException"),
        (DEEP_OBJECT, "SerializationException"),
    ],
    ids=["time-1e20", "time--1e308", "list-2000-deep", "object-1500-deep"],
)
def test_hostile_json_bodies_are_400s_not_500s(
    boto_client: MakeClient, api_keys: Credentials, body: bytes, code: str
) -> None:
    sm = boto_client("sagemaker", api_keys.admin)

    def raw_body(request: Any, **_: Any) -> None:
        request.data = body  # what a hand-made client sends; botocore itself refuses to serialize these

    sm.meta.events.register("before-sign.sagemaker.ListEndpoints", raw_body)
    with pytest.raises(ClientError) as e:
        sm.list_endpoints()
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert _error(e)["Code"] == code, _error(e)


@pytest.mark.parametrize("value", [1e20, -1e308, 1e308, "1e300"])
def test_timestamps_past_the_years_a_timestamp_holds_are_out_of_range(value: object) -> None:
    """Every protocol's parser (JSON, query, XML) takes timestamps through parse_timestamp."""
    from servekit.aws.timestamps import TimestampOutOfRange, parse_timestamp

    with pytest.raises(TimestampOutOfRange, match="out of the range of timestamps"):
        parse_timestamp(value)
