"""TF Serving's gRPC API: ``tensorflow.serving.PredictionService`` (Predict, Classify, Regress, MultiInference,
GetModelMetadata) and ``ModelService`` (GetModelStatus, HandleReloadConfigRequest), on the same inference service
as the REST front, so a request is checked, batched, measured and captured the same way whichever it came by."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import numpy as np
from google.protobuf import text_format

from servekit.config.loading import parse_model_config
from servekit.config.models import ModelConfig
from servekit.errors import ConfigError, invalid
from servekit.serving.codecs.tensor_proto import fill_proto, to_ndarray
from servekit.serving.codecs.tf_example import examples_payload
from servekit.serving.lifecycle import ServableState
from servekit.serving.protocols.grpc.runner import Ctx, GrpcContext, GrpcRunner, model_name
from servekit.serving.protos.tensorflow.core.framework import types_pb2
from servekit.serving.protos.tensorflow.core.protobuf import meta_graph_pb2
from servekit.serving.protos.tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    inference_pb2,
    model_management_pb2,
    model_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)
from servekit.serving.schema import InferenceRequest, InferenceResponse, Inputs
from servekit.types import CLASSIFY_METHOD, PREDICT_METHOD, REGRESS_METHOD, Signature, TensorSpec, tf_dtype

PROTOCOL = "tfserving_grpc"
SIGNATURE_DEF = "signature_def"
# tensorflow.error.Code values used in a StatusProto.
_OK, _UNKNOWN = 0, 2
# What HandleReloadConfigRequest calls to serve a new model list (the serving core's reload hook).
Reload = Callable[[tuple[ModelConfig, ...]], Awaitable[None]]


class _Spec:
    """A request's ``model_spec``: name, version or version_label, signature_name."""

    def __init__(self, spec: model_pb2.ModelSpec) -> None:
        self.model = model_name(spec.name)
        choice = spec.WhichOneof("version_choice")
        self.version = int(spec.version.value) if choice == "version" else None
        self.label = spec.version_label if choice == "version_label" else None
        if self.version is not None and self.version < 0:
            raise invalid(f"model_spec.version must be >= 0, got {self.version}")
        self.signature = spec.signature_name or None


def _answer_spec(target: model_pb2.ModelSpec, model: str, version: int, signature: str) -> None:
    target.name = model
    target.version.value = version
    target.signature_name = signature


class TfServingGrpc(prediction_service_pb2_grpc.PredictionServiceServicer, model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, ctx: GrpcContext, reload: Reload | None = None) -> None:
        self._ctx = ctx
        self._runner = GrpcRunner(PROTOCOL, ctx)
        self._reload = reload

    async def _infer(
        self, spec: _Spec, inputs: Inputs, method: str, context: Ctx, outputs: tuple[str, ...] | None = None
    ) -> InferenceResponse:
        return await self._ctx.service.infer(
            InferenceRequest(
                model=spec.model,
                inputs=inputs,
                version=spec.version,
                label=spec.label,
                signature=spec.signature,
                method=method,
                outputs=outputs,
                timeout=self._ctx.timeout(context),
            )
        )

    # ---- PredictionService -------------------------------------------------------------------------------
    async def Predict(self, request: predict_pb2.PredictRequest, context: Ctx) -> predict_pb2.PredictResponse:
        async def run() -> tuple[predict_pb2.PredictResponse, str]:
            spec = _Spec(request.model_spec)
            inputs = {name: to_ndarray(t, name) for name, t in request.inputs.items()}
            wanted = tuple(request.output_filter) or None
            resp = await self._infer(spec, inputs, PREDICT_METHOD, context, wanted)
            out = predict_pb2.PredictResponse()
            _answer_spec(out.model_spec, resp.model, resp.version, resp.signature)
            for name, arr in resp.outputs.items():
                fill_proto(out.outputs[name], arr)
            return out, str(resp.version)

        return await self._runner.run(request.model_spec.name, "predict", context, run)

    async def Classify(
        self, request: classification_pb2.ClassificationRequest, context: Ctx
    ) -> classification_pb2.ClassificationResponse:
        async def run() -> tuple[classification_pb2.ClassificationResponse, str]:
            spec = _Spec(request.model_spec)
            resp = await self._infer(spec, examples_payload(request.input, spec.signature), CLASSIFY_METHOD, context)
            out = classification_pb2.ClassificationResponse()
            _answer_spec(out.model_spec, resp.model, resp.version, resp.signature)
            _classifications(out.result, resp)
            return out, str(resp.version)

        return await self._runner.run(request.model_spec.name, "classify", context, run)

    async def Regress(
        self, request: regression_pb2.RegressionRequest, context: Ctx
    ) -> regression_pb2.RegressionResponse:
        async def run() -> tuple[regression_pb2.RegressionResponse, str]:
            spec = _Spec(request.model_spec)
            resp = await self._infer(spec, examples_payload(request.input, spec.signature), REGRESS_METHOD, context)
            out = regression_pb2.RegressionResponse()
            _answer_spec(out.model_spec, resp.model, resp.version, resp.signature)
            _regressions(out.result, resp)
            return out, str(resp.version)

        return await self._runner.run(request.model_spec.name, "regress", context, run)

    async def MultiInference(
        self, request: inference_pb2.MultiInferenceRequest, context: Ctx
    ) -> inference_pb2.MultiInferenceResponse:
        """Several classify/regress signatures of one model on the same examples (TF Serving's checks)."""
        model = request.tasks[0].model_spec.name if request.tasks else ""

        async def run() -> tuple[inference_pb2.MultiInferenceResponse, str]:
            if not request.tasks:
                raise invalid("MultiInferenceRequest has no tasks; add one per signature to run")
            specs = [_Spec(t.model_spec) for t in request.tasks]
            if len({s.model for s in specs}) != 1:
                raise invalid("All tasks in a MultiInferenceRequest must use the same model name")
            seen: set[str | None] = set()
            for spec in specs:
                if spec.signature in seen:
                    raise invalid(f"Duplicate evaluation of signature: {spec.signature or 'the default'}")
                seen.add(spec.signature)
            out = inference_pb2.MultiInferenceResponse()
            version = ""
            for task, spec in zip(request.tasks, specs, strict=True):
                method = task.method_name
                if method not in (CLASSIFY_METHOD, REGRESS_METHOD):
                    raise invalid(
                        f"Unsupported signature method_name: {method!r}; "
                        f"MultiInference runs {CLASSIFY_METHOD} and {REGRESS_METHOD}"
                    )
                resp = await self._infer(spec, examples_payload(request.input, spec.signature), method, context)
                result = out.results.add()
                _answer_spec(result.model_spec, resp.model, resp.version, resp.signature)
                if method == CLASSIFY_METHOD:
                    _classifications(result.classification_result, resp)
                else:
                    _regressions(result.regression_result, resp)
                version = str(resp.version)
            return out, version

        return await self._runner.run(model, "multi_inference", context, run)

    async def GetModelMetadata(
        self, request: get_model_metadata_pb2.GetModelMetadataRequest, context: Ctx
    ) -> get_model_metadata_pb2.GetModelMetadataResponse:
        async def run() -> tuple[get_model_metadata_pb2.GetModelMetadataResponse, str]:
            spec = _Spec(request.model_spec)
            fields = list(request.metadata_field)
            if not fields:
                raise invalid("GetModelMetadataRequest must specify at least one metadata_field")
            unknown = [f for f in fields if f != SIGNATURE_DEF]
            if unknown:
                raise invalid(f"Metadata field {unknown[0]} is not supported; supported: {SIGNATURE_DEF}")
            md = self._ctx.service.metadata(spec.model, spec.version, spec.label)
            out = get_model_metadata_pb2.GetModelMetadataResponse()
            _answer_spec(out.model_spec, md.model, md.version, "")
            out.metadata[SIGNATURE_DEF].Pack(signature_def_map(md.signatures))
            return out, str(md.version)

        return await self._runner.run(request.model_spec.name, "metadata", context, run)

    # ---- ModelService ------------------------------------------------------------------------------------
    async def GetModelStatus(
        self, request: get_model_status_pb2.GetModelStatusRequest, context: Ctx
    ) -> get_model_status_pb2.GetModelStatusResponse:
        async def run() -> tuple[get_model_status_pb2.GetModelStatusResponse, str]:
            spec = _Spec(request.model_spec)
            out = get_model_status_pb2.GetModelStatusResponse()
            state_enum = get_model_status_pb2.ModelVersionStatus.State
            for s in self._ctx.service.status(spec.model, spec.version, spec.label):
                entry = out.model_version_status.add(version=s.version, state=state_enum.Value(s.state.tf_name))
                failed = bool(s.error) or s.state is ServableState.ERROR
                entry.status.error_code = _UNKNOWN if failed else _OK
                entry.status.error_message = s.error
            return out, ""

        return await self._runner.run(request.model_spec.name, "status", context, run)

    async def HandleReloadConfigRequest(
        self, request: model_management_pb2.ReloadConfigRequest, context: Ctx
    ) -> model_management_pb2.ReloadConfigResponse:
        """Serve exactly the models of the new config, as TF Serving does: new ones are loaded (the call returns
        once each has a version available or has failed its first load), missing ones unloaded."""

        async def run() -> tuple[model_management_pb2.ReloadConfigResponse, str]:
            if self._reload is None:
                raise invalid("this server cannot reload its model config")
            if request.config.WhichOneof("config") != "model_config_list":
                raise invalid(
                    "ServerModelConfig type not supported by HandleReloadConfigRequest. "
                    "Only ModelConfigList is currently supported"
                )
            try:
                models = parse_model_config(text_format.MessageToString(request.config), "ReloadConfigRequest")
            except ConfigError as exc:
                raise invalid(str(exc)) from None
            await self._reload(models)
            out = model_management_pb2.ReloadConfigResponse()
            out.status.error_code = _OK  # type: ignore[assignment]
            return out, ""

        return await self._runner.run("", "reload_config", context, run)


def _classifications(result: classification_pb2.ClassificationResult, resp: InferenceResponse) -> None:
    scores = np.asarray(next(iter(resp.outputs.values())))
    if scores.ndim == 1:
        scores = scores.reshape(-1, 1)
    labels = resp.class_labels or tuple(str(i) for i in range(scores.shape[-1]))
    for row in scores.tolist():
        classes = result.classifications.add()
        for label, score in zip(labels, row, strict=False):
            classes.classes.add(label=label, score=float(score))


def _regressions(result: regression_pb2.RegressionResult, resp: InferenceResponse) -> None:
    values = np.asarray(next(iter(resp.outputs.values()))).reshape(-1)
    for v in values.tolist():
        result.regressions.add(value=float(v))


def _tensor_infos(target: Any, specs: tuple[TensorSpec, ...]) -> None:
    for s in specs:
        info = target[s.name]
        info.name = s.name
        info.dtype = types_pb2.DataType.Value(tf_dtype(s.datatype))
        for d in s.shape:
            info.tensor_shape.dim.add(size=d)


def signature_def_map(signatures: Mapping[str, Signature]) -> get_model_metadata_pb2.SignatureDefMap:
    """The runtime's signatures as TF Serving's ``SignatureDefMap`` (what ``signature_def`` metadata holds)."""
    out = get_model_metadata_pb2.SignatureDefMap()
    for name, sig in signatures.items():
        sd: meta_graph_pb2.SignatureDef = out.signature_def[name]
        sd.method_name = sig.method
        _tensor_infos(sd.inputs, sig.inputs)
        _tensor_infos(sd.outputs, sig.outputs)
    return out
