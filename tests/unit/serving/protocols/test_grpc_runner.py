"""The gRPC runner's status choice: the REST message under the code of the one table, RESOURCE_EXHAUSTED only when
a serving model has no room, and the model list kept from callers off loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import pytest

from servekit.errors import ErrorCode, ServekitError, not_found
from servekit.serving.protocols.grpc.runner import GrpcContext, GrpcRunner


class _Service:
    def __init__(self, ready: bool) -> None:
        self.ready = ready

    def has_model(self, model: str) -> bool:
        return True

    def is_ready(self, model: str, version: int | None = None) -> bool:
        return self.ready


class _Aborted(Exception):
    pass


class _Context:
    def __init__(self, peer: str = "ipv4:127.0.0.1:5000") -> None:
        self._peer = peer
        self.trailing: Any = ()

    def peer(self) -> str:
        return self._peer

    def set_trailing_metadata(self, md: Any) -> None:
        self.trailing = md

    async def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _Aborted(code, details)


def _status(exc: Exception, ready: bool = True, peer: str = "ipv4:127.0.0.1:5000") -> tuple[Any, str]:
    runner = GrpcRunner("test", GrpcContext(_Service(ready)))  # type: ignore[arg-type]

    async def fail() -> tuple[None, str]:
        raise exc

    with pytest.raises(_Aborted) as info:
        asyncio.run(runner.run("m", "predict", _Context(peer), fail))
    return info.value.args[0], info.value.args[1]


def test_unavailable_is_resource_exhausted_only_while_the_model_serves() -> None:
    full = ServekitError(ErrorCode.UNAVAILABLE, "The batch scheduling queue to which this task was submitted is full")
    assert _status(full, ready=True) == (grpc.StatusCode.RESOURCE_EXHAUSTED, full.message)
    loading = ServekitError(ErrorCode.UNAVAILABLE, "model 'm' is loading")
    assert _status(loading, ready=False) == (grpc.StatusCode.UNAVAILABLE, loading.message)


def test_codes_and_messages_follow_the_table() -> None:
    assert _status(ServekitError(ErrorCode.DEADLINE_EXCEEDED, "late")) == (grpc.StatusCode.DEADLINE_EXCEEDED, "late")
    assert _status(ServekitError(ErrorCode.INVALID_ARGUMENT, "bad")) == (grpc.StatusCode.INVALID_ARGUMENT, "bad")
    code, message = _status(ServekitError(ErrorCode.MODEL_ERROR, "model 'm' failed", {"cause": "secret"}))
    assert code == grpc.StatusCode.INTERNAL and "request id" in message and "secret" not in message
    code, message = _status(RuntimeError("a bug"))
    assert code == grpc.StatusCode.INTERNAL and message.startswith("internal server error (request id ")


def test_the_model_list_is_only_for_loopback_callers() -> None:
    exc = not_found("model 'x' is not served here; models: a, b")
    assert _status(exc)[1] == exc.message
    assert _status(exc, peer="ipv4:10.1.2.3:5000")[1] == "model 'x' is not served here"
