"""Asynchronous inference on ``servekit up`` (an endpoint config with ``AsyncInferenceConfig``), as SageMaker does it:
``InvokeEndpointAsync`` names an input object in S3; the request is recorded in the state database (durable: a
restarted plane runs what was queued or running) and answered 202 at once with where its answer will be; the
endpoint's instances take the queue oldest first, at most ``ClientConfig.MaxConcurrentInvocationsPerInstance``
(default 4) per instance at a time, each through the gateway like InvokeEndpoint; the answer is written to
``S3OutputPath/<inference id>.out``, a failure (the model's error, a request older than its ``RequestTTLSeconds``,
one that ran past ``InvocationTimeoutSeconds``) to ``S3FailurePath/<inference id>-error.out``. The backlog is
published every second as ``ApproximateBacklogSize``, ``ApproximateBacklogSizePerInstance`` and
``HasBacklogWithoutCapacity`` and ``ApproximateAgeOfOldestRequest`` (namespace AWS/SageMaker, dimension EndpointName;
zeros for an idle asynchronous endpoint, so alarms and target tracking see it idle), which Application Auto
Scaling scales on, down to zero instances: a variant with no instance keeps its queue (nothing is taken until an
instance serves, and a request that finds none is put back), which is what ``HasBacklogWithoutCapacity`` tells a
step scaling policy. Each ended request counts in ``InvocationsProcesssed`` (AWS's spelling, with its
``ModelLatency``), ``InvocationFailures`` (the model's error, a timeout), ``RequestDownloadFailures`` (its input
could not be read), ``ResponseUploadFailures`` (its answer could not be written) or ``ExpiredRequests``, with
``TimeInBacklog`` and ``TotalProcessingTime`` (ms; dimensions EndpointName and VariantName), and its notification
goes to the webhook standing in for its SNS topic (:mod:`servekit.edge.async_notifications`; SNS itself cannot be
reached from here)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from servekit.aws import ApiError
from servekit.aws.errors import validation_error
from servekit.edge.async_notifications import AsyncNotifications, Outcome
from servekit.gateway.service import Gateway, GatewayError
from servekit.services.cloudwatch.store import MetricsStore
from servekit.services.hosting.store import Hosting
from servekit.services.hosting.store_rows import AsyncInvocationRow, AsyncQueue
from servekit.services.s3.objects import Objects

log = logging.getLogger(__name__)

DEFAULT_TTL_S = 6 * 3600  # RequestTTLSeconds' default
DEFAULT_TIMEOUT_S = 900  # InvocationTimeoutSeconds' default
DEFAULT_PER_INSTANCE = 4  # ClientConfig.MaxConcurrentInvocationsPerInstance when not given
METRICS_EVERY_S = 1.0
NAMESPACE = "AWS/SageMaker"


class AsyncInvocations:
    def __init__(
        self,
        queue: AsyncQueue,
        hosting: Hosting,
        gateway: Gateway,
        objects: Objects,
        metrics: MetricsStore | None = None,
        clock: Callable[[], float] = time.time,
        notifications: AsyncNotifications | None = None,
    ) -> None:
        """``notifications``: where NotificationConfig's topics are delivered (None: nowhere, logged once)."""
        self.queue = queue
        self._hosting = hosting
        self._gateway = gateway
        self._objects = objects
        self._metrics = metrics
        self._clock = clock
        self.notifications = notifications or AsyncNotifications({}, "us-east-1", metrics)
        self._configs: dict[str, Mapping[str, Any] | None] = {}  # endpoint config name -> AsyncInferenceConfig
        self._running: dict[str, set[asyncio.Task[None]]] = {}  # endpoint -> its invocations in flight
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None

    # ---- which endpoints are asynchronous ---------------------------------------------------------------------
    def config_of(self, endpoint: str) -> Mapping[str, Any] | None:
        """The endpoint's AsyncInferenceConfig (None: a real-time endpoint). Endpoint configs never change once
        created, so each is read once."""
        row = self._hosting.get_endpoint(endpoint)
        if row is None:
            return None
        if row.config_name not in self._configs:
            config = self._hosting.get_endpoint_config(row.config_name)
            self._configs[row.config_name] = None if config is None else config.record.get("AsyncInferenceConfig")
        return self._configs[row.config_name]

    def refuse_sync(self, endpoint: str) -> None:
        """InvokeEndpoint on an asynchronous endpoint: refused, as SageMaker refuses it."""
        variants = self._gateway.table.variants(endpoint) or []
        name = variants[0].config_name if variants else ""
        if name and name in self._configs and self._configs[name] is None:
            return  # known real-time: the common case costs a dict lookup
        if self.config_of(endpoint) is not None:
            raise validation_error(
                f"Endpoint {endpoint} is an asynchronous endpoint (its config has AsyncInferenceConfig): invoke it "
                "with InvokeEndpointAsync."
            )

    # ---- InvokeEndpointAsync ----------------------------------------------------------------------------------
    async def submit(self, p: Mapping[str, Any]) -> dict[str, Any]:
        endpoint = str(p["EndpointName"])
        config = self.config_of(endpoint)
        if self._hosting.get_endpoint(endpoint) is None:
            raise validation_error(f"Endpoint {endpoint} of account {self._gateway.account_id} not found.")
        if config is None:
            raise validation_error(
                f"Endpoint {endpoint} is not an asynchronous endpoint: its config has no AsyncInferenceConfig "
                "(invoke it with InvokeEndpoint)."
            )
        location = str(p["InputLocation"])
        try:
            exists = await asyncio.to_thread(self._exists, location)
        except ValueError as exc:
            raise validation_error(f"InputLocation {location}: {exc}") from None
        if not exists:
            raise validation_error(f"InputLocation {location} does not exist (upload the request body there first).")
        content_type = p.get("ContentType")
        if content_type is None:  # as SageMaker does: the input object's own Content-Type
            content_type = await asyncio.to_thread(self._objects.content_type, location)
        inference_id = str(p.get("InferenceId") or uuid.uuid4())
        output = config.get("OutputConfig") or {}
        out_path = str(output.get("S3OutputPath", "")).rstrip("/")
        failure_path = str(output.get("S3FailurePath") or "").rstrip("/")
        request = {
            "InputLocation": location,
            "ContentType": content_type,
            "Accept": p.get("Accept"),
            "CustomAttributes": p.get("CustomAttributes"),
            "OutputLocation": f"{out_path}/{inference_id}.out",
            "FailureLocation": f"{failure_path}/{inference_id}-error.out" if failure_path else None,
            "TimeoutSeconds": int(p.get("InvocationTimeoutSeconds") or DEFAULT_TIMEOUT_S),
        }
        self.queue.add(inference_id, endpoint, request, float(p.get("RequestTTLSeconds") or DEFAULT_TTL_S))
        self._wake.set()
        answer = {"InferenceId": inference_id, "OutputLocation": request["OutputLocation"]}
        if request["FailureLocation"]:
            answer["FailureLocation"] = request["FailureLocation"]
        return answer

    def _exists(self, uri: str) -> bool:
        try:
            self._objects.read(uri)
        except FileNotFoundError:
            return False
        return True

    # ---- the workers ------------------------------------------------------------------------------------------
    def start(self) -> None:
        requeued = self.queue.requeue_running()
        if requeued:
            log.info("async inference: %d invocation(s) a previous plane was running are queued again", requeued)
        self._loop = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        """Stop taking work; what is running stays Running in the state and a restarted plane runs it again."""
        tasks = [t for running in self._running.values() for t in running]
        if self._loop is not None:
            tasks.append(self._loop)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.notifications.close()

    async def _run(self) -> None:
        next_metrics = 0.0
        while True:
            backlog = self.queue.backlog()
            for endpoint in backlog:
                self._take(endpoint)
            now = time.monotonic()
            if now >= next_metrics:
                next_metrics = now + METRICS_EVERY_S
                self._publish(backlog)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), METRICS_EVERY_S)

    def _instances(self, endpoint: str) -> int:
        return sum(len(v.instances) for v in self._gateway.table.variants(endpoint) or [])

    def _variant(self, endpoint: str) -> str:
        variants = self._gateway.table.variants(endpoint) or []
        return variants[0].name if variants else ""

    def _take(self, endpoint: str) -> None:
        config = self.config_of(endpoint) or {}
        per_instance = int((config.get("ClientConfig") or {}).get("MaxConcurrentInvocationsPerInstance") or 0)
        instances = self._instances(endpoint)
        if not instances:
            return  # scaled to zero (or not yet serving): the queue waits, durably, for an instance
        limit = instances * (per_instance or DEFAULT_PER_INSTANCE)
        running = self._running.setdefault(endpoint, set())
        room = limit - len(running)
        if room <= 0:
            return
        for row in self.queue.queued(endpoint, room):
            if not self.queue.claim(row.seq):
                continue
            task = asyncio.get_running_loop().create_task(self._invoke(row))
            running.add(task)

            def done(t: asyncio.Task[None], endpoint: str = endpoint) -> None:
                self._running.get(endpoint, set()).discard(t)
                self._wake.set()

            task.add_done_callback(done)

    def _publish(self, backlog: Mapping[str, int]) -> None:
        if self._metrics is None:
            return
        now = self._clock()
        idle = {row.name for row in self._hosting.all_endpoints() if self.config_of(row.name) is not None}
        for endpoint in {*backlog, *idle, *(e for e, r in self._running.items() if r)}:
            size = backlog.get(endpoint, 0)
            instances = self._instances(endpoint)
            dims = (("EndpointName", endpoint),)
            oldest = self.queue.queued(endpoint, 1) if size else []
            self._metrics.record(NAMESPACE, "ApproximateBacklogSize", dims, float(size))
            self._metrics.record(NAMESPACE, "ApproximateBacklogSizePerInstance", dims, size / max(1, instances))
            self._metrics.record(NAMESPACE, "HasBacklogWithoutCapacity", dims, 1.0 if size and not instances else 0.0)
            age = max(0.0, now - oldest[0].created) if oldest else 0.0
            self._metrics.record(NAMESPACE, "ApproximateAgeOfOldestRequest", dims, age)

    def _count(self, row: AsyncInvocationRow, variant: str, metric: str, started: float) -> None:
        """One ended request: its outcome's count, and how long it waited and took in all (ms)."""
        if self._metrics is None:
            return
        dims = tuple(sorted({"EndpointName": row.endpoint, "VariantName": variant}.items()))
        now = self._clock()
        self._metrics.record(NAMESPACE, metric, dims, 1.0)
        self._metrics.record(NAMESPACE, "TimeInBacklog", dims, max(0.0, started - row.created) * 1000)
        self._metrics.record(NAMESPACE, "TotalProcessingTime", dims, max(0.0, now - row.created) * 1000)

    def _notify(self, row: AsyncInvocationRow, variant: str, **how: Any) -> None:
        r = row.request
        outcome = Outcome(
            inference_id=row.inference_id,
            endpoint=row.endpoint,
            variant=variant,
            input_location=str(r["InputLocation"]),
            content_type=r.get("ContentType"),
            received=row.created,
            ended=self._clock(),
            **how,
        )
        self.notifications.send((self.config_of(row.endpoint) or {}).get("OutputConfig", {}).get("NotificationConfig"),
                                outcome)  # fmt: skip

    async def _invoke(self, row: AsyncInvocationRow) -> None:
        r = row.request
        started = self._clock()
        if started > row.expires:
            await self._fail(
                row,
                "Request expired: it waited longer than its RequestTTLSeconds in the queue.",
                started,
                "ExpiredRequests",
            )
            return
        try:
            body = await asyncio.to_thread(self._objects.read, str(r["InputLocation"]))
            out = await asyncio.wait_for(
                self._gateway.invoke(
                    row.endpoint,
                    body,
                    r.get("ContentType"),
                    r.get("Accept"),
                    r.get("CustomAttributes"),
                    None,
                    row.inference_id,
                ),
                float(r["TimeoutSeconds"]),
            )
        except TimeoutError:
            await self._fail(
                row, f"The invocation ran past its InvocationTimeoutSeconds of {r['TimeoutSeconds']} s.", started
            )
            return
        except GatewayError as exc:
            if exc.status == 503 and not self._instances(row.endpoint):
                # the variant scaled to zero between taking the request and running it: back in the queue, in
                # its place, until an instance serves again
                self.queue.release(row.seq)
                return
            await self._fail(row, exc.message, started)
            return
        except (OSError, ValueError) as exc:
            reason = f"InputLocation {r['InputLocation']} could not be read: {exc}"
            await self._fail(row, reason, started, "RequestDownloadFailures")
            return
        try:
            await asyncio.to_thread(self._write, str(r["OutputLocation"]), out.body, out.content_type)
        except (OSError, ValueError, ApiError) as exc:
            reason = f"The answer could not be written to {r['OutputLocation']}: {exc}"
            await self._fail(row, reason, started, "ResponseUploadFailures")
            return
        self.queue.finish(row.seq, "Completed")
        self._count(row, out.variant, "InvocationsProcesssed", started)
        if self._metrics is not None and out.model_s is not None:  # as InvokeEndpoint's: the model's own time, µs
            dims = tuple(sorted({"EndpointName": row.endpoint, "VariantName": out.variant}.items()))
            self._metrics.record(NAMESPACE, "ModelLatency", dims, out.model_s * 1e6)
        self._notify(
            row,
            out.variant,
            output_location=str(r["OutputLocation"]),
            output_content_type=out.content_type,
            response=out.body,
        )

    async def _fail(
        self, row: AsyncInvocationRow, message: str, started: float, metric: str = "InvocationFailures"
    ) -> None:
        location = row.request.get("FailureLocation")
        if location:
            try:
                await asyncio.to_thread(self._write, str(location), message.encode(), "text/plain")
            except (OSError, ValueError) as exc:
                log.warning(
                    "async inference %s: the failure could not be written to %s: %s", row.inference_id, location, exc
                )
        log.info("async inference %s on %s failed: %s", row.inference_id, row.endpoint, message)
        self.queue.finish(row.seq, "Failed", message)
        variant = self._variant(row.endpoint)
        self._count(row, variant, metric, started)
        self._notify(
            row,
            variant,
            failure_reason=message,
            failure_location=str(location) if location else None,
            response=message.encode(),
        )

    def _write(self, uri: str, data: bytes, content_type: str) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "body"
            path.write_bytes(data)
            self._objects.put_file(uri, path, content_type)
