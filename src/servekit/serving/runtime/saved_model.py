"""TensorFlow SavedModels (``saved_model.pb`` + ``variables/``), the ``servekit[tensorflow]`` extra.

Every signature of the ``serve`` MetaGraphDef is served under its SignatureDef key, with the SignatureDef's
input/output keys, dtypes and shapes, so the requests a TF Serving client sends (REST rows or columns,
``signature_name``, gRPC Predict/Classify/Regress/GetModelMetadata) mean the same here. Classify/regress
signatures take serialized ``tf.Example``s, as in TF Serving; the ``:classify``/``:regress`` verbs hand the
servable rows of feature values, which it writes into Examples with the features its parse op reads.

TensorFlow runs the graph without the GIL on its own intra-op pool. TF Serving's warmup file
(``assets.extra/tf_serving_warmup_requests``) is replayed once at load, before the version can serve.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servekit.config.models import RuntimeOptions
from servekit.errors import ConfigError, invalid
from servekit.serving.runtime import devices
from servekit.serving.runtime.base import Concurrency, ListedSignatures, Servable, pool_threads
from servekit.serving.runtime.manifest import Manifest
from servekit.serving.runtime.saved_model_signatures import (
    EXAMPLE_METHODS,
    ExampleFeature,
    cli_listing,
    example_features,
    read_meta_graph,
    signatures_of,
)
from servekit.serving.runtime.saved_model_v1 import V1Session, is_v1
from servekit.serving.runtime.saved_model_warmup import WarmupRequest, replay
from servekit.types import CLASSIFY_METHOD, DEFAULT_SIGNATURE, REGRESS_METHOD, Signature, TensorMap

log = logging.getLogger(__name__)
PLATFORM = "tensorflow"  # TF Serving's platform name in GetModelMetadata and model status


def import_tensorflow() -> Any:
    try:
        import tensorflow as tf
    except ImportError:
        raise ConfigError(
            "this version is a TensorFlow SavedModel, but TensorFlow is not installed: "
            "pip install 'servekit[tensorflow]'"
        ) from None
    return tf


def configure_threads(tf: Any, options: RuntimeOptions) -> int:
    """Apply the server's thread options to TensorFlow's process-wide pools; returns the intra-op pool size.

    TensorFlow fixes its pools when its runtime starts (the first model loaded), so a later model with other
    options gets the pools already there, with a log line saying so.
    """
    wanted = {"intra": options.intra_op_threads, "inter": options.inter_op_threads}
    threading = tf.config.threading
    for pool, n in wanted.items():
        if n <= 0:
            continue
        getter = getattr(threading, f"get_{pool}_op_parallelism_threads")
        if getter() == n:
            continue
        try:
            getattr(threading, f"set_{pool}_op_parallelism_threads")(n)
        except RuntimeError:
            log.warning("TensorFlow's %s-op pool is already running with %s threads, not %s", pool, getter(), n)
    return pool_threads(int(threading.get_intra_op_parallelism_threads()))


def place(tf: Any, options: RuntimeOptions) -> devices.Placement:
    """Where TensorFlow runs the model, after giving each visible GPU memory growth (fraction 0) or a memory
    limit of fraction x its memory, which TensorFlow accepts only before it first touches the cards: a later
    model keeps the first one's settings, with a log line saying so."""
    tf_config = tf.config
    if options.device.kind == "cpu":
        try:
            tf_config.set_visible_devices([], "GPU")
        except RuntimeError:
            log.warning("TensorFlow has already initialised its GPUs; --device cpu places this model on /CPU:0")
        return devices.Placement(devices.CPU, "--device cpu")
    physical = list(tf_config.list_physical_devices("GPU"))
    cards = devices.machine_gpus() if physical else ()
    sizes = [cards[i].memory_bytes if i < len(cards) else None for i in range(len(physical))]
    for setting in devices.tensorflow_settings(options.gpu_memory_fraction, sizes):
        gpu = physical[setting.gpu]
        try:
            if setting.memory_growth:
                tf_config.experimental.set_memory_growth(gpu, True)
            else:
                tf_config.set_logical_device_configuration(
                    gpu, [tf_config.LogicalDeviceConfiguration(memory_limit=setting.memory_limit_mb)]
                )
        except RuntimeError:
            log.info("TensorFlow's GPU %d is already initialised; its memory settings stay", setting.gpu)
    built = bool(tf.test.is_built_with_cuda())
    machine = len(devices.machine_gpus()) if not physical else len(physical)
    return devices.tensorflow_placement(options.device, len(physical), machine, built)


class SavedModelServable:
    platform = PLATFORM

    def __init__(self, tf: Any, path: Path, manifest: Manifest, threads: int, device: str = devices.CPU) -> None:
        self._tf = tf
        self.device = device  # where it runs: "cpu" or "cuda:N"
        self._tf_device = devices.tensorflow_device(devices.Placement(device, ""))
        meta_graph = read_meta_graph(path)
        sigs, skipped = signatures_of(meta_graph)
        for name, why in skipped.items():
            log.info("SavedModel %s: signature %r is not served: %s", path, name, why)
        self._model: Any = None
        self._session: V1Session | None = None
        try:
            with tf.device(self._tf_device):
                if is_v1(meta_graph):  # TF1's SavedModelBuilder: run in a session, as TF Serving does
                    self._session = V1Session(tf, path, meta_graph)
                    self._functions: dict[str, Any] = self._session.functions(sigs)
                else:
                    self._model = tf.saved_model.load(str(path), tags=["serve"])
                    self._functions = {n: self._model.signatures[n] for n in sigs if n in self._model.signatures}
        except Exception as exc:  # TensorFlow raises its own error types for missing variables, bad graphs...
            raise ConfigError(f"cannot load the SavedModel in {path}: {type(exc).__name__}: {exc}") from exc
        self._features: dict[str, tuple[ExampleFeature, ...] | None] = {}
        served: dict[str, Signature] = {}
        for name, sig in sigs.items():
            if name not in self._functions:
                log.info("SavedModel %s: signature %r has no function after loading; not served", path, name)
                continue
            if sig.method in EXAMPLE_METHODS:
                features = example_features(meta_graph, name)
                self._features[name] = features
                labels = manifest.class_labels or (self._probe_labels(sig, features) if features else ())
                sig = Signature(
                    sig.name,
                    sig.inputs,
                    sig.outputs,
                    sig.method,
                    class_labels=labels if sig.method == CLASSIFY_METHOD else (),
                    feature_names=tuple(f.name for f in features or ()),
                    validate=False,
                )
            served[name] = sig
        if self._session is not None:  # a TF1 signature whose declared shapes are not its graph's: the graph checks
            session = self._session
            served = {
                n: sig if session.declared_shapes_hold(n) else dataclasses.replace(sig, validate=False)
                for n, sig in served.items()
            }
        served.update({s.name: s for s in manifest.signatures})  # a servekit.toml may restate a signature
        if not served:
            raise ConfigError(f"the SavedModel in {path} has no signature servekit can serve ({skipped})")
        self._signatures = ListedSignatures(served, cli_listing(meta_graph))
        self.concurrency = Concurrency(releases_gil=True, threads=threads)

    @property
    def signatures(self) -> Mapping[str, Signature]:
        return self._signatures

    def predict(self, signature: str, inputs: TensorMap) -> dict[str, npt.NDArray[Any]]:
        sig = self._signatures[signature]
        fn = self._functions[signature]
        tf = self._tf
        if sig.method in EXAMPLE_METHODS:
            (value,) = inputs.values()
            feed = {sig.inputs[0].name: tf.constant(self._serialized(signature, np.asarray(value)), dtype=tf.string)}
        else:
            feed = {}
            for spec in sig.inputs:
                value = inputs[spec.name]
                # unchecked signatures (unknown rank) still get the declared dtype: JSON numbers come as float64
                feed[spec.name] = tf.constant(value if sig.validate else np.asarray(value, dtype=spec.dtype))
        with tf.device(self._tf_device):
            result = fn(**feed)
        return {spec.name: np.asarray(result[spec.name]) for spec in sig.outputs}

    # ---- tf.Example inputs -----------------------------------------------------------------------------------
    def _serialized(self, signature: str, value: npt.NDArray[Any]) -> list[bytes]:
        """Serialized examples: given as such (gRPC Predict on the signature, a warmup record), or written from
        rows of feature values in the signature's feature order (the :classify/:regress verbs)."""
        if value.ndim == 1 and value.dtype.kind in "OS":
            return [v if isinstance(v, bytes) else str(v).encode() for v in value.tolist()]
        features = self._features.get(signature)
        if value.ndim != 2 or not features:
            raise invalid(
                f"signature '{signature}' takes serialized tf.Example strings; its graph does not say which features "
                "it parses, so rows of feature values cannot be turned into examples here"
            )
        if value.shape[1] != len(features):
            names = [f.name for f in features]
            raise invalid(f"each example must hold the {len(features)} features {names}, got {value.shape[1]}")
        return [_example(row, features) for row in value.tolist()]

    def _probe_labels(self, sig: Signature, features: tuple[ExampleFeature, ...]) -> tuple[str, ...]:
        """The class labels a classify signature answers with, from a probe example of zeros (as the sklearn
        runtime probes its estimator): TF Serving returns them per example; servekit's signature holds them once.
        No labels (class indices) when the model has no ``classes`` output or the probe does not run."""
        if (
            sig.method != CLASSIFY_METHOD
            or sig.input("inputs") is None
            or "classes" not in {o.name for o in sig.outputs}
        ):
            return ()
        zeros = np.zeros((1, len(features)), dtype=object)
        zeros[0, :] = [b"" if f.kind == "bytes" else 0 for f in features]
        try:
            probe = self._tf.constant(self._serialized(sig.name, zeros), dtype=self._tf.string)
            result = self._functions[sig.name](**{sig.inputs[0].name: probe})
            classes = np.asarray(result["classes"])[0]
        except Exception as exc:  # a graph that refuses zeros: no labels rather than no model
            log.info("signature %r: no class labels from a probe example (%s)", sig.name, exc)
            return ()
        return tuple(c.decode("utf-8", "replace") if isinstance(c, bytes) else str(c) for c in classes.tolist())

    # ---- TF Serving warmup -----------------------------------------------------------------------------------
    def warm_up(self, request: WarmupRequest) -> None:
        if request.kind == "predict":
            name = request.signature or DEFAULT_SIGNATURE
            sig = self._signature(name)
            missing = [t.name for t in sig.inputs if t.name not in request.tensors]
            unknown = [n for n in request.tensors if sig.input(n) is None]
            if missing or unknown:
                raise ConfigError(f"inputs {sorted(request.tensors)} do not match {sig.describe()}")
            self.predict(name, {t.name: np.asarray(request.tensors[t.name], dtype=t.dtype) for t in sig.inputs})
            return
        if request.kind == "task":
            sig = self._signature(request.signature or DEFAULT_SIGNATURE)
        else:
            method = CLASSIFY_METHOD if request.kind == "classify" else REGRESS_METHOD
            if request.signature:
                sig = self._signature(request.signature)
            else:
                default = self._signatures.get(DEFAULT_SIGNATURE)
                sig = default if default is not None and default.method == method else self._by_method(method)
        if sig.method not in EXAMPLE_METHODS:
            raise ConfigError(f"signature '{sig.name}' has method {sig.method}, which takes no examples")
        self.predict(sig.name, {sig.inputs[0].name: np.array(request.examples, dtype=object)})

    def _signature(self, name: str) -> Signature:
        sig = self._signatures.get(name)
        if sig is None:
            raise ConfigError(f"no signature '{name}'; signatures: {', '.join(sorted(self._signatures))}")
        return sig

    def _by_method(self, method: str) -> Signature:
        sig = next((s for s in self._signatures.values() if s.method == method), None)
        if sig is None:
            raise ConfigError(f"no signature with method {method}")
        return sig

    def unload(self) -> None:
        self._functions = {}
        self._model = None
        if self._session is not None:
            self._session.close()
            self._session = None


def _example(row: list[Any], features: tuple[ExampleFeature, ...]) -> bytes:
    """One tf.Example holding ``row``'s values under the parse op's feature keys and kinds."""
    from tensorflow.core.example import example_pb2

    example = example_pb2.Example()
    for value, feature in zip(row, features, strict=True):
        slot = example.features.feature[feature.name]
        try:
            if feature.kind == "bytes":
                slot.bytes_list.value.append(value if isinstance(value, bytes) else str(value).encode())
            elif feature.kind == "int64":
                number = float(value)
                if not number.is_integer():
                    raise ValueError(f"{value!r} is not an integer")
                slot.int64_list.value.append(int(number))
            else:
                slot.float_list.value.append(float(value))
        except (TypeError, ValueError) as exc:
            raise invalid(f"feature '{feature.name}' takes {feature.kind} values: {exc}") from None
    return bytes(example.SerializeToString())


class SavedModelRuntime:
    name = "tensorflow"

    def can_load(self, path: Path) -> bool:
        return (path / "saved_model.pb").is_file()

    def load(self, path: Path, manifest: Manifest, options: RuntimeOptions) -> Servable:
        if not (path / "saved_model.pb").is_file():
            raise ConfigError(f"no saved_model.pb in {path}")
        tf = import_tensorflow()
        threads = configure_threads(tf, options)
        placement = place(tf, options)
        servable = SavedModelServable(tf, path, manifest, threads, placement.device)
        devices.log_placement(path, "TensorFlow", placement)
        try:
            records = replay(path, servable.warm_up)
        except Exception:
            servable.unload()
            raise
        if records:
            log.info("SavedModel %s: %d TF Serving warmup records replayed", path, records)
        return servable
