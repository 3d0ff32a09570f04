"""What a large request leaves behind in the serving process once it is answered: a model thread keeps no
reference to its last call's inputs or outputs (each thread held its last request's tensors, tens of MB, for as
long as the server stayed idle), and a large body through the decode lane (a real child process) is followed by
a heap trim. RSS before and after (idle 91 -> 232 MiB, now back to 105) is benchmarks/large_body_rss_bench.py."""

from __future__ import annotations

import asyncio
import os
import time
import weakref

import numpy as np

from servekit._utils.heap import TrimWhenQuiet
from servekit._utils.threads import ModelThreads
from servekit.serving.protocols.large import DecodeLane


def test_a_model_thread_keeps_nothing_of_its_last_call() -> None:
    async def main() -> None:
        threads = ModelThreads(1)
        try:
            inputs = np.ones(1 << 16)
            outputs = await threads.submit(np.multiply, inputs, 2.0)
            assert float(outputs[0]) == 2.0
            refs = (weakref.ref(inputs), weakref.ref(outputs))
            del inputs, outputs
            deadline = time.monotonic() + 5
            while any(r() is not None for r in refs):  # the thread lets go as it goes back to wait for work
                assert time.monotonic() < deadline, "the model thread still holds its last call's arrays"
                await asyncio.sleep(0.01)
        finally:
            threads.shutdown()

    asyncio.run(main())


def test_a_large_body_through_the_lane_is_followed_by_a_trim() -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        trimmed = asyncio.Event()

        def trim() -> None:  # on an executor thread
            loop.call_soon_threadsafe(trimmed.set)

        trimmer = TrimWhenQuiet(quiet_s=0.05, trim_fn=trim)
        lane = DecodeLane(threshold=100, trimmer=trimmer)
        try:
            pid = await lane.run(100, os.getpid)
            await asyncio.wait_for(trimmed.wait(), 30)
            return pid
        finally:
            lane.close()

    assert asyncio.run(main()) != os.getpid()
