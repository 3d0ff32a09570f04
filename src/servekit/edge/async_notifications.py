"""Asynchronous inference's notifications (``AsyncInferenceConfig.OutputConfig.NotificationConfig``) delivered to
webhooks, since SNS itself cannot be reached from ``servekit up``.

``servekit up --sns-webhook TOPIC_ARN=URL`` (repeatable) names the URL standing in for a topic: when an invocation
of an endpoint whose config names that topic as its ``SuccessTopic`` (or ``ErrorTopic``) ends, the URL gets a POST
of the JSON message SageMaker publishes to the topic (:func:`notification_body`: ``awsRegion``, ``eventTime``,
``receivedTime``, ``invocationStatus``, ``requestParameters``, ``responseParameters``, ``inferenceId``,
``eventVersion``, ``eventSource``, ``eventName``; ``failureReason`` on an error) — the message itself, as a
Lambda subscribed to the topic reads it, not wrapped in SNS's HTTP envelope. A topic with no webhook is logged
once and counted (:attr:`AsyncNotifications.unrouted`, and the ``NotificationFailures`` metric): it is never
dropped silently. A delivery that fails after the retries of
:class:`~servekit.services.cloudwatch.alarms.WebhookNotifier` counts in ``NotificationFailures`` too."""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from servekit.services.cloudwatch.alarms import WebhookNotifier
from servekit.services.cloudwatch.store import MetricsStore

log = logging.getLogger(__name__)

NAMESPACE = "AWS/SageMaker"
SUCCESS_TOPIC = "SUCCESS_NOTIFICATION_TOPIC"
ERROR_TOPIC = "ERROR_NOTIFICATION_TOPIC"
RESPONSE_LIMIT = 128 * 1024  # IncludeInferenceResponseIn: only answers up to 128 KB ride in the message
# AsyncInferenceNotificationConfig's pattern for SuccessTopic/ErrorTopic (botocore's model)
_TOPIC = re.compile(r"arn:aws[a-z\-]*:sns:[a-z0-9\-]*:[0-9]{12}:[a-zA-Z0-9_.-]+")
_EXAMPLE = "arn:aws:sns:us-east-1:000000000000:done=http://127.0.0.1:9000/hook"


def parse_webhooks(specs: Iterable[str]) -> dict[str, str]:
    """``--sns-webhook`` values (``TOPIC_ARN=URL``) as topic -> URL; ValueError saying what was expected."""
    hooks: dict[str, str] = {}
    for spec in specs:
        topic, sep, url = spec.partition("=")
        if not sep or _TOPIC.fullmatch(topic) is None:
            raise ValueError(f"--sns-webhook {spec!r}: expected TOPIC_ARN=URL with an SNS topic ARN, e.g. {_EXAMPLE}")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--sns-webhook {spec!r}: the URL must be http:// or https://, e.g. {_EXAMPLE}")
        if topic in hooks and hooks[topic] != url:
            raise ValueError(f"--sns-webhook: topic {topic} is given two URLs ({hooks[topic]} and {url})")
        hooks[topic] = url
    return hooks


def iso_ms(t: float) -> str:
    """SageMaker's timestamps in the message: UTC with milliseconds, e.g. 2022-01-25T22:46:00.608Z."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one asynchronous invocation ended, as its notification tells it."""

    inference_id: str
    endpoint: str
    variant: str
    input_location: str
    content_type: str | None
    received: float  # when InvokeEndpointAsync accepted it
    ended: float
    failure_reason: str | None = None  # None: it completed
    output_location: str | None = None
    output_content_type: str | None = None
    failure_location: str | None = None
    response: bytes | None = None  # the answer (success) or the failure text written to S3FailurePath

    @property
    def ok(self) -> bool:
        return self.failure_reason is None


def notification_body(region: str, outcome: Outcome, include_response: bool) -> dict[str, Any]:
    """The message SageMaker publishes to the success or error topic for ``outcome``. ``include_response``: the
    config's IncludeInferenceResponseIn lists this topic's kind; the answer then rides along as ``responseBody``
    when it is at most 128 KB (UTF-8 text as it is, anything else base64 with ``contentEncoding``)."""
    request: dict[str, Any] = {"endpointName": outcome.endpoint, "inputLocation": outcome.input_location}
    if outcome.content_type:
        request["contentType"] = outcome.content_type
    body: dict[str, Any] = {
        "awsRegion": region,
        "eventTime": iso_ms(outcome.ended),
        "receivedTime": iso_ms(outcome.received),
        "invocationStatus": "Completed" if outcome.ok else "Failed",
    }
    if not outcome.ok:
        body["failureReason"] = outcome.failure_reason
    body["requestParameters"] = request
    response: dict[str, Any] = {}
    if outcome.ok:
        response = {"contentType": outcome.output_content_type or "", "outputLocation": outcome.output_location}
    elif outcome.failure_location:
        response = {"contentType": "text/plain", "failureLocation": outcome.failure_location}
    if response:
        body["responseParameters"] = response
    if include_response and outcome.response is not None and len(outcome.response) <= RESPONSE_LIMIT:
        try:
            body["responseBody"] = {"content": outcome.response.decode()}
        except UnicodeDecodeError:
            body["responseBody"] = {
                "content": base64.b64encode(outcome.response).decode(),
                "contentEncoding": "base64",
            }
    body.update(
        inferenceId=outcome.inference_id, eventVersion="1.0", eventSource="aws:sagemaker", eventName="InferenceResult"
    )
    return body


def topic_for(config: Mapping[str, Any], ok: bool) -> tuple[str | None, bool]:
    """The topic an outcome goes to under a NotificationConfig, and whether the answer rides along."""
    topic = config.get("SuccessTopic" if ok else "ErrorTopic") or None
    include = (SUCCESS_TOPIC if ok else ERROR_TOPIC) in (config.get("IncludeInferenceResponseIn") or ())
    return topic, include


class AsyncNotifications:
    """Sends each ended invocation's notification to its topic's webhook (see the module's doc)."""

    def __init__(
        self,
        webhooks: Mapping[str, str],
        region: str,
        metrics: MetricsStore | None = None,
        attempts: int = 3,
        max_pending: int = 256,
    ) -> None:
        """``attempts``: tries per delivery (doubling back-off from 0.5 s) before it counts as failed;
        ``max_pending``: deliveries in flight at most (more count as failed at once)."""
        self.webhooks = dict(webhooks)
        self.region = region
        self._metrics = metrics
        self._notifier = WebhookNotifier(on_result=self._delivered, attempts=attempts, max_pending=max_pending)
        self.unrouted: dict[str, int] = {}  # topic -> notifications it had and no webhook to take them
        self._pending: dict[int, tuple[str, str]] = {}  # id(message) -> its (endpoint, variant), for the metric

    def send(self, config: Mapping[str, Any] | None, outcome: Outcome) -> None:
        topic, include = topic_for(config or {}, outcome.ok)
        if topic is None:
            return
        url = self.webhooks.get(topic)
        if url is None:
            if topic not in self.unrouted:
                log.warning(
                    "async inference: SNS topic %s cannot be reached from servekit up and no --sns-webhook names a "
                    "URL for it; its notifications are counted in NotificationFailures, not delivered",
                    topic,
                )
            self.unrouted[topic] = self.unrouted.get(topic, 0) + 1
            self._failed(outcome.endpoint, outcome.variant)
            return
        message = notification_body(self.region, outcome, include)
        self._pending[id(message)] = (outcome.endpoint, outcome.variant)
        try:
            accepted = self._notifier.submit(url, message)
        except RuntimeError:  # no running event loop: nothing can deliver it
            accepted = False
        if not accepted:  # too many deliveries in flight, or none possible: counted, not lost silently
            self._delivered(url, message, "not sent: no event loop, or too many deliveries pending")

    def _delivered(self, url: str, message: Mapping[str, Any], error: str | None) -> None:
        endpoint, variant = self._pending.pop(id(message), (str(message["requestParameters"]["endpointName"]), ""))
        if error is not None:
            log.warning("async inference %s: notification to %s failed: %s", message["inferenceId"], url, error)
            self._failed(endpoint, variant)

    def _failed(self, endpoint: str, variant: str) -> None:
        if self._metrics is not None:
            dims = tuple(sorted({"EndpointName": endpoint, "VariantName": variant}.items()))
            self._metrics.record(NAMESPACE, "NotificationFailures", dims, 1.0)

    async def drain(self) -> None:
        await self._notifier.drain()

    async def close(self) -> None:
        await self._notifier.close()
