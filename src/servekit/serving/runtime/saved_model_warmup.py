"""TF Serving's SavedModel warmup: ``assets.extra/tf_serving_warmup_requests``, a TFRecord file of serialized
``tensorflow.serving.PredictionLog`` messages, replayed against a loaded version before it takes traffic.

As TF Serving (``saved_model_warmup_util``): at most 1000 records, Predict, Classify, Regress and
MultiInference logs, and a record that fails fails the load.

TensorFlow ships the messages a log carries (``TensorProto``, ``Example``) but not TF Serving's own
(``PredictionLog`` and the requests), and servekit's generated copies of those belong to the wire layers,
which a runtime may not import. So the few TF Serving fields needed are read here through protobuf's
unknown-field API, by the field numbers of ``tensorflow_serving/apis/prediction_log.proto``, ``predict.proto``,
``classification.proto``, ``regression.proto``, ``inference.proto``, ``input.proto`` and ``model.proto``;
the tests write the file with the real ``tensorflow-serving-api`` messages.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.errors import ConfigError

WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"
MAX_RECORDS = 1000  # WarmupConsts::kMaxNumRecords

# PredictionLog's oneof log_type (prediction_log.proto); each *Log holds its request as field 1.
_CLASSIFY_LOG, _REGRESS_LOG, _MULTI_INFERENCE_LOG, _SESSION_RUN_LOG, _PREDICT_LOG, _PREDICT_STREAMED_LOG = (
    2,
    3,
    4,
    5,
    6,
    7,
)
_LOG_REQUEST = 1
# PredictRequest: model_spec = 1, inputs = 2 (map<string, TensorProto>: entries of key = 1, value = 2).
# ClassificationRequest / RegressionRequest: model_spec = 1, input = 2. MultiInferenceRequest: tasks = 1, input = 2.
_REQ_MODEL_SPEC, _REQ_INPUTS, _REQ_INPUT, _MULTI_TASKS = 1, 2, 2, 1
_MAP_KEY, _MAP_VALUE = 1, 2
_SPEC_SIGNATURE_NAME = 3  # ModelSpec
_TASK_MODEL_SPEC = 1  # InferenceTask
# Input: example_list = 1 (ExampleList: examples = 1), example_list_with_context = 2 (examples = 1, context = 2).
_INPUT_EXAMPLE_LIST, _INPUT_WITH_CONTEXT, _EXAMPLES, _CONTEXT = 1, 2, 1, 2
_LENGTH_DELIMITED = 2


@dataclass
class WarmupRequest:
    """One replayable request: a signature (None = the verb's default) and its inputs, or examples."""

    kind: str  # "predict", "classify", "regress"
    signature: str | None
    tensors: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    examples: list[bytes] = field(default_factory=list)  # serialized tf.Example, context already merged


def _fields(data: bytes) -> list[tuple[int, bytes]]:
    """The length-delimited fields of a serialized message, in order (other wire types are not needed here)."""
    from google.protobuf import empty_pb2, unknown_fields

    message = empty_pb2.Empty.FromString(data)
    return [
        (f.field_number, bytes(f.data))
        for f in unknown_fields.UnknownFieldSet(message)
        if f.wire_type == _LENGTH_DELIMITED
    ]


def _first(data: bytes, number: int) -> bytes | None:
    return next((value for n, value in _fields(data) if n == number), None)


def _signature_name(model_spec: bytes | None) -> str | None:
    raw = _first(model_spec, _SPEC_SIGNATURE_NAME) if model_spec else None
    return raw.decode() if raw else None


def _examples(request_input: bytes | None) -> list[bytes]:
    """The request's examples, serialized, each merged with the context as TF Serving does."""
    from tensorflow.core.example import example_pb2

    if not request_input:
        raise ConfigError("a Classify/Regress warmup request has no input examples")
    plain = _first(request_input, _INPUT_EXAMPLE_LIST)
    if plain is not None:
        return [value for n, value in _fields(plain) if n == _EXAMPLES]
    with_context = _first(request_input, _INPUT_WITH_CONTEXT)
    if with_context is None:
        raise ConfigError("a Classify/Regress warmup request has no input examples")
    context = example_pb2.Example.FromString(_first(with_context, _CONTEXT) or b"")
    merged = []
    for n, value in _fields(with_context):
        if n == _EXAMPLES:
            example = example_pb2.Example.FromString(value)
            example.MergeFrom(context)
            merged.append(example.SerializeToString())
    return merged


def _predict_request(data: bytes) -> WarmupRequest:
    import tensorflow as tf
    from tensorflow.core.framework import tensor_pb2

    tensors = {}
    for n, entry in _fields(data):
        if n == _REQ_INPUTS:
            key = (_first(entry, _MAP_KEY) or b"").decode()
            proto = tensor_pb2.TensorProto.FromString(_first(entry, _MAP_VALUE) or b"")
            tensors[key] = np.asarray(tf.make_ndarray(proto))
    return WarmupRequest("predict", _signature_name(_first(data, _REQ_MODEL_SPEC)), tensors=tensors)


def decode_record(record: bytes) -> list[WarmupRequest]:
    """The requests one PredictionLog holds (a MultiInference log holds one per task)."""
    logs = [(n, value) for n, value in _fields(record) if n != 1]  # field 1 is log_metadata
    if not logs:
        raise ConfigError("the PredictionLog holds no request")
    kind, log = logs[-1]
    request = _first(log, _LOG_REQUEST) or b""
    if kind == _PREDICT_LOG:
        return [_predict_request(request)]
    if kind in (_CLASSIFY_LOG, _REGRESS_LOG):
        verb = "classify" if kind == _CLASSIFY_LOG else "regress"
        return [
            WarmupRequest(
                verb,
                _signature_name(_first(request, _REQ_MODEL_SPEC)),
                examples=_examples(_first(request, _REQ_INPUT)),
            )
        ]
    if kind == _MULTI_INFERENCE_LOG:
        examples = _examples(_first(request, _REQ_INPUT))
        tasks = [value for n, value in _fields(request) if n == _MULTI_TASKS]
        return [WarmupRequest("task", _signature_name(_first(t, _TASK_MODEL_SPEC)), examples=examples) for t in tasks]
    what = {_SESSION_RUN_LOG: "SessionRun", _PREDICT_STREAMED_LOG: "PredictStreamed"}.get(kind, f"field {kind}")
    raise ConfigError(f"{what} logs are not supported for warmup; use Predict, Classify, Regress or MultiInference")


def read_records(path: Path) -> Iterator[bytes]:
    """The records of a TFRecord file, read by TensorFlow (which checks each record's CRC)."""
    import tensorflow as tf

    try:
        for record in tf.data.TFRecordDataset(str(path)):
            yield bytes(record.numpy())
    except tf.errors.OpError as exc:
        raise ConfigError(f"cannot read {path}: {exc.message}") from None


def replay(version_dir: Path, run: Callable[[WarmupRequest], None]) -> int:
    """Replay the version's warmup records through ``run``; returns how many records ran (0 without a file)."""
    path = version_dir / WARMUP_FILE
    if not path.is_file():
        return 0
    count = 0
    for count, record in enumerate(read_records(path), start=1):
        if count > MAX_RECORDS:
            raise ConfigError(f"Number of warmup records exceeds the maximum ({MAX_RECORDS}) at {path}")
        try:
            for request in decode_record(record):
                run(request)
        except ConfigError as exc:
            raise ConfigError(f"warmup record {count} of {path}: {exc}") from None
        except Exception as exc:  # the model raised: the version must not serve
            raise ConfigError(f"warmup record {count} of {path} failed: {type(exc).__name__}: {exc}") from exc
    return count
