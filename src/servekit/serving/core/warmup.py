"""Warmup: replay recorded requests against a freshly loaded version before it takes traffic.

``<version>/assets.extra/warmup_requests.jsonl`` holds one request body per line, in TF Serving REST
(``{"instances"|"inputs": ...}``), KServe V2 (``{"inputs": [{"name", "datatype", "shape", "data"}]}``) or
SageMaker JSON (a bare list of rows) form. Like TF Serving, at most 1000 records, and a record that fails
fails the load: a version that cannot answer its own warmup must not take traffic.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy.typing as npt

from servekit.errors import ConfigError, ErrorCode, ServekitError
from servekit.serving.codecs.json import loads
from servekit.serving.codecs.tfjson import decode_instances, decode_predict
from servekit.serving.codecs.v2 import decode_v2_inputs
from servekit.serving.core.call import full_message, predict_now
from servekit.serving.runtime.base import Servable

log = logging.getLogger(__name__)

WARMUP_FILE = Path("assets.extra") / "warmup_requests.jsonl"
MAX_RECORDS = 1000


def _decode(doc: Any) -> tuple[dict[str, npt.NDArray[Any]], str | None]:
    if isinstance(doc, list):
        return decode_instances(doc, ()), None
    if not isinstance(doc, dict):
        raise ConfigError("expected a JSON object or list")
    inputs = doc.get("inputs")
    if isinstance(inputs, list) and inputs and all(isinstance(i, dict) and "datatype" in i for i in inputs):
        params = doc.get("parameters") or {}
        return decode_v2_inputs(inputs), params.get("signature_name") if isinstance(params, dict) else None
    decoded, _ = decode_predict(doc, ())
    name = doc.get("signature_name")
    return decoded, name if isinstance(name, str) else None


def run_warmup(servable: Servable, version_dir: Path, model: str, iterations: int = 1, version: int = 0) -> int:
    """Replay the version's warmup records; returns how many records ran (0 when there is no file)."""
    path = version_dir / WARMUP_FILE
    if not path.is_file():
        return 0
    lines = [(n, line) for n, line in enumerate(path.read_bytes().splitlines(), start=1) if line.strip()]
    if len(lines) > MAX_RECORDS:
        raise ConfigError(f"Number of warmup records exceeds the maximum ({MAX_RECORDS}) at {path}")
    started = time.perf_counter()
    for lineno, line in lines:
        try:
            inputs, sig_name = _decode(loads(line, "warmup record"))
            for _ in range(iterations):
                predict_now(servable, model, version, inputs, sig_name)
        except ServekitError as exc:
            if exc.code is ErrorCode.MODEL_ERROR:
                raise ConfigError(f"warmup record {path}:{lineno} failed: {full_message(exc)}") from exc
            raise ConfigError(f"warmup record {path}:{lineno} is invalid: {exc.message}") from None
        except ConfigError as exc:
            raise ConfigError(f"warmup record {path}:{lineno}: {exc}") from None
    log.info("model %s: %d warmup records x %d in %.3fs", model, len(lines), iterations, time.perf_counter() - started)
    return len(lines)
