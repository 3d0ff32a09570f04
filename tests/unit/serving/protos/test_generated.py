"""The generated gRPC modules are what scripts/grpc_protos.py makes from protos/descriptors.txtpb, and that set
is the real protos: the services and methods the clients call, and (for KServe V2) the very descriptors the
installed tritonclient carries."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import descriptor_pb2, text_format

from servekit.serving.protos import grpc_service_pb2, model_config_pb2
from servekit.serving.protos.tensorflow_serving.apis import model_service_pb2, prediction_service_pb2

ROOT = Path(__file__).resolve().parents[4]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grpc_protos", ROOT / "scripts" / "grpc_protos.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["grpc_protos"] = module
    spec.loader.exec_module(module)
    return module


def test_the_committed_modules_are_a_fresh_generation_of_the_descriptor_set() -> None:
    pytest.importorskip("grpc_tools")
    assert _script().check() == []


def test_the_generated_modules_carry_the_descriptors_of_the_set() -> None:
    fds = text_format.Parse((ROOT / "protos" / "descriptors.txtpb").read_text(), descriptor_pb2.FileDescriptorSet())
    by_name = {f.name: f.SerializeToString() for f in fds.file}
    for module in (prediction_service_pb2, model_service_pb2, grpc_service_pb2, model_config_pb2):
        assert module.DESCRIPTOR.serialized_pb == by_name[module.DESCRIPTOR.name]


def _methods(module: ModuleType, service: str) -> dict[str, tuple[str, str]]:
    svc = module.DESCRIPTOR.services_by_name[service]
    return {m.name: (m.input_type.full_name, m.output_type.full_name) for m in svc.methods}


def test_the_tf_serving_services_are_the_ones_clients_call() -> None:
    def rpc(request: str, response: str) -> tuple[str, str]:
        return f"tensorflow.serving.{request}", f"tensorflow.serving.{response}"

    assert _methods(prediction_service_pb2, "PredictionService") == {
        "Classify": rpc("ClassificationRequest", "ClassificationResponse"),
        "Regress": rpc("RegressionRequest", "RegressionResponse"),
        "Predict": rpc("PredictRequest", "PredictResponse"),
        "MultiInference": rpc("MultiInferenceRequest", "MultiInferenceResponse"),
        "GetModelMetadata": rpc("GetModelMetadataRequest", "GetModelMetadataResponse"),
    }
    assert _methods(model_service_pb2, "ModelService") == {
        "GetModelStatus": rpc("GetModelStatusRequest", "GetModelStatusResponse"),
        "HandleReloadConfigRequest": rpc("ReloadConfigRequest", "ReloadConfigResponse"),
    }


def _fields(desc: object) -> dict[str, dict[str, tuple[int, int]]]:
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for msg in desc.message_types_by_name.values():  # type: ignore[attr-defined]
        stack = [msg]
        while stack:
            m = stack.pop()
            out[m.full_name] = {f.name: (f.number, f.type) for f in m.fields}
            stack.extend(m.nested_types)
    return out


def test_kserve_v2_is_the_proto_tritonclient_speaks() -> None:
    """Every message and RPC both sides know agrees on names, numbers and types; for the tritonclient the set was
    extracted from (SOURCES.txt), the files are identical byte for byte."""
    service_pb2 = pytest.importorskip("tritonclient.grpc.service_pb2")
    theirs, ours = service_pb2.DESCRIPTOR, grpc_service_pb2.DESCRIPTOR
    assert theirs.name == ours.name == "grpc_service.proto"
    assert theirs.package == ours.package == "inference"
    their_fields, our_fields = _fields(theirs), _fields(ours)
    shared = set(their_fields) & set(our_fields)
    assert {"inference.ModelInferRequest", "inference.ModelInferResponse", "inference.InferTensorContents"} <= shared
    for name in shared:
        common = set(their_fields[name]) & set(our_fields[name])
        assert {f: their_fields[name][f] for f in common} == {f: our_fields[name][f] for f in common}, name
    their_rpcs = _methods(service_pb2, "GRPCInferenceService")
    our_rpcs = _methods(grpc_service_pb2, "GRPCInferenceService")
    for rpc in ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelInfer"):
        assert their_rpcs[rpc] == our_rpcs[rpc]
    from importlib.metadata import version

    if f"tritonclient-{version('tritonclient')}-" in (ROOT / "protos" / "SOURCES.txt").read_text():
        assert theirs.serialized_pb == ours.serialized_pb
