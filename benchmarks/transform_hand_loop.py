#!/usr/bin/env python3
"""The hand-written batch transform loop that ``transform_bench.py`` compares servekit with.

orjson per line → numpy float32 batches of 1,024 → onnxruntime with one intra-op thread → orjson lines written
to ``<file name>.out``. Imports only orjson, numpy and onnxruntime, so that run as a script
(``python benchmarks/transform_hand_loop.py MODEL_VERSION_DIR OUT_DIR FILE...``) it also measures what such a
script costs to start, as ``servekit transform run``'s wall time does.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import orjson

BATCH = 1024


def session(model_dir: Path) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(model_dir / "model.onnx"), so, providers=["CPUExecutionProvider"])


def encode(names: list[str], outs: list[Any]) -> bytes:
    """The JSON Lines servekit writes for these outputs (so (a) and (c) can be compared byte for byte)."""
    if len(outs) == 1:
        return b"".join(orjson.dumps(r) + b"\n" for r in outs[0].tolist())
    cols = [o.tolist() if o.dtype.kind != "f" else list(o) for o in outs]
    return b"".join(
        orjson.dumps(dict(zip(names, row, strict=True)), option=orjson.OPT_SERIALIZE_NUMPY) + b"\n"
        for row in zip(*cols, strict=True)
    )


def limit_loop(model_dir: Path, inputs: Path, out_dir: Path, files: list[Path] | None = None) -> tuple[float, int]:
    """Seconds for one process to transform every file of ``inputs`` (or ``files``), and the records done."""
    sess = session(model_dir)
    name = sess.get_inputs()[0].name
    outputs = [o.name for o in sess.get_outputs()]
    out_dir.mkdir(parents=True, exist_ok=True)
    n = 0
    start = time.perf_counter()
    for path in files if files is not None else sorted(inputs.iterdir()):
        with path.open("rb") as f, (out_dir / (path.name + ".out")).open("wb") as out:
            batch: list[Any] = []
            for line in f:
                batch.append(orjson.loads(line))
                if len(batch) == BATCH:
                    out.write(encode(outputs, sess.run(outputs, {name: np.array(batch, dtype=np.float32)})))
                    n += len(batch)
                    batch = []
            if batch:
                out.write(encode(outputs, sess.run(outputs, {name: np.array(batch, dtype=np.float32)})))
                n += len(batch)
    return time.perf_counter() - start, n


if __name__ == "__main__":
    files = [Path(p) for p in sys.argv[3:]]
    limit_loop(Path(sys.argv[1]), files[0].parent if files else Path("."), Path(sys.argv[2]), files)
