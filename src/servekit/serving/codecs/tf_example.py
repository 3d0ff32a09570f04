"""TF Serving's ``Input`` (``tf.Example`` lists, optionally with a shared context) for Classify/Regress/
MultiInference over gRPC, as the same examples payload the REST ``:classify``/``:regress`` body becomes: one
feature order (the signature's), the same checks and the same messages whichever front the examples came in."""

from __future__ import annotations

from typing import Any

from servekit.errors import invalid
from servekit.serving.codecs.tfjson import ExamplesPayload
from servekit.serving.protos.tensorflow.core.example.example_pb2 import Example
from servekit.serving.protos.tensorflow.core.example.feature_pb2 import Feature, Features
from servekit.serving.protos.tensorflow_serving.apis.input_pb2 import Input


def _values(feature: Feature, name: str) -> list[Any]:
    kind = feature.WhichOneof("kind")
    if kind == "float_list":
        return list(feature.float_list.value)
    if kind == "int64_list":
        return list(feature.int64_list.value)
    if kind == "bytes_list":
        return list(feature.bytes_list.value)
    raise invalid(f"feature '{name}' holds no value (set one of float_list, int64_list, bytes_list)")


def _features(features: Features) -> dict[str, list[Any]]:
    return {name: _values(f, name) for name, f in features.feature.items()}


def _example(example: Example) -> dict[str, list[Any]]:
    return _features(example.features)


def examples_body(request_input: Input) -> dict[str, Any]:
    """The REST body the examples of ``request_input`` amount to: ``{"examples": [...], "context": {...}}``."""
    kind = request_input.WhichOneof("kind")
    if kind == "example_list":
        examples, context = request_input.example_list.examples, None
    elif kind == "example_list_with_context":
        examples = request_input.example_list_with_context.examples
        context = request_input.example_list_with_context.context
    else:
        raise invalid("the request's input is empty: set input.example_list or input.example_list_with_context")
    body: dict[str, Any] = {"examples": [_example(e) for e in examples]}
    if context is not None:
        body["context"] = _example(context)
    return body


def examples_payload(request_input: Input, signature_name: str | None) -> ExamplesPayload:
    body = examples_body(request_input)
    if signature_name:
        body["signature_name"] = signature_name
    return ExamplesPayload(body)
