"""Live progress on a terminal: one rich progress bar per phase with the running request rate and errors."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from time import perf_counter

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from servekit.tools.bench.stats import Samples

TICK_S = 0.25  # redraws read counters only; the hot path never touches the display
_SCALE = 1000


class LiveProgress:
    """Shows phases on ``console`` (stderr), or does nothing when ``console`` is None."""

    def __init__(self, console: Console | None) -> None:
        self._progress = (
            Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                console=console,
                transient=False,
            )
            if console is not None
            else None
        )

    def __enter__(self) -> LiveProgress:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()

    @asynccontextmanager
    async def phase(
        self, label: str, samples: Samples | None, duration_s: float | None, requests: int | None
    ) -> AsyncIterator[None]:
        """Follow one phase while the body runs; the bar advances by time or by requests, whichever leads."""
        progress = self._progress
        if progress is None:
            yield
            return
        task_id = progress.add_task(label, total=_SCALE, status="")
        start = perf_counter()

        def draw() -> None:
            elapsed = perf_counter() - start
            fraction = min(1.0, elapsed / duration_s) if duration_s else 0.0
            status = f"{elapsed:.0f}s"
            if samples is not None:
                done = samples.done
                if requests:
                    fraction = max(fraction, done / requests)
                status = f"{done:,} done, {done / max(elapsed, 1e-9):,.0f} req/s, {samples.failed:,} failed"
            progress.update(task_id, completed=min(fraction, 1.0) * _SCALE, status=status)

        async def tick() -> None:
            while True:
                await asyncio.sleep(TICK_S)
                draw()

        ticker = asyncio.create_task(tick())
        try:
            yield
        finally:
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
            draw()
            progress.update(task_id, completed=_SCALE)
