"""One serving core under several fronts, each with its own lifecycle, run by the ASGI lifespan of the server.

The composition root builds the core once and hands it to every front (the REST app, the gRPC server); this
wrapper starts them in order and stops them in reverse, so no front owns another's lifecycle:

- startup: every front binds (a taken port fails the start at once, before any model loads), the core starts
  (models load), the REST app starts, then every front starts serving;
- shutdown: every front stops (in-flight RPCs finish while the core is still up), the REST app shuts down, then
  the core stops.

A failure while binding or starting the core raises out of the lifespan: uvicorn logs it with its traceback and
exits (status 3), and Starlette's TestClient raises it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from servekit.serving.core.assembly import ServingCore


class Front(Protocol):
    """A front beside the REST app (the gRPC server): bound early, serving once the core is up."""

    def bind(self) -> int: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class CoreLifespan:
    """``app`` (the REST app) for its requests; the lifespan starts ``core`` and ``fronts`` around the app's own.
    The REST front places it inside its fast path (``build_app(..., around=...)``), so inference requests skip it."""

    def __init__(self, app: ASGIApp, core: ServingCore, fronts: Sequence[Front] = ()) -> None:
        self.app = app
        self.core = core
        self.fronts = tuple(fronts)
        self.state: Any = getattr(app, "state", None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def receive_wrapped() -> Message:
            message = await receive()
            if message["type"] == "lifespan.startup":
                for front in self.fronts:
                    front.bind()
                await self.core.start()
            elif message["type"] == "lifespan.shutdown":
                for front in reversed(self.fronts):
                    await front.stop()
            return message

        async def send_wrapped(message: Message) -> None:
            if message["type"] == "lifespan.startup.complete":
                for front in self.fronts:
                    await front.start()
            elif message["type"] == "lifespan.shutdown.complete":
                await self.core.stop()
            await send(message)

        await self.app(scope, receive_wrapped, send_wrapped)
