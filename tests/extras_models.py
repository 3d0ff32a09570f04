"""Small models built with the optional frameworks (TensorFlow, torch) for the ``extras`` tests.

Import only after ``pytest.importorskip`` of the framework: the builders import it at call time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

FEATURES = ("a", "b")  # the tf.Example features the classify/regress signatures parse: a float, an int64
CLASSES = ("neg", "pos")
WEIGHTS = np.array([[1.0, -1.0], [0.5, 0.25]], dtype=np.float32)


def tf1_saved_model(path: Path) -> Path:
    """A SavedModel as TF Serving's classic exports are: ``classify`` and ``regress`` signatures on serialized
    tf.Examples (method names tensorflow/serving/classify and /regress) and a ``serving_default`` predict
    signature with two inputs, written by the TF1 SavedModelBuilder."""
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        serialized = tf.compat.v1.placeholder(tf.string, [None], name="tf_example")
        parsed = tf.io.parse_example(
            serialized,
            {"a": tf.io.FixedLenFeature([], tf.float32), "b": tf.io.FixedLenFeature([], tf.int64)},
        )
        w = tf.compat.v1.Variable(WEIGHTS, name="w")
        x = tf.stack([parsed["a"], tf.cast(parsed["b"], tf.float32)], axis=1)
        logits = tf.matmul(x, w)
        scores = tf.nn.softmax(logits)
        classes = tf.tile(tf.constant([list(CLASSES)]), [tf.shape(serialized)[0], 1])
        value = tf.reduce_sum(logits, axis=1, keepdims=True)
        xin = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
        bias = tf.compat.v1.placeholder(tf.float32, [None], name="bias")
        y = tf.matmul(xin, w) + tf.expand_dims(bias, 1)
        labels = tf.argmax(y, axis=1)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            builder = tf.compat.v1.saved_model.Builder(str(path))
            sd = tf.compat.v1.saved_model
            builder.add_meta_graph_and_variables(
                sess,
                ["serve"],
                signature_def_map={
                    "classify": sd.classification_signature_def(serialized, classes, scores),
                    "regress": sd.regression_signature_def(serialized, value),
                    "serving_default": sd.predict_signature_def({"x": xin, "bias": bias}, {"y": y, "label": labels}),
                },
            )
            builder.save()
    return path


def tf1_half_plus_three(path: Path) -> Path:
    """TF Serving's classic test model as the SageMaker SDK's tests ship it (``tfs-test-model``): ``y = x / 2 + 3``
    with ``x`` parsed from tf.Examples (shape ``[None, 1]``), and SignatureDefs written by hand whose tensors declare
    no shape (read as scalars) and whose ``regress`` input claims to be a float: TensorFlow 2's loader cannot wrap
    it; TF Serving runs it in a session."""
    import tensorflow as tf
    from tensorflow.core.protobuf import meta_graph_pb2

    graph = tf.Graph()
    with graph.as_default():
        serialized = tf.compat.v1.placeholder(tf.string, name="tf_example")
        # TF1's ParseExample (rank-1 input only), as the 2018 graph has: tf.io.parse_example writes ParseExampleV2
        parsed = tf.raw_ops.ParseExample(
            serialized=serialized,
            names=tf.constant([], tf.string),
            sparse_keys=[],
            dense_keys=[tf.constant("x")],
            dense_defaults=[tf.constant([], tf.float32)],
            sparse_types=[],
            dense_shapes=[[1]],
        )
        x = tf.identity(parsed.dense_values[0], name="x")
        a = tf.compat.v1.Variable(0.5, name="a")
        b = tf.compat.v1.Variable(3.0, name="b")
        y = tf.add(a * x, b, name="y")

        def info(tensor: Any, dtype: Any) -> Any:
            return meta_graph_pb2.TensorInfo(name=tensor.name, dtype=dtype.as_datatype_enum)

        predict = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/predict")
        predict.inputs["x"].CopyFrom(info(x, tf.float32))
        predict.outputs["y"].CopyFrom(info(y, tf.float32))
        regress = meta_graph_pb2.SignatureDef(method_name="tensorflow/serving/regress")
        regress.inputs["inputs"].CopyFrom(info(serialized, tf.float32))  # (sic: the example strings)
        regress.outputs["outputs"].CopyFrom(info(tf.identity(y), tf.float32))
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            builder = tf.compat.v1.saved_model.Builder(str(path))
            builder.add_meta_graph_and_variables(
                sess, ["serve"], signature_def_map={"serving_default": predict, "tensorflow/serving/regress": regress}
            )
            builder.save()
    return path


def tf2_saved_model(path: Path) -> Path:
    """A ``tf.Module`` saved with ``tf.saved_model.save``: a float predict signature and a string one."""
    import tensorflow as tf

    class Scorer(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(np.arange(6, dtype=np.float32).reshape(3, 2))

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x: Any) -> Any:
            return {"y": tf.matmul(x, self.w), "total": tf.reduce_sum(x, axis=1)}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def lengths(self, text: Any) -> Any:
            return {"length": tf.strings.length(text), "upper": tf.strings.upper(text)}

    module = Scorer()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.serve, "lengths": module.lengths})
    return path


def example(a: float, b: int) -> Any:
    import tensorflow as tf

    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "a": tf.train.Feature(float_list=tf.train.FloatList(value=[a])),
                "b": tf.train.Feature(int64_list=tf.train.Int64List(value=[b])),
            }
        )
    )


def scripted_torch_model(path: Path) -> Any:
    """A scripted two-input ``torch.nn.Module`` returning a (probabilities, sum) tuple, saved as ``model.pt``;
    returns the module (in eval mode) for in-process references."""
    import torch

    torch.manual_seed(0)
    module = _torch_net_class()()
    module.eval()
    path.mkdir(parents=True, exist_ok=True)
    torch.jit.script(module).save(str(path / "model.pt"))
    return module


def _torch_net_class() -> Any:
    import torch

    class TorchNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 3)

        def forward(self, features: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            probs = torch.softmax(self.linear(features) * scale.unsqueeze(1), dim=1)
            return probs, features.sum(dim=1)

    return TorchNet
