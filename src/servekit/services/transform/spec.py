"""The frozen description of a batch transform job, shaped like SageMaker's ``CreateTransformJob`` request.

A spec is built once at the edge (CLI flags, or a YAML/JSON file the CLI has read) with
:func:`spec_from_request`, validated there, and passed down unchanged. :func:`spec_to_request` gives the
request back, which is what the job store keeps and what a control-plane API can reuse later.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from servekit.errors import ConfigError
from servekit.services.transform.filters import parse_path

JOB_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
MB = 1024 * 1024  # MaxPayloadInMB counts mebibytes


class SplitType(enum.StrEnum):
    NONE = "None"  # the whole object is one record
    LINE = "Line"
    RECORDIO = "RecordIO"  # MXNet/dmlc RecordIO framing
    TFRECORD = "TFRecord"


class BatchStrategy(enum.StrEnum):
    SINGLE = "SingleRecord"
    MULTI = "MultiRecord"


class AssembleWith(enum.StrEnum):
    NONE = "None"
    LINE = "Line"


class JoinSource(enum.StrEnum):
    NONE = "None"
    INPUT = "Input"


class Compression(enum.StrEnum):
    NONE = "None"
    GZIP = "Gzip"


class DataType(enum.StrEnum):
    PREFIX = "S3Prefix"  # a file, or every file under a directory/prefix
    MANIFEST = "ManifestFile"  # a JSON list: [{"prefix": ...}, "key1", "key2", ...]


class EngineKind(enum.StrEnum):
    LOCAL = "local"
    RAY = "ray"


@dataclass(frozen=True, slots=True)
class TransformSpec:
    """What to transform and how; everything that decides the bytes of the outputs."""

    name: str
    input_uri: str
    output_path: str
    model: str = ""  # a model version directory, run in process
    endpoint_url: str = ""  # or any server speaking the SageMaker container contract
    data_type: DataType = DataType.PREFIX
    content_type: str = ""  # "" = from each object's file extension
    compression: Compression = Compression.NONE
    split_type: SplitType = SplitType.NONE
    batch_strategy: BatchStrategy = BatchStrategy.SINGLE
    max_payload_mb: int = 6  # 0 = no limit (SplitType None only)
    max_concurrent_transforms: int = 1  # mini-batches in flight per instance
    instance_count: int = 1
    instance_type: str = "local"
    accept: str = ""  # "" = the object's content type (application/json for binary inputs)
    assemble_with: AssembleWith = AssembleWith.NONE
    input_filter: str = "$"
    output_filter: str = "$"
    join_source: JoinSource = JoinSource.NONE
    max_retries: int = 3
    invocation_timeout_s: int = 600
    environment: tuple[tuple[str, str], ...] = ()
    strict: bool = False  # SageMaker's behaviour: a failed record fails its object and the job
    capture_destination: str = ""  # DataCaptureConfig.DestinationS3Uri: manifests of what the job read and wrote
    capture_kms_key: str = ""  # DataCaptureConfig.KmsKeyId: kept, not used (servekit's store encrypts on its own)
    tags: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        _validate(self)

    @property
    def max_payload_bytes(self) -> int:
        """The request size limit in bytes; 0 means none."""
        return self.max_payload_mb * MB

    @property
    def needs_records(self) -> bool:
        """Whether outputs must be matched to input records one by one (join or output filter)."""
        return self.join_source is JoinSource.INPUT or self.output_filter != "$"

    def with_changes(self, **changes: Any) -> TransformSpec:
        return replace(self, **changes)


def _validate(s: TransformSpec) -> None:
    if not JOB_NAME_RE.match(s.name):
        raise ConfigError(
            f"job name {s.name!r} must be 1-63 letters, digits and hyphens, starting and ending with a letter or digit"
        )
    if not s.input_uri:
        raise ConfigError("give the input: a file, a directory/prefix or a manifest file (--input)")
    if not s.output_path:
        raise ConfigError("give the output path (--output-path)")
    if bool(s.model) == bool(s.endpoint_url):
        raise ConfigError("give exactly one of a model version directory (--model) or --endpoint-url")
    if s.endpoint_url and not s.endpoint_url.startswith(("http://", "https://")):
        raise ConfigError(f"--endpoint-url {s.endpoint_url!r} must start with http:// or https://")
    if not 0 <= s.max_payload_mb <= 100:
        raise ConfigError(f"MaxPayloadInMB must be 0..100, got {s.max_payload_mb}")
    if not 1 <= s.max_concurrent_transforms <= 100:
        raise ConfigError(f"MaxConcurrentTransforms must be 1..100, got {s.max_concurrent_transforms}")
    if s.max_payload_mb * s.max_concurrent_transforms > 100:
        raise ConfigError(
            f"MaxConcurrentTransforms x MaxPayloadInMB must be <= 100 (SageMaker's limit), got "
            f"{s.max_concurrent_transforms} x {s.max_payload_mb}"
        )
    if s.batch_strategy is BatchStrategy.MULTI and s.split_type is SplitType.NONE:
        raise ConfigError("BatchStrategy MultiRecord needs a SplitType (Line, RecordIO or TFRecord), not None")
    if s.max_payload_mb == 0 and s.split_type is not SplitType.NONE:
        raise ConfigError("MaxPayloadInMB 0 (no limit) works with SplitType None only")
    if not 1 <= s.instance_count <= 100:
        raise ConfigError(f"InstanceCount must be 1..100, got {s.instance_count}")
    if not 0 <= s.max_retries <= 3:
        raise ConfigError(f"InvocationsMaxRetries must be 0..3, got {s.max_retries}")
    if not 1 <= s.invocation_timeout_s <= 3600:
        raise ConfigError(f"InvocationsTimeoutInSeconds must be 1..3600, got {s.invocation_timeout_s}")
    binary = s.split_type in (SplitType.RECORDIO, SplitType.TFRECORD)
    if binary and (s.input_filter != "$" or s.output_filter != "$" or s.join_source is JoinSource.INPUT):
        raise ConfigError(
            "InputFilter, OutputFilter and JoinSource work on JSON and CSV records, not RecordIO/TFRecord"
        )
    for label, expr in (("InputFilter", s.input_filter), ("OutputFilter", s.output_filter)):
        try:
            parse_path(expr)
        except ConfigError as exc:
            raise ConfigError(f"{label}: {exc}") from None
    for key, _ in s.environment:
        if not key or "=" in key:
            raise ConfigError(f"environment variable name {key!r} is not valid")


# ---- CreateTransformJob <-> spec -----------------------------------------------------------------------------

_TOP_KEYS = {
    "TransformJobName",
    "ModelName",
    "MaxConcurrentTransforms",
    "ModelClientConfig",
    "MaxPayloadInMB",
    "BatchStrategy",
    "Environment",
    "TransformInput",
    "TransformOutput",
    "TransformResources",
    "DataProcessing",
    "Tags",
    "ExperimentConfig",
    "DataCaptureConfig",
    # servekit's own keys
    "EndpointUrl",
    "Strict",
}
_UNSUPPORTED: dict[str, str] = {}  # fields refused with the reason (none today)


def _enum(kind: type[enum.StrEnum], value: Any, where: str) -> Any:
    for member in kind:
        if str(value).lower() == member.value.lower():
            return member
    allowed = " | ".join(m.value for m in kind)
    raise ConfigError(f"{where}: {value!r} is not one of {allowed}")


def _section(doc: Mapping[str, Any], key: str, allowed: set[str]) -> Mapping[str, Any]:
    value = doc.get(key) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key} must be an object")
    unknown = set(value) - allowed
    if unknown:
        raise ConfigError(f"{key}: unknown field(s) {sorted(unknown)}; known: {sorted(allowed)}")
    return value


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ConfigError(f"{where} must be an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{where} must be an integer, got {value!r}") from None


def _pairs(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if isinstance(value, Mapping):
        return tuple(sorted((str(k), str(v)) for k, v in value.items()))
    if isinstance(value, list):  # SageMaker Tags: [{"Key": ..., "Value": ...}]
        try:
            return tuple((str(t["Key"]), str(t.get("Value", ""))) for t in value)
        except (TypeError, KeyError):
            pass
    raise ConfigError(f"{where} must be a mapping of names to values")


def spec_from_request(doc: Mapping[str, Any]) -> TransformSpec:
    """A spec from a ``CreateTransformJob``-shaped mapping (plus servekit's ``EndpointUrl`` and ``Strict``)."""
    if not isinstance(doc, Mapping):
        raise ConfigError("a transform job must be a mapping shaped like CreateTransformJob")
    for key, why in _UNSUPPORTED.items():
        if doc.get(key):
            raise ConfigError(f"{key}: {why}")
    unknown = set(doc) - _TOP_KEYS - set(_UNSUPPORTED)
    if unknown:
        raise ConfigError(f"unknown field(s) {sorted(unknown)}; known: {sorted(_TOP_KEYS)}")
    tin = _section(doc, "TransformInput", {"DataSource", "ContentType", "CompressionType", "SplitType"})
    source = tin.get("DataSource") or {}
    s3 = source.get("S3DataSource") if isinstance(source, Mapping) else None
    if not isinstance(s3, Mapping) or not s3.get("S3Uri"):
        raise ConfigError("TransformInput.DataSource.S3DataSource.S3Uri is required (a file, directory or manifest)")
    tout = _section(doc, "TransformOutput", {"S3OutputPath", "Accept", "AssembleWith", "KmsKeyId"})
    res = _section(
        doc, "TransformResources", {"InstanceType", "InstanceCount", "VolumeKmsKeyId", "TransformAmiVersion"}
    )
    proc = _section(doc, "DataProcessing", {"InputFilter", "OutputFilter", "JoinSource"})
    capture = _section(doc, "DataCaptureConfig", {"DestinationS3Uri", "KmsKeyId", "GenerateInferenceId"})
    if capture and not capture.get("DestinationS3Uri"):
        raise ConfigError("DataCaptureConfig.DestinationS3Uri is required")
    if capture.get("GenerateInferenceId"):
        raise ConfigError(
            "DataCaptureConfig.GenerateInferenceId is not supported: servekit's batch capture writes SageMaker's "
            "manifests of the job's objects and adds no inference ids to its outputs"
        )
    client = _section(doc, "ModelClientConfig", {"InvocationsTimeoutInSeconds", "InvocationsMaxRetries"})
    split = _enum(SplitType, tin.get("SplitType") or "None", "TransformInput.SplitType")
    raw_strategy = doc.get("BatchStrategy")
    strategy = (
        _enum(BatchStrategy, raw_strategy, "BatchStrategy")
        if raw_strategy
        else (BatchStrategy.SINGLE if split is SplitType.NONE else BatchStrategy.MULTI)
    )
    concurrency = _int(doc.get("MaxConcurrentTransforms") or 1, "MaxConcurrentTransforms")
    strict = doc.get("Strict", False)
    if not isinstance(strict, bool):
        raise ConfigError(f"Strict must be true or false, got {strict!r}")
    payload = doc.get("MaxPayloadInMB")
    return TransformSpec(
        name=str(doc.get("TransformJobName") or ""),
        input_uri=str(s3["S3Uri"]),
        output_path=str(tout.get("S3OutputPath") or ""),
        model=str(doc.get("ModelName") or ""),
        endpoint_url=str(doc.get("EndpointUrl") or ""),
        data_type=_enum(DataType, s3.get("S3DataType") or "S3Prefix", "S3DataSource.S3DataType"),
        content_type=str(tin.get("ContentType") or ""),
        compression=_enum(Compression, tin.get("CompressionType") or "None", "TransformInput.CompressionType"),
        split_type=split,
        batch_strategy=strategy,
        max_payload_mb=6 if payload is None else _int(payload, "MaxPayloadInMB"),
        max_concurrent_transforms=concurrency,
        instance_count=_int(res.get("InstanceCount", 1), "TransformResources.InstanceCount"),
        instance_type=str(res.get("InstanceType") or "local"),
        accept=str(tout.get("Accept") or ""),
        assemble_with=_enum(AssembleWith, tout.get("AssembleWith") or "None", "TransformOutput.AssembleWith"),
        input_filter=str(proc.get("InputFilter") or "$"),
        output_filter=str(proc.get("OutputFilter") or "$"),
        join_source=_enum(JoinSource, proc.get("JoinSource") or "None", "DataProcessing.JoinSource"),
        max_retries=_int(client.get("InvocationsMaxRetries", 3), "ModelClientConfig.InvocationsMaxRetries"),
        invocation_timeout_s=_int(
            client.get("InvocationsTimeoutInSeconds", 600), "ModelClientConfig.InvocationsTimeoutInSeconds"
        ),
        environment=_pairs(doc.get("Environment"), "Environment"),
        strict=strict,
        capture_destination=str(capture.get("DestinationS3Uri") or ""),
        capture_kms_key=str(capture.get("KmsKeyId") or ""),
        tags=_pairs(doc.get("Tags"), "Tags"),
    )


def spec_to_request(spec: TransformSpec) -> dict[str, Any]:
    """The ``CreateTransformJob`` request this spec stands for (round-trips through :func:`spec_from_request`)."""
    doc: dict[str, Any] = {
        "TransformJobName": spec.name,
        "MaxConcurrentTransforms": spec.max_concurrent_transforms,
        "ModelClientConfig": {
            "InvocationsTimeoutInSeconds": spec.invocation_timeout_s,
            "InvocationsMaxRetries": spec.max_retries,
        },
        "MaxPayloadInMB": spec.max_payload_mb,
        "BatchStrategy": spec.batch_strategy.value,
        "Environment": dict(spec.environment),
        "TransformInput": {
            "DataSource": {"S3DataSource": {"S3DataType": spec.data_type.value, "S3Uri": spec.input_uri}},
            "CompressionType": spec.compression.value,
            "SplitType": spec.split_type.value,
        },
        "TransformOutput": {"S3OutputPath": spec.output_path, "AssembleWith": spec.assemble_with.value},
        "TransformResources": {"InstanceType": spec.instance_type, "InstanceCount": spec.instance_count},
        "DataProcessing": {
            "InputFilter": spec.input_filter,
            "OutputFilter": spec.output_filter,
            "JoinSource": spec.join_source.value,
        },
        "Strict": spec.strict,
    }
    if spec.model:
        doc["ModelName"] = spec.model
    if spec.endpoint_url:
        doc["EndpointUrl"] = spec.endpoint_url
    if spec.content_type:
        doc["TransformInput"]["ContentType"] = spec.content_type
    if spec.accept:
        doc["TransformOutput"]["Accept"] = spec.accept
    if spec.tags:
        doc["Tags"] = [{"Key": k, "Value": v} for k, v in spec.tags]
    if spec.capture_destination:
        doc["DataCaptureConfig"] = {"DestinationS3Uri": spec.capture_destination, "GenerateInferenceId": False}
        if spec.capture_kms_key:
            doc["DataCaptureConfig"]["KmsKeyId"] = spec.capture_kms_key
    return doc


def changed_fields(a: TransformSpec, b: TransformSpec) -> list[str]:
    """Fields that decide output bytes and differ between two specs (what may not change when a job resumes).

    Instances, concurrency, retries and timeouts may change between runs: they never change an output."""
    ignored = {"tags", "instance_count", "instance_type", "max_concurrent_transforms", "max_retries"}
    ignored |= {"capture_destination", "capture_kms_key"}  # where the manifests go, not what the outputs hold
    ignored.add("invocation_timeout_s")
    return [f for f in TransformSpec.__dataclass_fields__ if f not in ignored and getattr(a, f) != getattr(b, f)]
