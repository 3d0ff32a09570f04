"""A loop that runs beside a server on its event loop: ``start()`` from inside the loop, ``close()`` to cancel it
and wait until it has stopped."""

from __future__ import annotations

import asyncio
import contextlib


class BackgroundLoop:
    """Base for objects whose :meth:`run` loops forever (a sampler, a flusher, a follower). ``start()`` is
    idempotent; ``close()`` cancels the loop and returns once it has ended, so nothing it does can interleave with
    what the caller does next."""

    _task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


def until_next_bucket(now: float, step: float, margin: float) -> float:
    """Seconds from ``now`` to ``margin`` past the next multiple of ``step``: a loop that sleeps this long after
    each pass runs once per bucket, just after its boundary, even when a sleep wakes a little early."""
    return (now // step + 1) * step - now + margin
