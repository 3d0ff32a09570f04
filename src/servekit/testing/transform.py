"""Test doubles for batch transform: record-format writers, scripted invokers and a handler model.

Nothing here imports ``servekit.services.transform``: the invokers satisfy its ``Invoker`` protocol by shape.
"""

from __future__ import annotations

import struct
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

from servekit.errors import ErrorCode, ServekitError

RECORDIO_MAGIC = 0xCED7230A


def _frame(flag: int, data: bytes) -> bytes:
    head = struct.pack("<II", RECORDIO_MAGIC, (flag << 29) | len(data))
    return head + data + b"\0" * ((4 - len(data) % 4) % 4)


def recordio(records: list[bytes]) -> bytes:
    """MXNet/dmlc RecordIO: a record holding the magic number is split there into a multi-part record."""
    magic = struct.pack("<I", RECORDIO_MAGIC)
    out = []
    for data in records:
        parts = data.split(magic)
        if len(parts) == 1:
            out.append(_frame(0, data))
            continue
        for i, part in enumerate(parts):
            out.append(_frame(1 if i == 0 else 3 if i == len(parts) - 1 else 2, part))
    return b"".join(out)


def _crc32c_table() -> list[int]:
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord(records: list[bytes]) -> bytes:
    out = []
    for data in records:
        length = struct.pack("<Q", len(data))
        out.append(length + struct.pack("<I", masked_crc(length)) + data + struct.pack("<I", masked_crc(data)))
    return b"".join(out)


class EchoInvoker:
    """Answers a JSON Lines / CSV / raw body with one line per input line: ``fn(line)``.

    ``fail`` lines raise INVALID_ARGUMENT (the whole request fails, as a real decoder would); every body
    and its thread are recorded."""

    def __init__(
        self,
        fn: Callable[[bytes], bytes] = lambda line: line,
        fail: Callable[[bytes], bool] = lambda line: b"boom" in line,
    ) -> None:
        self.fn = fn
        self.fail = fail
        self.bodies: list[bytes] = []
        self._lock = threading.Lock()

    def invoke(self, body: bytes, content_type: str, accept: str) -> bytes:
        with self._lock:
            self.bodies.append(body)
        lines = [line for line in body.split(b"\n") if line]
        bad = [line for line in lines if self.fail(line)]
        if bad:
            raise ServekitError(ErrorCode.INVALID_ARGUMENT, f"cannot use record {bad[0][:40]!r}")
        return b"".join(self.fn(line) + b"\n" for line in lines)

    def close(self) -> None:
        pass


class FlakyInvoker(EchoInvoker):
    """Fails the first ``failures`` calls with ``code``, then echoes."""

    def __init__(self, failures: int, code: ErrorCode = ErrorCode.UNAVAILABLE) -> None:
        super().__init__()
        self.failures = failures
        self.code = code
        self.calls = 0

    def invoke(self, body: bytes, content_type: str, accept: str) -> bytes:
        with self._lock:
            self.calls += 1
            fail = self.calls <= self.failures
        if fail:
            raise ServekitError(self.code, f"failure {self.calls}")
        return super().invoke(body, content_type, accept)


class ReverseInvoker(EchoInvoker):
    """Finishes requests in reverse order within each window of ``window`` requests, without sleeping.

    Bodies are single records holding their integer index. Request ``i`` waits until request ``i + 1`` has
    finished, except the last of its window (and the last of all, ``total - 1``), which answers at once. With
    ``window`` requests in flight, completion order within a window is therefore exactly reversed."""

    def __init__(self, window: int, total: int) -> None:
        super().__init__()
        self.window = window
        self.total = total
        self.finished: list[int] = []
        self._done = [threading.Event() for _ in range(total)]

    def invoke(self, body: bytes, content_type: str, accept: str) -> bytes:
        i = int(body)
        last_of_window = i % self.window == self.window - 1 or i == self.total - 1
        if not last_of_window and not self._done[i + 1].wait(timeout=30):
            raise ServekitError(ErrorCode.INTERNAL, f"request {i + 1} never finished")
        out = super().invoke(body, content_type, accept)
        with self._lock:
            self.finished.append(i)
        self._done[i].set()
        return out


HANDLER = textwrap.dedent('''
    """Test handler: one JSON line out per JSON line in ({"sum": ..., "n": ...}); fails on "boom"."""
    import json
    import os
    import time


    def model_fn(model_dir):
        return {"sleep": float(os.environ.get("TEST_SLEEP_S", "%(sleep)s"))}


    def transform_fn(model, body, content_type, accept):
        if model["sleep"]:
            time.sleep(model["sleep"])
        out = []
        for line in body.decode().splitlines():
            if not line.strip():
                continue
            if "boom" in line:
                raise ValueError("boom in " + line[:40])
            if content_type.startswith("text/csv"):
                values = [float(v) for v in line.split(",")]
            else:
                values = json.loads(line)
            values = values if isinstance(values, list) else [values]
            out.append(json.dumps({"sum": round(sum(values), 6), "n": len(values)}))
        return "".join(o + "\\n" for o in out), "application/jsonlines"
''').lstrip()


def write_handler_model(version_dir: Path, sleep_s: float = 0.0) -> Path:
    """A handler model (``code/inference.py``) that sums each JSON/CSV line; ``TEST_SLEEP_S`` (its environment,
    read when it loads) or ``sleep_s`` makes every request take that long."""
    code = version_dir / "code"
    code.mkdir(parents=True, exist_ok=True)
    (code / "inference.py").write_text(HANDLER % {"sleep": sleep_s})
    return version_dir
