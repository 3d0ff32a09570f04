"""One pipeline stage, served by ``servekit serve`` through the ``inference.py`` contract (the split writes a
one-line ``code/inference.py`` importing :func:`model_fn`; the toolkit's default ``input_fn``/``output_fn`` decode
and encode, and ``predict_fn`` calls :meth:`Stage.predict`).

Stage 0 drives a request: it cuts the batch into micro-batches (``OPTION_PIPELINE_MICRO_BATCHES``, default 1),
runs each through its own layers and hands the activation to the next stage's ``/invocations`` as
``application/x-npy`` (``SERVEKIT_PIPELINE_NEXT``: the later stages' URLs, in order), then joins the answers in
order. Micro-batches run on threads, so while stage 1 works on the first, stage 0 works on the second: the stages
work at once. A stage runs one micro-batch at a time (it is one device), on the CPUs its process is pinned to.

Each stage keeps its compute seconds and writes them with its wall seconds to ``SERVEKIT_PIPELINE_STATS`` twice a
second; the control plane turns them into compute and idle time and the variant's ``Util``.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import numpy.typing as npt

from servekit._utils.processes import usable_cpus

NEXT_ENV = "SERVEKIT_PIPELINE_NEXT"  # comma-separated URLs of the later stages, stage 0 only
STATS_ENV = "SERVEKIT_PIPELINE_STATS"  # where this stage writes its compute and wall seconds
MICRO_BATCHES_ENV = "OPTION_PIPELINE_MICRO_BATCHES"
NPY = "application/x-npy"
STATS_INTERVAL_S = 0.5

Array = npt.NDArray[Any]


def split_rows(batch: Array, micro_batches: int) -> list[Array]:
    """``batch`` cut along its first axis into at most ``micro_batches`` consecutive parts of near-equal size (a
    batch of fewer rows gets one part per row; a scalar or empty batch stays whole)."""
    if batch.ndim == 0 or batch.shape[0] <= 1 or micro_batches <= 1:
        return [batch]
    rows = batch.shape[0]
    size = math.ceil(rows / min(micro_batches, rows))
    return [batch[i : i + size] for i in range(0, rows, size)]


def join_rows(parts: Sequence[Array]) -> Array:
    """The parts' answers back in one batch, in order (the inverse of :func:`split_rows`)."""
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


def micro_batches_from(environ: dict[str, str] | os._Environ[str]) -> int:
    """``OPTION_PIPELINE_MICRO_BATCHES``, at least 1; default 1 (off): measured on CPUs
    (benchmarks/pipeline_parallel_bench.py), a micro-batch of a stage whose weights exceed the caches costs nearly
    as much as the whole batch (each reads every weight from memory), so concurrent requests, which stage 0 takes
    on threads of their own, fill the pipeline more cheaply."""
    raw = environ.get(MICRO_BATCHES_ENV) or "1"
    try:
        return max(1, int(raw))
    except ValueError:
        return 1


def encode(array: Array) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array, allow_pickle=False)
    return buf.getvalue()


def start_stats_writer(path: str, stats: Callable[[], dict[str, float]]) -> None:
    """Write ``stats()`` to ``path`` (atomically, as JSON) every :data:`STATS_INTERVAL_S` from a daemon thread."""

    def forever() -> None:
        target = Path(path)
        tmp = target.with_suffix(".tmp")
        while True:
            with contextlib.suppress(OSError):
                tmp.write_text(json.dumps(stats()))
                os.replace(tmp, target)
            time.sleep(STATS_INTERVAL_S)  # a reporting period, not a synchronisation

    threading.Thread(target=forever, name="stage-stats", daemon=True).start()


class NextStage:
    """A later stage's ``/invocations``, one keep-alive connection per calling thread."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._local = threading.local()

    def _conn(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
        return conn

    def __call__(self, array: Array) -> Array:
        body = encode(array)
        for attempt in range(2):  # a keep-alive connection the stage closed meanwhile is opened again once
            conn = self._conn()
            try:
                conn.request("POST", "/invocations", body, {"Content-Type": NPY, "Accept": NPY})
                resp = conn.getresponse()
                data = resp.read()
            except (ConnectionError, http.client.HTTPException):
                conn.close()
                self._local.conn = None
                if attempt:
                    raise
                continue
            if resp.status != 200:
                raise RuntimeError(f"stage at {self.host}:{self.port} answered {resp.status}: {data[:300]!r}")
            out: Array = np.load(io.BytesIO(data), allow_pickle=False)
            return out
        raise AssertionError("unreachable")


class Stage:
    """This process's stage: its own graph (an onnxruntime session), and for stage 0 the later stages."""

    def __init__(
        self,
        run: Callable[[Array], Array],
        next_stages: Sequence[Callable[[Array], Array]] = (),
        micro_batches: int = 1,
        stats_path: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._run = run
        self._next = list(next_stages)
        self.micro_batches = micro_batches
        self._lock = threading.Lock()  # one micro-batch at a time: the stage is one device
        self._clock = clock
        self.started = clock()
        self.compute_s = 0.0
        self.batches = 0
        self._stats_path = stats_path
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="stage") if self._next else None
        if stats_path:
            start_stats_writer(stats_path, self.stats)

    def compute(self, batch: Array) -> Array:
        with self._lock:
            t0 = self._clock()
            try:
                return self._run(batch)
            finally:
                self.compute_s += self._clock() - t0
                self.batches += 1

    def _through(self, part: Array) -> Array:
        out = self.compute(part)
        for stage in self._next:
            out = stage(out)
        return out

    def predict(self, batch: Any) -> Array:
        batch = np.asarray(batch, dtype=np.float32) if not isinstance(batch, np.ndarray) else batch
        if self._pool is None:
            return self.compute(batch)
        parts = split_rows(batch, self.micro_batches)
        if len(parts) == 1:
            return self._through(parts[0])
        return join_rows(list(self._pool.map(self._through, parts)))

    def stats(self) -> dict[str, float]:
        return {"compute_s": self.compute_s, "wall_s": self._clock() - self.started, "batches": self.batches}


def _onnx_runner(model_dir: str) -> Callable[[Array], Array]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = usable_cpus()
    opts.inter_op_num_threads = 1
    # no pre-packed copy of each weight matrix: with the weights mapped from their file (the split saved them as
    # external data) a stage holds about one copy of its own weights, which its envelope was sized for
    opts.add_session_config_entry("session.disable_prepacking", "1")
    session = ort.InferenceSession(str(Path(model_dir) / "model.onnx"), opts, providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    dtype = np.float32 if session.get_inputs()[0].type == "tensor(float)" else None

    def run(batch: Array) -> Array:
        feed = batch.astype(dtype, copy=False) if dtype is not None else batch
        out: Array = session.run(None, {name: feed})[0]
        return out

    return run


def model_fn(model_dir: str) -> Stage:
    """The toolkit's ``model_fn``: this stage's graph only (the split wrote it alone into ``model_dir``)."""
    urls = [u for u in os.environ.get(NEXT_ENV, "").split(",") if u]
    return Stage(
        _onnx_runner(model_dir),
        [NextStage(u) for u in urls],
        micro_batches_from(os.environ),
        os.environ.get(STATS_ENV) or None,
    )
