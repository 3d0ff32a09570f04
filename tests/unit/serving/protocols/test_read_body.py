"""A body cut short (client gone, read timeout) is refused, never handed on truncated."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from starlette.requests import Request

from servekit.errors import ErrorCode, ServekitError
from servekit.serving.protocols.http import read_body


def request(messages: list[dict[str, Any]], length: int) -> Request:
    queue = list(messages)

    async def receive() -> dict[str, Any]:
        return queue.pop(0)

    scope = {"type": "http", "method": "POST", "path": "/", "headers": [(b"content-length", str(length).encode())]}
    return Request(scope, receive)


def test_a_whole_body_is_read() -> None:
    msgs = [{"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.request", "body": b"cd"}]
    assert asyncio.run(read_body(request(msgs, 4), 100)) == b"abcd"


def test_a_disconnect_mid_body_is_refused() -> None:
    msgs = [{"type": "http.request", "body": b"ab", "more_body": True}, {"type": "http.disconnect"}]
    with pytest.raises(ServekitError) as err:
        asyncio.run(read_body(request(msgs, 4), 100))
    assert err.value.code is ErrorCode.CANCELLED and "2 of its 4" in err.value.message
