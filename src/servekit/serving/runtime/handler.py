"""SageMaker's ``inference.py`` contract (sagemaker-inference-toolkit's Transformer).

``<version>/code/inference.py`` (or the script ``servekit.toml``'s ``entry_point`` names in ``code/``: a framework
model's ``SAGEMAKER_PROGRAM``) must define ``model_fn`` and may define ``input_fn``, ``predict_fn``, ``output_fn`` or
``transform_fn``, each with an optional trailing ``context``. Where it lacks them, the toolkit's defaults apply:
``input_fn`` decodes JSON, CSV and NPY into a numpy array, ``predict_fn`` calls ``model.predict(data)`` (as the
scikit-learn and XGBoost containers do), ``output_fn`` encodes to the Accept type (JSON by default, CSV, NPY).

The module is loaded from its file with ``importlib`` under a unique name (a training script's
``if __name__ == "__main__":`` block does not run). ``inference.py`` is loaded with ``sys.path`` unchanged; an
``entry_point`` script, as the framework containers import it, finds the modules beside it: ``code/`` is on
``sys.path`` while it is imported (and removed after, so modules it imports lazily are not found).
"""

from __future__ import annotations

import importlib.util
import inspect
import io
import itertools
import json
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit._utils.jsondepth import nests_deeper_than
from servekit.config.models import RuntimeOptions
from servekit.errors import ConfigError, ErrorCode, ServekitError
from servekit.serving.runtime.base import UNKNOWN_CONCURRENCY, RawAnswer
from servekit.serving.runtime.manifest import Manifest
from servekit.types import DEFAULT_SIGNATURE, Signature, TensorMap, TensorSpec

HANDLER_FILE = Path("code") / "inference.py"
_counter = itertools.count()


@dataclass(frozen=True)
class HandlerContext:
    """What the toolkit's ``Context`` offers handlers that take a ``context`` argument."""

    model_dir: str
    system_properties: Mapping[str, Any] = field(default_factory=dict)
    request_content_type: str = ""
    accept_header: str = ""


class UnsupportedFormatError(ServekitError):
    def __init__(self, content_type: str, what: str) -> None:
        code = ErrorCode.UNSUPPORTED_MEDIA_TYPE if what == "content type" else ErrorCode.NOT_ACCEPTABLE
        super().__init__(
            code,
            f"{what} {content_type!r} is not supported by the default handler; "
            f"supported: application/json, text/csv, application/x-npy",
        )


MAX_JSON_DEPTH = 1024  # as the other JSON decoders (orjson's limit)


def default_input_fn(data: bytes, content_type: str) -> Any:
    ct = content_type.split(";")[0].strip().lower()
    if ct == "application/json":
        if nests_deeper_than(data, MAX_JSON_DEPTH):  # json recurses per level: refuse before it does
            raise ValueError(f"it nests JSON arrays/objects more than {MAX_JSON_DEPTH} levels deep")
        return np.array(json.loads(data))
    if ct == "text/csv":
        return np.genfromtxt(io.StringIO(data.decode("utf-8")), delimiter=",")
    if ct == "application/x-npy":
        return np.load(io.BytesIO(data), allow_pickle=False)
    raise UnsupportedFormatError(content_type, "content type")


def default_output_fn(prediction: Any, accept: str) -> tuple[bytes, str]:
    for ct in (a.split(";")[0].strip().lower() for a in accept.split(",")):
        if ct in ("application/json", "*/*"):
            value = prediction.tolist() if hasattr(prediction, "tolist") else prediction
            return json.dumps(value).encode(), "application/json"
        if ct == "text/csv":
            buf = io.StringIO()
            np.savetxt(buf, np.atleast_1d(np.asarray(prediction)), delimiter=",", fmt="%s")
            return buf.getvalue().encode(), "text/csv"
        if ct == "application/x-npy":
            bio = io.BytesIO()
            np.save(bio, np.asarray(prediction), allow_pickle=False)
            return bio.getvalue(), "application/x-npy"
    raise UnsupportedFormatError(accept, "accept type")


def default_predict_fn(data: Any, model: Any) -> Any:
    """The scikit-learn and XGBoost containers' default: the model's own ``predict``."""
    return model.predict(data)


def _arity_call(fn: Callable[..., Any], args: tuple[Any, ...], context: HandlerContext) -> Any:
    """Call ``fn`` with the trailing context argument only when its signature takes one more argument."""
    try:
        n = len(
            [
                p
                for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
        )
    except (TypeError, ValueError):
        n = len(args)
    return fn(*args, context) if n > len(args) else fn(*args)


def _model_raised(where: str, exc: BaseException) -> ServekitError:
    # The exception goes to the server log (details["cause"]), not to the client: it may say too much.
    return ServekitError(
        ErrorCode.MODEL_ERROR, f"the model's {where} failed", {"cause": f"{type(exc).__name__}: {exc}"}
    )


def _input_fault(data: Any, model: Any) -> str | None:
    """What is wrong with ``data`` when it, not the model, explains why ``predict_fn`` raised.

    Handler models take any data, so nothing is refused up front (a handler may reshape or impute); but when
    ``predict_fn`` fails on a row width the loaded estimator does not take (its ``n_features_in_``), or on
    NaN/Infinity, the client sent data the model cannot take: a 400, not a model failure.
    """
    if not isinstance(data, np.ndarray) or data.dtype.kind not in "biuf":
        return None
    n = getattr(model, "n_features_in_", None)
    if isinstance(n, int | np.integer) and data.ndim in (1, 2) and data.shape[-1] != n:
        return f"the input has shape {list(data.shape)} but the model takes {int(n)} features per row"
    if data.dtype.kind == "f" and not np.isfinite(data).all():
        return "the input holds NaN or Infinity, which the model does not accept"
    return None


def _predict_failed(data: Any, model: Any, exc: Exception) -> ServekitError:
    fault = _input_fault(data, model)
    if fault is None:
        return _model_raised("predict_fn", exc)
    # the fault is ours to say; the exception's text is user code's, for the server log only
    return ServekitError(
        ErrorCode.INVALID_ARGUMENT,
        f"{fault} (predict_fn raised {type(exc).__name__})",
        {"cause": f"{type(exc).__name__}: {exc}"},
    )


def _input_fn_refused(content_type: str, exc: BaseException) -> ServekitError:
    """The handler's own input_fn raised on the body: a client error, but its text is user code's and may say too
    much (a path, a secret). Only what json's own decoder says about the body's syntax is shown; the rest goes to
    the server log with the request id."""
    if isinstance(exc, RecursionError | json.JSONDecodeError):
        return _undecodable(content_type, exc)
    return ServekitError(
        ErrorCode.INVALID_ARGUMENT,
        f"the handler's input_fn refused the body as {content_type} ({type(exc).__name__})",
        {"cause": f"{type(exc).__name__}: {exc}"},
    )


def _undecodable(content_type: str, exc: BaseException) -> ServekitError:
    if isinstance(exc, RecursionError):
        what = "it is nested too deeply"
    else:
        what = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
    return ServekitError(ErrorCode.INVALID_ARGUMENT, f"could not decode the body as {content_type}: {what}")


def _streamed(value: Any) -> bool:
    """Whether a handler answered with pieces to stream: a generator or other iterator (a list, an array, bytes
    or a string is a whole answer)."""
    return isinstance(value, Iterator) and not isinstance(value, str | bytes | bytearray)


def _piece(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    raise ServekitError(ErrorCode.MODEL_ERROR, f"a streamed piece is {type(value).__name__}; expected bytes or str")


def _stream(
    pieces: Iterator[Any], encode: Callable[[Any], tuple[bytes, str]], where: str
) -> tuple[Iterator[bytes], str]:
    """A streamed answer: its first piece made now (so a handler that fails before any output fails the request
    as a whole, and the content type is known), the rest as the caller pulls them. An exception midway is the
    model's, raised from the iterator."""
    first = _next(pieces, where)
    if first is _END:
        return iter(()), "application/octet-stream"
    head, ctype = encode(first)

    def rest() -> Iterator[bytes]:
        yield head
        while (item := _next(pieces, where)) is not _END:
            yield encode(item)[0]

    return rest(), ctype


def _next(pieces: Iterator[Any], where: str) -> Any:
    """The handler's next piece (``_END`` after the last); what it raises is the model's failure."""
    try:
        return next(pieces, _END)
    except ServekitError:
        raise
    except Exception as exc:
        raise _model_raised(where, exc) from exc


_END = object()


def _to_bytes(result: Any, accept: str) -> tuple[bytes, str]:
    body, ctype = result if isinstance(result, tuple) and len(result) == 2 else (result, accept)
    if isinstance(body, str):
        body = body.encode("utf-8")
    if not isinstance(body, bytes | bytearray):
        raise ServekitError(
            ErrorCode.MODEL_ERROR, f"output_fn/transform_fn returned {type(body).__name__}; expected bytes or str"
        )
    return bytes(body), str(ctype)


class HandlerServable:
    platform = "python_handler"
    # The user's Python code: assume it holds the GIL and uses one thread.
    concurrency = UNKNOWN_CONCURRENCY

    def __init__(self, module: ModuleType, model_dir: Path, manifest: Manifest, script: str = "inference.py") -> None:
        self._ctx = HandlerContext(model_dir=str(model_dir))
        self._transform_fn = getattr(module, "transform_fn", None)
        pipeline = [n for n in ("input_fn", "predict_fn", "output_fn") if hasattr(module, n)]
        if self._transform_fn is not None and pipeline:
            raise ConfigError(
                f"{script} defines transform_fn together with {', '.join(pipeline)}; "
                "define transform_fn alone or the input/predict/output functions"
            )
        model_fn = getattr(module, "model_fn", None)
        if model_fn is None:
            raise ConfigError(f"{script} must define model_fn(model_dir)")
        try:
            self._model = _arity_call(model_fn, (str(model_dir),), self._ctx)
        except Exception as exc:
            raise ConfigError(f"model_fn raised {type(exc).__name__}: {exc}") from exc
        self._predict_fn: Callable[..., Any] | None = getattr(module, "predict_fn", None)
        if self._predict_fn is None and self._transform_fn is None:
            if not callable(getattr(self._model, "predict", None)):
                raise ConfigError(
                    f"{script} defines no predict_fn and the model its model_fn returned "
                    f"({type(self._model).__name__}) has no predict method; define predict_fn(data, model)"
                )
            self._predict_fn = default_predict_fn
        self._input_fn = getattr(module, "input_fn", None)
        self._output_fn = getattr(module, "output_fn", None)
        default = Signature(
            DEFAULT_SIGNATURE,
            (TensorSpec("inputs", "FP64", (-1, -1)),),
            (TensorSpec("predictions", "FP64", (-1,)),),
            validate=False,
        )
        self._signatures = {s.name: s for s in manifest.signatures} or {DEFAULT_SIGNATURE: default}

    @property
    def signatures(self) -> Mapping[str, Signature]:
        return self._signatures

    def predict(self, signature: str, inputs: TensorMap) -> dict[str, npt.NDArray[Any]]:
        """Named-tensor calls (TF Serving, KServe) go straight to ``predict_fn`` with the decoded array."""
        if self._predict_fn is None:
            raise ServekitError(
                ErrorCode.UNIMPLEMENTED, "this handler model defines transform_fn only; call it through /invocations"
            )
        sig = self._signatures[signature]
        data: Any = next(iter(inputs.values())) if len(inputs) == 1 else dict(inputs)
        try:
            result = _arity_call(self._predict_fn, (data, self._model), self._ctx)
        except ServekitError:
            raise
        except Exception as exc:
            raise _predict_failed(data, self._model, exc) from exc
        if isinstance(result, Mapping):
            return {str(k): np.asarray(v) for k, v in result.items()}
        return {sig.outputs[0].name: np.asarray(result)}

    def invoke(self, body: bytes, content_type: str, accept: str) -> tuple[RawAnswer, str]:
        ctx = HandlerContext(self._ctx.model_dir, request_content_type=content_type, accept_header=accept)
        if self._transform_fn is not None:
            try:
                result = _arity_call(self._transform_fn, (self._model, body, content_type, accept), ctx)
            except ServekitError:
                raise
            except Exception as exc:
                raise _model_raised("transform_fn", exc) from exc
            pieces, ctype = result if isinstance(result, tuple) and len(result) == 2 else (result, accept)
            if _streamed(pieces):
                return _stream(pieces, lambda item: (_piece(item), str(ctype)), "transform_fn")
            return _to_bytes(result, accept)
        ct = content_type.split(";")[0].strip().lower()
        data: Any = body
        if ct in ("application/json", "text/csv") and self._input_fn:
            try:
                data = body.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ServekitError(
                    ErrorCode.INVALID_ARGUMENT, f"the {ct} body is not UTF-8 text (byte {exc.start})"
                ) from None
        if self._input_fn is None:  # the toolkit's default decoders
            try:
                decoded = default_input_fn(body, content_type)
            except ServekitError:
                raise
            except Exception as exc:  # our own decoders: whatever they raise, the body was at fault
                raise _undecodable(content_type, exc) from exc
        else:
            try:
                decoded = _arity_call(self._input_fn, (data, content_type), ctx)
            except ServekitError:
                raise
            except (ValueError, RecursionError, OverflowError) as exc:  # what decoders raise on malformed bodies
                raise _input_fn_refused(content_type, exc) from exc
            except Exception as exc:
                raise _model_raised("input_fn", exc) from exc
        if self._predict_fn is None:  # pragma: no cover - __init__ sets a default unless transform_fn is defined
            raise ServekitError(ErrorCode.MODEL_ERROR, "the handler defines no predict_fn")
        try:
            prediction = _arity_call(self._predict_fn, (decoded, self._model), ctx)
        except ServekitError:
            raise
        except Exception as exc:
            raise _predict_failed(decoded, self._model, exc) from exc
        if _streamed(prediction):  # predict_fn yields: streamed as it comes
            return _stream(prediction, lambda item: self._streamed_piece(item, accept, ctx), "predict_fn")
        return self._output(prediction, accept, ctx)

    def _streamed_piece(self, item: Any, accept: str, ctx: HandlerContext) -> tuple[bytes, str]:
        """A piece predict_fn yielded: ``str`` (as UTF-8) or ``bytes`` go out as they are, with the Accept type (or
        text/plain, octet-stream for bytes, when it asks for anything); any other piece through output_fn (the
        default one JSON-encodes it)."""
        if isinstance(item, str | bytes | bytearray):
            plain = "application/octet-stream" if not isinstance(item, str) else "text/plain; charset=utf-8"
            return _piece(item), accept if accept and accept != "*/*" else plain
        return self._output(item, accept, ctx)

    def _output(self, prediction: Any, accept: str, ctx: HandlerContext) -> tuple[bytes, str]:
        try:
            result = (
                _arity_call(self._output_fn, (prediction, accept), ctx)
                if self._output_fn
                else default_output_fn(prediction, accept)
            )
        except ServekitError:
            raise
        except Exception as exc:
            raise _model_raised("output_fn", exc) from exc
        return _to_bytes(result, accept)

    def unload(self) -> None:
        self._model = None


def load_module(path: Path, search: Path | None = None) -> ModuleType:
    """Import the file ``path`` under a unique name; ``search`` is on ``sys.path`` while it runs (None: unchanged)."""
    name = f"servekit_handler_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    entry = str(search) if search is not None else None
    if entry is not None:
        sys.path.insert(0, entry)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ConfigError(f"importing {path} raised {type(exc).__name__}: {exc}") from exc
    finally:
        if entry is not None and entry in sys.path:
            sys.path.remove(entry)
    return module


class HandlerRuntime:
    name = "python"

    def can_load(self, path: Path) -> bool:
        return (path / HANDLER_FILE).is_file()

    def load(self, path: Path, manifest: Manifest, options: RuntimeOptions) -> HandlerServable:
        for folder in manifest.python_path:  # kept: a script may import them inside its functions, later
            if not Path(folder).is_dir():
                raise ConfigError(f"python_path {folder} of {path} is not a folder")
            if folder not in sys.path:
                sys.path.append(folder)
        if not manifest.entry_point:
            handler = path / HANDLER_FILE
            if not handler.is_file():
                raise ConfigError(f"no {HANDLER_FILE} in {path}")
            return HandlerServable(load_module(handler), path, manifest)
        code = (path / HANDLER_FILE.parent).resolve()
        script = (code / manifest.entry_point).resolve()
        if not script.is_relative_to(code):
            raise ConfigError(f"entry_point {manifest.entry_point!r} of {path} leaves its code folder")
        if not script.is_file():
            where = HANDLER_FILE.parent / manifest.entry_point
            raise ConfigError(f"no {where} in {path} (the entry_point servekit.toml names)")
        return HandlerServable(load_module(script, search=code), path, manifest, script=manifest.entry_point)
