"""A streamed model answer (a handler that yields) as an async iterator for the protocol adapters: each piece is
pulled from the model's iterator on the model's thread, never on the event loop, and the model version stays
loaded until the stream has ended — consumed, failed, or closed because the client went away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from servekit.serving.core.call import model_failure

_END = object()
# Runs a function on a model thread: fn, args -> a future on the loop (ModelThreads.submit).
Submit = Callable[..., "asyncio.Future[Any]"]


class ModelStream(AsyncIterator[bytes]):
    def __init__(self, pieces: Iterator[bytes], submit: Submit, model: str, version: int) -> None:
        self._pieces = pieces
        self._submit = submit
        self._model = model
        self._version = version
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # hold the lease until set
        self.sent = 0  # pieces handed out so far (the capture and the metrics read it)

    def __aiter__(self) -> ModelStream:
        return self

    async def __anext__(self) -> bytes:
        if self.done.done():
            raise StopAsyncIteration
        try:
            piece = await asyncio.shield(self._submit(next, self._pieces, _END))
        except Exception as exc:
            self._end()
            raise model_failure(exc, self._model, self._version) from exc
        if piece is _END:
            self._end()
            raise StopAsyncIteration
        self.sent += 1
        return bytes(piece)

    async def aclose(self) -> None:
        """The client went away: the model's generator is closed on its thread (its ``finally`` blocks run)."""
        if self.done.done():
            return
        close = getattr(self._pieces, "close", None)
        try:
            if close is not None:
                await asyncio.shield(self._submit(close))
        finally:
            self._end()

    def _end(self) -> None:
        if not self.done.done():
            self.done.set_result(None)
