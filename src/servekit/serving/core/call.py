"""One inference call, protocol-neutral: choose the signature, check the inputs, run the model, name its failure.

The service (on a worker thread or a batch), warmup and batch transform all go through these functions, so a
request is checked and its errors are worded the same way wherever it comes from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy.typing as npt

from servekit.errors import ErrorCode, ServekitError, invalid, not_found
from servekit.serving.core.validate import validate_inputs
from servekit.serving.runtime.base import Servable
from servekit.serving.schema import Inputs, Tensors
from servekit.types import DEFAULT_SIGNATURE, PREDICT_METHOD, Signature


def pick_signature(signatures: Mapping[str, Signature], name: str | None, method: str, model: str) -> Signature:
    if name:
        sig = signatures.get(name)
        if sig is None:
            listing = ", ".join(sorted(signatures))
            raise not_found(f"model '{model}' has no signature '{name}'; signatures: {listing}")
    elif method == PREDICT_METHOD:
        sig = signatures.get(DEFAULT_SIGNATURE) or next(iter(signatures.values()))
    else:
        sig = next((s for s in signatures.values() if s.method == method), None)
        if sig is None:
            listing = ", ".join(sorted(signatures))
            raise invalid(f"model '{model}' has no signature with method {method}; signatures: {listing}")
    if method != PREDICT_METHOD and sig.method != method:
        raise invalid(f"signature '{sig.name}' of model '{model}' has method {sig.method}, not {method}")
    return sig


def prepare(
    signatures: Mapping[str, Signature],
    model: str,
    inputs: Inputs,
    signature: str | None = None,
    method: str = PREDICT_METHOD,
    outputs: tuple[str, ...] | None = None,
) -> tuple[Signature, Tensors]:
    """The signature a request runs and its inputs checked and cast to it (400/404 otherwise).

    ``inputs`` is either tensors or a :class:`Payload` whose tensors depend on the signature chosen; a payload
    may name the signature itself (a body's ``signature_name``), which ``signature`` overrides."""
    if isinstance(inputs, dict):
        sig = pick_signature(signatures, signature, method, model)
        tensors: Mapping[str, npt.NDArray[Any]] = inputs
    else:
        sig = pick_signature(signatures, signature or inputs.signature_name(), method, model)
        tensors = inputs.tensors(sig)
    checked = validate_inputs(sig, tensors)
    if outputs is not None and sig.validate:
        wanted = [o.name for o in sig.outputs]
        unknown = [o for o in outputs if o not in wanted]
        if unknown:
            raise invalid(f"unknown output(s) {', '.join(map(repr, unknown))}; {sig.describe()}")
    return sig, checked


def model_failure(exc: Exception, model: str, version: int) -> ServekitError:
    """What a client is told when the model itself raised (a ServekitError from the model passes as it is).

    The message names the model and version only; the exception itself is kept in ``details["cause"]`` for
    the server log and for local tools (warmup, batch transform), not for the HTTP body."""
    if isinstance(exc, ServekitError):
        return exc
    return ServekitError(
        ErrorCode.MODEL_ERROR,
        f"model '{model}' version {version} failed while running the request",
        {"cause": f"{type(exc).__name__}: {exc}"},
    )


def full_message(err: ServekitError) -> str:
    """The message with its cause, for places where the reader owns the server (logs, warmup, transform)."""
    cause = err.details.get("cause")
    return f"{err.message}: {cause}" if cause else err.message


def predict_now(
    servable: Servable,
    model: str,
    version: int,
    inputs: Inputs,
    signature: str | None = None,
    method: str = PREDICT_METHOD,
) -> tuple[Signature, Tensors]:
    """Run one request on this thread: :func:`prepare`, the model, :func:`model_failure`."""
    sig, checked = prepare(servable.signatures, model, inputs, signature, method)
    try:
        return sig, servable.predict(sig.name, checked)
    except Exception as exc:
        raise model_failure(exc, model, version) from exc
