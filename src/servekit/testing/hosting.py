"""Models for hosting tests: tiny ``inference.py`` handler models that load in milliseconds and need no
framework, so a test can start real ``servekit serve`` instances by the dozen."""

from __future__ import annotations

import textwrap
from pathlib import Path


def scaling_model(root: Path, name: str, factor: float, broken: bool = False) -> Path:
    """``<root>/<name>/1/code/inference.py``: a JSON list in, ``{"out": [x * factor, ...]}`` out; with ``broken``
    its ``model_fn`` raises ("weights file is corrupt"), so the version never loads. Returns the model base."""
    version = root / name / "1"
    (version / "code").mkdir(parents=True)
    body = "raise RuntimeError('weights file is corrupt')" if broken else f"return {factor}"
    (version / "code" / "inference.py").write_text(
        textwrap.dedent(
            f"""
            import json

            def model_fn(model_dir):
                {body}

            def transform_fn(model, data, content_type, accept):
                return json.dumps({{"out": [x * model for x in json.loads(data)]}}), "application/json"
            """
        )
    )
    return root / name
