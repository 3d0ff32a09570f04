"""Factorization Machines inference as SageMaker's ``factorization-machines`` container answers: RecordIO-protobuf
(the SDK's ``RecordSerializer``; dense or sparse), CSV rows, JSON (``{"instances": [{"features": [...]}]}``, also
``{"data": {"features": {"values": [...]}}}`` with ``keys`` and ``shape`` when sparse) or JSON lines in
(instances.py); each record's ``score`` and, for a binary classifier, ``predicted_label`` out
(handlers/scored_out.py): JSON by default, JSON lines, RecordIO-protobuf or CSV."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import factorization_machines, instances
from servekit.services.training.algorithms.handlers import scored_out

NAME = "Factorization Machines"


def model_fn(model_dir: str) -> factorization_machines.Model:
    return factorization_machines.load(Path(model_dir))


def input_fn(body: bytes | str, content_type: str) -> npt.NDArray[np.float64]:
    return instances.read(body, content_type, NAME)


def predict_fn(data: npt.NDArray[np.float64], model: factorization_machines.Model) -> list[dict[str, Any]]:
    return factorization_machines.predict(data, model)


def output_fn(predictions: list[dict[str, Any]], accept: str) -> tuple[bytes, str]:
    return scored_out.answer(predictions, accept, NAME)
