"""TrimWhenQuiet: the heap is trimmed once, ``quiet_s`` after the last large request, never while they keep coming;
the large-body lane asks for it after a large body and not after a small one. The process as a whole (RSS back near
idle after 15 MB requests) is measured in benchmarks/large_body_rss_bench.py."""

from __future__ import annotations

import asyncio

from servekit._utils.heap import TrimWhenQuiet
from servekit.serving.protocols.large import DecodeLane
from servekit.testing.clock import run_virtual


def test_the_heap_is_trimmed_once_in_the_pause_after_large_requests() -> None:
    async def main() -> tuple[list[float], float, float]:
        loop = asyncio.get_running_loop()
        trimmed = asyncio.Event()
        at: list[float] = []

        def trimmed_now() -> None:
            at.append(loop.time())
            trimmed.set()

        def trim() -> None:  # runs on an executor thread, off the loop
            loop.call_soon_threadsafe(trimmed_now)

        trimmer = TrimWhenQuiet(quiet_s=1.0, trim_fn=trim)
        for _ in range(4):  # a stream of large requests, 0.6 s apart: each pushes the trim back
            trimmer.after_large()
            await asyncio.sleep(0.6)
        assert at == []
        last = loop.time()
        trimmer.after_large()
        await trimmed.wait()
        await asyncio.sleep(5)  # nothing more to trim: no second call
        return at, last, loop.time()

    at, last, _ = run_virtual(main)
    assert len(at) == 1
    assert last + 1.0 <= at[0] < last + 1.5


def test_the_lane_asks_for_a_trim_after_a_large_body_only() -> None:
    class Recorder(TrimWhenQuiet):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def after_large(self) -> None:
            self.calls += 1

    async def main() -> int:
        recorder = Recorder()
        lane = DecodeLane(threshold=100, trimmer=recorder)
        try:
            assert await lane.run(99, len, b"small") == 5  # inline, small: nothing to trim
            lane.answered(99)
            assert recorder.calls == 0
            lane.answered(100)  # a large body a raw-body model answered
            return recorder.calls
        finally:
            lane.close()

    assert run_virtual(main) == 1
