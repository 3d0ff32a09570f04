"""How an instance process is tuned: freed heap pages stay for the next mini-batch (glibc), in a child process so
this one's allocator is left as it was (so not a unit test: it starts that process)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

CHILD = """
import resource, sys
from servekit.services.transform.engine import keep_heap_pages
if sys.argv[1] == "kept":
    keep_heap_pages()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):  # a mini-batch's buffers (~0.5 MB each: lines, parse, arrays): made, filled, dropped
    blocks = [bytearray(1 << 19) for _ in range(8)]
    for block in blocks:
        block[::4096] = b"x" * len(block[::4096])
    del blocks, block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, check=True, timeout=60)
    return int(out.stdout)


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_an_instance_keeps_freed_heap_pages_for_the_next_mini_batch() -> None:
    plain, kept = faults("plain"), faults("kept")
    assert plain >= 200 * 500  # the 4 MiB faulted in anew each time (1,024 pages)
    assert kept < plain / 20  # faulted once, then reused
