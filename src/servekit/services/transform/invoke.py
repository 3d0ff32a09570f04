"""Call the model with one request body: in process through a runtime, or over HTTP at ``/invocations``.

Both speak the SageMaker container contract, so a job gives the same bytes either way: the in-process
invoker decodes and encodes bodies with the SageMaker adapter's codecs, and a handler model
(``inference.py``) gets the raw body exactly as ``/invocations`` would hand it over. Failures are
:class:`ServekitError`; :func:`invoke_with_retries` retries the transient ones.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit

import numpy.typing as npt
import orjson

from servekit.errors import ErrorCode, ServekitError
from servekit.serving.codecs.numeric_json import numeric_lines
from servekit.serving.codecs.sagemaker import (
    CSV,
    JSON,
    JSONLINES,
    decode_body,
    decode_jsonlines_fast,
    encode_body,
    media_type,
    negotiate_accept,
)
from servekit.serving.codecs.tfjson import decode_instances
from servekit.serving.core.call import full_message, predict_now
from servekit.serving.runtime.base import RawInvocable, Servable, whole
from servekit.serving.schema import ONLY_INPUT, InferenceResponse

# Worth another try: the server was unreachable, slow, overloaded or failed inside.
RETRIABLE = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.DEADLINE_EXCEEDED, ErrorCode.INTERNAL})
# Bisecting a failed mini-batch helps unless the server could not be reached at all.
TRANSPORT = frozenset({ErrorCode.UNAVAILABLE, ErrorCode.DEADLINE_EXCEEDED})


class Invoker(Protocol):
    def invoke(self, body: bytes, content_type: str, accept: str) -> bytes:
        """The response body, or :class:`ServekitError`. Called from several threads at once."""
        ...

    def close(self) -> None: ...


def call_with_retries(
    call: Callable[[], bytes], max_retries: int, sleep: Callable[[float], None] = time.sleep, backoff_s: float = 0.1
) -> bytes:
    """Up to ``1 + max_retries`` attempts, with exponential backoff, for the retriable error codes."""
    attempt = 0
    while True:
        try:
            return call()
        except ServekitError as exc:
            if exc.code not in RETRIABLE or attempt >= max_retries:
                if attempt:
                    exc.message = f"{exc.message} (after {attempt + 1} attempts)"
                    exc.args = (exc.message,)
                raise
        sleep(backoff_s * 2**attempt)
        attempt += 1


@runtime_checkable
class LineInvoker(Protocol):
    """An invoker that can take a Line-split MultiRecord request as its records, saving a join and a split."""

    def invoke_lines(self, lines: list[bytes], content_type: str, accept: str) -> bytes:
        """The same answer as ``invoke(b"\\n".join(lines) + b"\\n", ...)``."""
        ...


ROWS_PER_CALL = 1024
_LINE_MEDIA = (JSONLINES, CSV)


class RuntimeInvoker:
    """The model in this process: ``/invocations`` semantics without the HTTP.

    A line-oriented body (JSON Lines or CSV, answered in JSON Lines or CSV) reaches the model
    ``rows_per_call`` lines at a time and the answers are concatenated, as TF Serving's large-batch splitting
    does: a line is a record, and a small working set instead of a 6 MB one is markedly faster. The records
    are the same as from one call; float outputs may differ in their last digits, as between any two batch
    sizes, and are deterministic for a job (the parts depend only on the request). If any part fails, or the
    parts decode to different row shapes, the whole body runs again in one call, so the outcome is the one
    ``/invocations`` gives."""

    def __init__(
        self, servable: Servable, name: str = "model", rows_per_call: int = ROWS_PER_CALL, version: int = 0
    ) -> None:
        self._servable = servable
        self._name = name
        self._version = version
        self._raw = servable if isinstance(servable, RawInvocable) else None
        self._rows_per_call = rows_per_call

    def invoke(self, body: bytes, content_type: str, accept: str) -> bytes:
        if self._raw is not None:
            return whole(self._raw.invoke(body, content_type, accept or JSON)[0])  # a streamed answer, joined
        media, accept = media_type(content_type), negotiate_accept(accept, JSON)
        if media in _LINE_MEDIA and accept in _LINE_MEDIA and self._rows_per_call:
            lines = body.split(b"\n")
            if lines[-1] == b"":
                lines.pop()
            parts = self._in_parts(lines, media, accept)
            if parts is not None:
                return parts
        return self._call(decode_body(body, media), accept)[0]

    def invoke_lines(self, lines: list[bytes], content_type: str, accept: str) -> bytes:
        media, norm = media_type(content_type), negotiate_accept(accept, JSON)
        if self._raw is None and media in _LINE_MEDIA and norm in _LINE_MEDIA and self._rows_per_call:
            out = self._in_parts(lines, media, norm)
            if out is not None:
                return out
        return self.invoke(b"\n".join(lines) + b"\n", content_type, accept)

    def _in_parts(self, lines: list[bytes], media: str, accept: str) -> bytes | None:
        """The answer from ``rows_per_call`` lines at a time; None when one call must decide (an error, or parts
        whose rows differ in shape, which one call would refuse)."""
        k = self._rows_per_call
        try:
            parts = [self._call(_decode_lines(lines[i : i + k], media), accept) for i in range(0, len(lines), k)]
        except ServekitError:
            return None
        if len({shape for _, shape in parts}) > 1:
            return None
        return b"".join(out for out, _ in parts)

    def _call(
        self, decoded: tuple[dict[str, npt.NDArray[Any]], bool, str | None], accept: str
    ) -> tuple[bytes, tuple[Any, ...]]:
        """The answer, and the row shape and kind of every input (equal across parts of one body)."""
        inputs, rows, sig_name = decoded
        shape = tuple((n, a.shape[1:], a.dtype.kind) for n, a in sorted(inputs.items()))
        try:
            sig, outputs = predict_now(self._servable, self._name, self._version, inputs, sig_name)
        except ServekitError as exc:  # the job's owner reads the errors file: give the model's own words
            if exc.code is ErrorCode.MODEL_ERROR:
                raise ServekitError(exc.code, full_message(exc)) from exc
            raise
        resp = InferenceResponse(self._name, 0, sig.name, outputs, sig.class_labels)
        return encode_body(resp, accept, rows), shape

    def close(self) -> None:
        self._servable.unload()


def _decode_lines(lines: list[bytes], media: str) -> tuple[dict[str, npt.NDArray[Any]], bool, str | None]:
    """:func:`decode_body` of the body these lines make, without joining them when they are JSON Lines."""
    if media == JSONLINES:
        rows = numeric_lines(lines)  # a flat list of numbers per line, the usual input: parsed as one
        if rows is not None:
            return {ONLY_INPUT: rows}, True, None
        try:
            values = list(map(orjson.loads, lines))
        except orjson.JSONDecodeError:  # blank lines, NaN, malformed: the adapter's decoder decides
            values = decode_jsonlines_fast(b"\n".join(lines))
        if not values:
            return decode_body(b"", media)
        return decode_instances(values, ()), True, None
    return decode_body(b"\n".join(lines), media)


class HttpInvoker:
    """POSTs bodies to ``<endpoint>/invocations`` over keep-alive connections, one per calling thread."""

    def __init__(self, endpoint_url: str, timeout_s: float, headers: dict[str, str] | None = None) -> None:
        parts = urlsplit(endpoint_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {endpoint_url!r}")
        path = parts.path.rstrip("/")
        self._path = path if path.endswith("/invocations") else path + "/invocations"
        self._url = f"{parts.scheme}://{parts.netloc}{self._path}"
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._timeout = timeout_s
        self._headers = dict(headers or {})
        self._local = threading.local()
        self._all: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _conn(self) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
            conn = cls(self._host, self._port, timeout=self._timeout)
            self._local.conn = conn
            with self._lock:
                self._all.append(conn)
        return conn

    def _drop(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def invoke(self, body: bytes, content_type: str, accept: str) -> bytes:
        headers = {**self._headers, "Content-Type": content_type, "Accept": accept or JSON}
        try:
            conn = self._conn()
            conn.request("POST", self._path, body, headers)
            resp = conn.getresponse()
            data = resp.read()
        except TimeoutError:
            self._drop()
            raise ServekitError(
                ErrorCode.DEADLINE_EXCEEDED, f"{self._url} did not answer within {self._timeout:g}s"
            ) from None
        except (OSError, http.client.HTTPException) as exc:
            self._drop()
            raise ServekitError(ErrorCode.UNAVAILABLE, f"cannot reach {self._url}: {exc}") from None
        if resp.status == 200:
            return data
        if resp.getheader("connection", "").lower() == "close":
            self._drop()
        text = data[:500].decode("utf-8", "replace").strip()
        raise ServekitError(_code_of(resp.status), f"{self._url} answered {resp.status}: {text}")

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()


def _code_of(status: int) -> ErrorCode:
    if status in (408, 429, 502, 503):
        return ErrorCode.UNAVAILABLE
    if status == 504:
        return ErrorCode.DEADLINE_EXCEEDED
    if status >= 500:
        return ErrorCode.UNIMPLEMENTED if status == 501 else ErrorCode.INTERNAL
    return {
        404: ErrorCode.NOT_FOUND,
        406: ErrorCode.NOT_ACCEPTABLE,
        413: ErrorCode.PAYLOAD_TOO_LARGE,
        415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    }.get(status, ErrorCode.INVALID_ARGUMENT)
