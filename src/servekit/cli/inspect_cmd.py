"""``servekit inspect``: print a version's signatures the way ``saved_model_cli show --all`` does."""

from __future__ import annotations

from collections.abc import Mapping

from servekit.runtime.base import ListedSignatures
from servekit.types import Signature, TensorSpec, tf_dtype


def _tensor(kind: str, spec: TensorSpec) -> list[str]:
    shape = "(" + ", ".join(str(d) for d in spec.shape) + ("," if len(spec.shape) == 1 else "") + ")"
    return [
        f"    {kind}['{spec.name}'] tensor_info:",
        f"        dtype: {tf_dtype(spec.datatype)}",
        f"        shape: {shape}",
        f"        name: {spec.name}",
    ]


def render_signatures(signatures: Mapping[str, Signature], platform: str) -> str:
    if isinstance(signatures, ListedSignatures):  # a SavedModel: saved_model_cli's own listing of its map
        return f"Runtime: {platform}\n{signatures.listing}"
    lines = [f"Runtime: {platform}", "", "Model contains the following SignatureDefs:"]
    for name, sig in signatures.items():
        lines += ["", f"signature_def['{name}']:", "  The given SignatureDef contains the following input(s):"]
        for t in sig.inputs:
            lines += _tensor("inputs", t)
        lines.append("  The given SignatureDef contains the following output(s):")
        for t in sig.outputs:
            lines += _tensor("outputs", t)
        lines.append(f"  Method name is: {sig.method}")
        if sig.class_labels:
            lines.append(f"  Class labels: {', '.join(sig.class_labels)}")
        if sig.feature_names:
            lines.append(f"  Feature names: {', '.join(sig.feature_names)}")
    return "\n".join(lines)
