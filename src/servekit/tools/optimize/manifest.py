"""The new version's ``servekit.toml``: the runtime it now needs and, for a converted sklearn model, the sklearn
runtime's signatures, so every signature name, tensor name and class label clients use keeps working."""

from __future__ import annotations

import json
from collections.abc import Iterable

from servekit.serving.runtime.manifest import Manifest
from servekit.types import PREDICT_METHOD, Signature, TensorSpec


def _str(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string (both escape the same way)


def _list(values: Iterable[str]) -> str:
    return "[" + ", ".join(_str(v) for v in values) + "]"


def _tensor(spec: TensorSpec) -> str:
    shape = "[" + ", ".join(str(d) for d in spec.shape) + "]"
    return f"{{ name = {_str(spec.name)}, datatype = {_str(spec.datatype)}, shape = {shape} }}"


def render_manifest(manifest: Manifest, runtime: str, signatures: Iterable[Signature] = ()) -> str:
    lines = [f"# written by servekit optimize\nruntime = {_str(runtime)}"]
    if manifest.feature_names:
        lines.append(f"feature_names = {_list(manifest.feature_names)}")
    if manifest.class_labels:
        lines.append(f"class_labels = {_list(manifest.class_labels)}")
    # ``signatures`` are the loaded servable's, which already hold those the old manifest declared.
    for sig in signatures:
        lines += ["", "[[signatures]]", f"name = {_str(sig.name)}"]
        if sig.method != PREDICT_METHOD:
            lines.append(f"method = {_str(sig.method)}")
        lines.append("inputs = [" + ", ".join(_tensor(t) for t in sig.inputs) + "]")
        lines.append("outputs = [" + ", ".join(_tensor(t) for t in sig.outputs) + "]")
        if sig.class_labels:
            lines.append(f"class_labels = {_list(sig.class_labels)}")
        if sig.feature_names:
            lines.append(f"feature_names = {_list(sig.feature_names)}")
    return "\n".join(lines) + "\n"
