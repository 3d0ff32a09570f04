"""A server whose latency bends at a known request rate, for testing knee finders (``servekit bench --phases``,
``servekit.tools.locust.StepLoadShape``): it answers every POST with 200 after ``fast_ms`` while fewer than
``bend_rate``
requests arrived in the last second, and after ``slow_ms`` once more did. A thread runs its own event loop on a
free loopback port; keep-alive HTTP/1.1 with Content-Length bodies, which is what load generators send."""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from types import TracebackType

_BODY = b'{"ok": true}'
_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(_BODY)


class BentServer:
    def __init__(self, bend_rate: float, fast_ms: float = 1.0, slow_ms: float = 40.0) -> None:
        self.bend_rate = bend_rate
        self.fast_s = fast_ms / 1e3
        self.slow_s = slow_ms / 1e3
        self.requests = 0
        self._arrivals: collections.deque[float] = collections.deque()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bent-server")
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> BentServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the bent server did not start")
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        for task in asyncio.all_tasks(self._loop):  # connections still open: end their handlers
            task.cancel()
        self._loop.run_until_complete(asyncio.sleep(0))
        self._loop.close()

    def delay_s(self, now: float) -> float:
        arrivals = self._arrivals
        arrivals.append(now)
        while arrivals and arrivals[0] < now - 1.0:
            arrivals.popleft()
        return self.slow_s if len(arrivals) > self.bend_rate else self.fast_s

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                if length:
                    await reader.readexactly(length)
                self.requests += 1
                await asyncio.sleep(self.delay_s(time.monotonic()))  # the latency under test, not synchronisation
                writer.write(_HEAD + _BODY)
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError, asyncio.CancelledError):
            pass
        finally:
            writer.close()
