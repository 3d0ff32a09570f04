"""The REST front's overload gate: past the limit an inference request is answered 503 with Retry-After before its
body is read; a request that arrived while its connection was held is refused without holding it again."""

from __future__ import annotations

import asyncio
import math
from collections.abc import MutableMapping
from types import SimpleNamespace
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from servekit.config.models import OverloadConfig
from servekit.errors import ErrorCode, unavailable
from servekit.serving.core.overload import OverloadGate
from servekit.serving.protocols.app import FastPath, GateMetrics
from servekit.serving.protocols.http import EARLY_KEY, SHED_KEY, InferenceHTTPResponse, error_response
from servekit.serving.schema import InferenceResponse, Timings


class Front:
    """What FastPath calls for inference: records the requests that reached it, answers 200 with a model time."""

    def __init__(self, model_s: float = 0.010) -> None:
        self.called: list[str] = []
        self.model_s = model_s

    async def answer(self, request: Request) -> Response:
        self.called.append(request.scope["path"])
        await request.body()
        resp = InferenceResponse("m", 1, "serving_default", {}, timings=Timings(0.0, self.model_s, self.model_s))
        return InferenceHTTPResponse(b"{}", "application/json", resp)


def app(gate: OverloadGate, front: Front) -> FastPath:
    async def other(scope: Any, receive: Any, send: Any) -> None:
        raise AssertionError("not an inference request")

    adapters: Any = SimpleNamespace(dispatch=front.answer, infer=front.answer, invocations=front.answer)
    return FastPath(other, adapters, adapters, adapters, gate=gate)


def call(fast: FastPath, path: str, **extra: Any) -> tuple[dict[str, Any], list[dict[str, Any]], int]:
    """One POST through the app: its scope afterwards, the messages it sent, how many times it read the body."""
    scope: dict[str, Any] = {"type": "http", "method": "POST", "path": path, "headers": [], **extra}
    sent: list[dict[str, Any]] = []
    reads = 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(dict(message))

    asyncio.run(fast(scope, receive, send))
    return scope, sent, reads


def shed_answer(sent: list[dict[str, Any]]) -> dict[bytes, bytes]:
    assert sent[0]["status"] == 503
    headers = dict(sent[0]["headers"])
    assert headers[b"retry-after"] == b"1"
    assert "overloaded" in orjson.loads(sent[1]["body"])["error"]
    return headers


def test_past_the_limit_a_request_is_refused_before_its_body_is_read() -> None:
    gate = OverloadGate(OverloadConfig(min_limit=1, max_limit=1), now=0.0)
    front = Front()
    assert gate.admit()  # the one place is taken
    for path in ("/v1/models/m:predict", "/invocations", "/v2/models/m/infer"):
        scope, sent, reads = call(app(gate, front), path)
        shed_answer(sent)
        assert reads == 0 and front.called == []
        assert scope[SHED_KEY] is True  # the connection holds its next request for Retry-After
    assert gate.shed == 3 and gate.in_flight == 1


def test_an_admitted_request_runs_and_gives_its_place_back() -> None:
    gate = OverloadGate(OverloadConfig(min_limit=1, max_limit=1), now=0.0)
    front = Front()
    scope, sent, reads = call(app(gate, front), "/v1/models/m:predict")
    assert sent[0]["status"] == 200 and reads == 1 and front.called == ["/v1/models/m:predict"]
    assert SHED_KEY not in scope
    assert gate.in_flight == 0 and gate.shed == 0


def test_a_request_sent_while_its_connection_was_held_is_refused_without_a_new_hold() -> None:
    gate = OverloadGate(OverloadConfig(), now=0.0)  # plenty of room
    front = Front()
    scope, sent, reads = call(app(gate, front), "/v1/models/m:predict", **{EARLY_KEY: True})
    shed_answer(sent)
    assert reads == 0 and front.called == []
    assert SHED_KEY not in scope  # the client's next request is decided by the gate
    assert gate.in_flight == 0 and gate.shed == 1


class RecordingGate(OverloadGate):
    __slots__ = ("waits",)

    def __init__(self, now: float = 0.0) -> None:
        super().__init__(OverloadConfig(), now=now)
        self.waits: list[float | None] = []

    def leave(self, now: float, waited_s: float | None, full: bool = False) -> None:
        self.waits.append(waited_s)
        super().leave(now, waited_s, full)


def test_answers_tell_the_gate_their_server_time_less_three_model_times() -> None:
    gate = RecordingGate()
    call(app(gate, Front(model_s=0.0)), "/v1/models/m:predict")
    call(app(gate, Front(model_s=-1.0)), "/v1/models/m:predict")  # a model time of -1 s: a wait of over 3 s
    first, second = gate.waits
    assert first is not None and 0.0 <= first < 1.0
    assert second is not None and 3.0 <= second < 4.0  # less two runs of the model: its own pace


def test_the_gate_is_in_the_metrics() -> None:
    gate = OverloadGate(OverloadConfig(min_limit=1, max_limit=2), now=0.0)
    gate.admit()
    gate.admit()
    gate.admit()  # refused
    got = {s.name: s.value for m in GateMetrics(gate).collect() for s in m.samples}
    assert got == {
        "servekit_overload_shed_total": 1.0,
        "servekit_overload_limit": 2.0,
        "servekit_overload_in_flight": 2.0,
    }


def test_a_503_from_inside_is_left_to_its_queue() -> None:
    """A full batch queue's or thread queue's own 503: its message goes out as it is, the connection is not held
    (the client's next request is the queue's to decide, with its own message), and it says nothing of waiting."""
    gate = RecordingGate(now=math.inf)  # no interval ends

    async def full(request: Request) -> Response:
        return Response(b'{"error":"queue full"}', status_code=503, headers={"Retry-After": "1"})

    front = Front()
    front.answer = full  # type: ignore[method-assign]
    scope, sent, _ = call(app(gate, front), "/v1/models/m:predict")
    assert sent[0]["status"] == 503 and SHED_KEY not in scope
    assert gate.waits == [None] and gate.in_flight == 0
    assert gate.limit == 1024  # an ordinary 503 says nothing of how many the server holds


def test_a_full_queue_puts_the_limit_under_what_was_in() -> None:
    """The batch queue's or the thread queue's "full" 503 (``unavailable(..., full=True)``): the requests let in
    then were more than the server holds, so the gate lets in fewer from then on, and the message is the queue's."""
    gate = RecordingGate()
    for _ in range(40):  # 40 others in, as the full answer is given
        assert gate.admit()

    async def full(request: Request) -> Response:
        return error_response(
            unavailable("The batch scheduling queue ... is full", full=True), {ErrorCode.UNAVAILABLE: 503}
        )

    front = Front()
    front.answer = full  # type: ignore[method-assign]
    scope, sent, _ = call(app(gate, front), "/v1/models/m:predict")
    assert sent[0]["status"] == 503 and dict(sent[0]["headers"])[b"retry-after"] == b"1"
    assert orjson.loads(sent[1]["body"]) == {"error": "The batch scheduling queue ... is full"}
    assert SHED_KEY not in scope  # the queue's own refusal: its connection is not held
    assert gate.limit == 40 and gate.in_flight == 40
    assert not gate.admit()  # the 41st waits for a place
