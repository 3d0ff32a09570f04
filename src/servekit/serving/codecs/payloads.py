"""SageMaker ``/invocations`` bodies as :class:`~servekit.serving.schema.Payload`: decoded only once the
leased version is known to take tensors (a model with an ``inference.py`` handler gets the bytes instead), and
with the signature chosen once, from the custom attributes or the body's ``signature_name``."""

from __future__ import annotations

from typing import Any

import numpy.typing as npt

from servekit.errors import ErrorCode, ServekitError
from servekit.serving.codecs.json import loads
from servekit.serving.codecs.sagemaker import JSON, decode_body
from servekit.serving.codecs.tfjson import decode_examples
from servekit.types import PREDICT_METHOD, Signature


class InvocationPayload:
    def __init__(self, body: bytes, media: str, method: str, verb: str = "predict") -> None:
        self._body = body
        self._media = media
        self._method = method
        self._verb = verb
        self._decoded = False
        self._error: Exception | None = None
        self._inputs: dict[str, npt.NDArray[Any]] = {}
        self._doc: Any = None
        self._signature: str | None = None
        self.rows = True  # whether the inputs came as rows (and so the answer goes back as rows)

    @property
    def media(self) -> str:
        return self._media

    def preset(self, decoded: tuple[dict[str, npt.NDArray[Any]], bool, str | None] | Exception) -> None:
        """Take the result of ``decode_body`` done elsewhere (a large body, in another process), or its error,
        which is raised only if a tensor model needs the body (a model that takes raw bodies never sees it)."""
        if isinstance(decoded, Exception):
            self._error = decoded
        else:
            self._inputs, self.rows, self._signature = decoded
            self._decoded = True

    def _decode(self) -> None:
        if self._error is not None:
            raise self._error
        if self._decoded:
            return
        if self._method == PREDICT_METHOD:
            self._inputs, self.rows, self._signature = decode_body(self._body, self._media)
        else:
            if self._media != JSON:
                raise ServekitError(
                    ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                    f'tfs-method={self._verb} takes application/json bodies with "examples"',
                )
            self._doc = loads(self._body)
            name = self._doc.get("signature_name") if isinstance(self._doc, dict) else None
            self._signature = name if isinstance(name, str) else None
        self._decoded = True

    def signature_name(self) -> str | None:
        self._decode()
        return self._signature

    def tensors(self, sig: Signature) -> dict[str, npt.NDArray[Any]]:
        self._decode()
        if self._method == PREDICT_METHOD:
            return self._inputs
        return decode_examples(self._doc, sig)
