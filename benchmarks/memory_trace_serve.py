#!/usr/bin/env python3
"""``servekit serve`` with memory probes, for ``memory_bench.py --trace`` (never used by the product).

Runs the same CLI (``python benchmarks/memory_trace_serve.py serve ...`` takes ``servekit``'s arguments) after
installing two signal handlers in the serving process (use ``--workers 1``: the probes live in this process):

- SIGUSR1: write a tracemalloc snapshot (tracing starts at launch when ``SERVEKIT_MEMTRACE_FRAMES`` is set, with
  that many frames per allocation) to ``$SERVEKIT_MEMTRACE_DIR/snapshot-<n>.pickle``, then ``<n>.done``;
- SIGUSR2: ``malloc_trim(0)``, which hands free heap pages back to the kernel, then ``trim-<n>.done``. RSS that
  falls after it was free memory the allocator kept (a high-water mark), not objects still alive.

The handlers run on the main thread between event-loop callbacks, so a snapshot sees no request half-built by
Python code (one in flight in a batch thread may still be counted). The files are written by this process and
read by memory_bench.py once the ``.done`` marker exists.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType


def _install(out: Path) -> None:
    counts = {"snapshot": 0, "trim": 0}
    libc = ctypes.CDLL("libc.so.6")

    def snapshot(signum: int, frame: FrameType | None) -> None:
        n = counts["snapshot"] = counts["snapshot"] + 1
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(str(out / f"snapshot-{n}.pickle"))
        (out / f"snapshot-{n}.done").write_text(str(tracemalloc.get_tracemalloc_memory()))

    def trim(signum: int, frame: FrameType | None) -> None:
        n = counts["trim"] = counts["trim"] + 1
        libc.malloc_trim(0)
        (out / f"trim-{n}.done").write_text("")

    signal.signal(signal.SIGUSR1, snapshot)
    signal.signal(signal.SIGUSR2, trim)


def main() -> None:
    out = Path(os.environ["SERVEKIT_MEMTRACE_DIR"])
    out.mkdir(parents=True, exist_ok=True)
    frames = os.environ.get("SERVEKIT_MEMTRACE_FRAMES")
    if frames:
        tracemalloc.start(int(frames))
    _install(out)
    from servekit.cli.main import main as servekit_main

    sys.argv = ["servekit", *sys.argv[1:]]
    servekit_main()


if __name__ == "__main__":
    main()
