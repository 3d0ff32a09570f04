"""Linear Learner inference as SageMaker's ``linear-learner`` container answers: RecordIO-protobuf (the SDK's
``RecordSerializer``), CSV rows, JSON or JSON lines in (instances.py); each record's ``score`` and, for
classifiers, ``predicted_label`` out (handlers/scored_out.py): JSON by default, JSON lines, RecordIO-protobuf or CSV."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.services.training.algorithms import instances, linear_learner
from servekit.services.training.algorithms.handlers import scored_out

NAME = "Linear Learner"


def model_fn(model_dir: str) -> linear_learner.Model:
    return linear_learner.load(Path(model_dir))


def input_fn(body: bytes | str, content_type: str) -> npt.NDArray[np.float64]:
    return instances.read(body, content_type, NAME)


def predict_fn(data: npt.NDArray[np.float64], model: linear_learner.Model) -> list[dict[str, Any]]:
    return linear_learner.predict(data, model)


def output_fn(predictions: list[dict[str, Any]], accept: str) -> tuple[bytes, str]:
    return scored_out.answer(predictions, accept, NAME)
