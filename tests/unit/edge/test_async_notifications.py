"""Asynchronous inference's notifications: the message SageMaker publishes to the success and error topics, the
``--sns-webhook TOPIC_ARN=URL`` values, and what happens to a notification whose topic has no webhook or whose
webhook cannot be reached (counted in NotificationFailures, never dropped silently)."""

from __future__ import annotations

import asyncio
import base64
import socket
from pathlib import Path

import pytest

from servekit.edge.async_notifications import (
    AsyncNotifications,
    Outcome,
    iso_ms,
    notification_body,
    parse_webhooks,
    topic_for,
)
from servekit.services.cloudwatch.source import MetricQuery
from servekit.services.cloudwatch.store import MetricsStore
from servekit.services.database import StateDB

T0 = 1_643_150_760.455  # 2022-01-25T22:46:00.455Z
DONE = "arn:aws:sns:us-east-1:000000000000:done"
FAILED = "arn:aws:sns:us-east-1:000000000000:failed"


def outcome(**kw: object) -> Outcome:
    base: dict[str, object] = {
        "inference_id": "11111111-2222-3333-4444-555555555555",
        "endpoint": "ep",
        "variant": "A",
        "input_location": "s3://b/in/input-data.csv",
        "content_type": "text/csv",
        "received": T0,
        "ended": T0 + 0.153,
    }
    return Outcome(**{**base, **kw})  # type: ignore[arg-type]


def test_a_success_message_has_sagemakers_fields() -> None:
    ok = outcome(output_location="s3://b/out/x.out", output_content_type="text/csv; charset=utf-8", response=b"1,2")
    assert notification_body("us-east-1", ok, include_response=False) == {
        "awsRegion": "us-east-1",
        "eventTime": "2022-01-25T22:46:00.608Z",
        "receivedTime": "2022-01-25T22:46:00.455Z",
        "invocationStatus": "Completed",
        "requestParameters": {
            "contentType": "text/csv",
            "endpointName": "ep",
            "inputLocation": "s3://b/in/input-data.csv",
        },
        "responseParameters": {"contentType": "text/csv; charset=utf-8", "outputLocation": "s3://b/out/x.out"},
        "inferenceId": "11111111-2222-3333-4444-555555555555",
        "eventVersion": "1.0",
        "eventSource": "aws:sagemaker",
        "eventName": "InferenceResult",
    }
    assert notification_body("us-east-1", ok, include_response=True)["responseBody"] == {"content": "1,2"}


def test_an_error_message_has_the_reason_and_the_answer_only_when_asked_and_small() -> None:
    bad = outcome(failure_reason="ClientError: boom", failure_location="s3://b/fail/x-error.out", response=b"boom")
    body = notification_body("eu-west-1", bad, include_response=False)
    assert body["invocationStatus"] == "Failed" and body["failureReason"] == "ClientError: boom"
    assert body["responseParameters"] == {"contentType": "text/plain", "failureLocation": "s3://b/fail/x-error.out"}
    assert "responseBody" not in body and body["awsRegion"] == "eu-west-1"
    assert "responseParameters" not in notification_body("us-east-1", outcome(failure_reason="x"), False)
    binary = outcome(output_location="s3://b/o", response=b"\xff\x00")
    assert notification_body("us-east-1", binary, True)["responseBody"] == {
        "content": base64.b64encode(b"\xff\x00").decode(),
        "contentEncoding": "base64",
    }
    big = outcome(output_location="s3://b/o", response=b"x" * (128 * 1024 + 1))
    assert "responseBody" not in notification_body("us-east-1", big, True)  # over 128 KB: left in S3


def test_which_topic_and_whether_the_answer_rides_along() -> None:
    config = {"SuccessTopic": DONE, "ErrorTopic": FAILED, "IncludeInferenceResponseIn": ["ERROR_NOTIFICATION_TOPIC"]}
    assert topic_for(config, ok=True) == (DONE, False)
    assert topic_for(config, ok=False) == (FAILED, True)
    assert topic_for({}, ok=True) == (None, False)
    assert iso_ms(0.0) == "1970-01-01T00:00:00.000Z"


def test_webhook_values_are_parsed_and_bad_ones_say_what_is_expected() -> None:
    assert parse_webhooks([f"{DONE}=http://127.0.0.1:9/a", f"{FAILED}=https://h/b"]) == {
        DONE: "http://127.0.0.1:9/a",
        FAILED: "https://h/b",
    }
    for bad, says in [
        ("http://127.0.0.1:9/a", "expected TOPIC_ARN=URL"),
        ("arn:aws:sqs:us-east-1:000000000000:q=http://h/", "expected TOPIC_ARN=URL"),
        (f"{DONE}=ftp://h/", "must be http:// or https://"),
    ]:
        with pytest.raises(ValueError, match=says):
            parse_webhooks([bad])
    with pytest.raises(ValueError, match="two URLs"):
        parse_webhooks([f"{DONE}=http://h/1", f"{DONE}=http://h/2"])


def _failures(metrics: MetricsStore) -> float:
    dims = (("EndpointName", "ep"), ("VariantName", "A"))
    points = metrics.datapoints(MetricQuery("AWS/SageMaker", "NotificationFailures", dims, 60, "Sum"), 0, 2e9)
    return sum(v for _, v in points)


def test_a_topic_without_a_webhook_is_counted_and_an_unreachable_webhook_too(tmp_path: Path) -> None:
    db = StateDB.open(tmp_path)
    metrics = MetricsStore(db.metrics, clock=lambda: T0)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]

    async def run() -> AsyncNotifications:
        n = AsyncNotifications({FAILED: f"http://127.0.0.1:{closed}/hook"}, "us-east-1", metrics, attempts=1)
        config = {"SuccessTopic": DONE, "ErrorTopic": FAILED}
        n.send(config, outcome(output_location="s3://b/o"))  # no webhook for DONE
        n.send(config, outcome(output_location="s3://b/o"))
        n.send(config, outcome(failure_reason="boom"))  # FAILED's webhook refuses the connection
        n.send({}, outcome(failure_reason="boom"))  # no topic at all: nothing to send, nothing failed
        await n.drain()
        await n.close()
        return n

    n = asyncio.run(run())
    assert n.unrouted == {DONE: 2}
    assert _failures(metrics) == 3.0
    db.close()


def test_a_delivery_past_the_pending_limit_counts_as_failed(tmp_path: Path) -> None:
    db = StateDB.open(tmp_path)
    metrics = MetricsStore(db.metrics, clock=lambda: T0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]

    async def run() -> None:
        n = AsyncNotifications({FAILED: f"http://127.0.0.1:{closed}/"}, "us-east-1", metrics, attempts=1, max_pending=1)
        n.send({"ErrorTopic": FAILED}, outcome(failure_reason="one"))  # in flight
        n.send({"ErrorTopic": FAILED}, outcome(failure_reason="two"))  # over the limit: counted at once
        assert _failures(metrics) == 1.0
        await n.drain()
        await n.close()

    asyncio.run(run())
    assert _failures(metrics) == 2.0  # and the first, refused by the closed port
    db.close()
