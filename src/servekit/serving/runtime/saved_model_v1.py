"""TensorFlow 1 SavedModels (written by TF1's ``SavedModelBuilder``: no object graph) run as TF Serving runs them:
the graph in a session, each SignatureDef a feed of its input tensors and a fetch of its output tensors.

TensorFlow 2's ``tf.saved_model.load`` wraps each signature of such a model in a function, which some old graphs
cannot be (a ``regress`` signature whose ParseExample reads a scalar placeholder: "Shape must be rank 1 but is rank
0"), and which checks each feed against the tensor's declared shape. TF Serving does neither: it feeds what
the request holds (``{"instances": [1.0, 2.0, 5.0]}`` is a tensor of shape [3], fed to the SDK's test model's ``x``,
declared ``[None, 1]``) and lets the graph's ops decide. A session's callable (``CallableOptions``: the feeds and
fetches by tensor name) does the same: the values go to TensorFlow's runtime as they are, cast to each fed tensor's
dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

Function = Callable[..., dict[str, npt.NDArray[Any]]]


def is_v1(meta_graph: Any) -> bool:
    """Whether the MetaGraphDef was written by TF1 (no object graph: nothing for ``tf.saved_model.load`` to
    restore but the graph itself)."""
    return not (meta_graph.HasField("object_graph_def") and len(meta_graph.object_graph_def.nodes) > 0)


class V1Session:
    """The model's graph loaded in a session of its own, with each named signature as a function of its input keys
    (values: anything ``numpy.asarray`` takes) answering its output keys as arrays."""

    def __init__(self, tf: Any, path: Path, meta_graph: Any, tags: Iterable[str] = ("serve",)) -> None:
        from tensorflow.core.protobuf import config_pb2

        self._tf = tf
        self._options = config_pb2.CallableOptions
        self._graph = tf.Graph()
        self._session = tf.compat.v1.Session(graph=self._graph)
        with self._graph.as_default():
            tf.compat.v1.saved_model.loader.load(self._session, list(tags), str(path))
        self._signatures = dict(meta_graph.signature_def)

    def declared_shapes_hold(self, name: str) -> bool:
        """Whether each input shape the signature declares agrees with its tensor's in the graph. TF Serving never
        checks them; an old hand-written SignatureDef may declare a scalar for a ``[None, 1]`` tensor (the SDK's
        test model), and requests are then checked by the graph, not by the declaration."""
        sig = self._signatures[name]
        return all(
            self._tf.TensorShape(t.tensor_shape).is_compatible_with(self._graph.get_tensor_by_name(t.name).shape)
            for t in sig.inputs.values()
        )

    def functions(self, names: Iterable[str]) -> dict[str, Function]:
        return {name: self._function(name) for name in names if name in self._signatures}

    def _function(self, name: str) -> Function:
        sig = self._signatures[name]
        inputs = sorted(sig.inputs)
        outputs = sorted(sig.outputs)
        options = self._options()
        options.feed.extend(sig.inputs[k].name for k in inputs)
        options.fetch.extend(sig.outputs[k].name for k in outputs)
        # the fed tensors' own dtypes: an old SignatureDef may declare another (the SDK's test model says its
        # tf.Example input is a float)
        dtypes = [self._graph.get_tensor_by_name(sig.inputs[k].name).dtype.as_numpy_dtype for k in inputs]
        call = self._session._make_callable_from_options(options)

        def run(**feed: Any) -> dict[str, npt.NDArray[Any]]:
            if set(feed) != set(inputs):
                raise ValueError(f"signature {name!r} takes the inputs {inputs}, not {sorted(feed)}")
            values = [np.asarray(feed[k], dtype=d) for k, d in zip(inputs, dtypes, strict=True)]
            return {k: np.asarray(v) for k, v in zip(outputs, call(*values), strict=True)}

        return run

    def close(self) -> None:
        self._session.close()
