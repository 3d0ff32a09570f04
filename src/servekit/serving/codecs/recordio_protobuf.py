"""``application/x-recordio-protobuf``: SageMaker's first-party algorithms' data format (the SDK's ``RecordSet``,
``RecordSerializer`` and ``RecordDeserializer``).

A body is a sequence of RecordIO records: the magic ``0xced7230a``, a 32-bit length (its top three bits a
continuation flag, always 0 here), the payload padded to four bytes. Each payload is an ``aialgs.data.Record``
protobuf: ``features`` and ``label`` maps of tensors (float32, float64 or int32 values; dense, or sparse with
``keys`` and ``shape``). The message classes are built from the schema below at import (the same descriptor the
SDK's ``record_pb2`` carries), in a pool of their own.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

CONTENT_TYPE = "application/x-recordio-protobuf"
MAGIC = 0xCED7230A
_LENGTH_MASK = (1 << 29) - 1
_TENSORS = (("Float32Tensor", "TYPE_FLOAT", 2), ("Float64Tensor", "TYPE_DOUBLE", 3), ("Int32Tensor", "TYPE_INT32", 7))
_VALUE_FIELDS = {"float32_tensor": np.float32, "float64_tensor": np.float64, "int32_tensor": np.int32}


class RecordError(ValueError):
    """A body that is not RecordIO-protobuf, or a record that says nothing servekit can read."""


def _schema() -> descriptor_pb2.FileDescriptorProto:
    F = descriptor_pb2.FieldDescriptorProto
    fd = descriptor_pb2.FileDescriptorProto(name="servekit_record.proto", package="aialgs.data", syntax="proto2")
    for name, kind, _ in _TENSORS:
        msg = fd.message_type.add(name=name)
        for field, number, ftype in (
            ("values", 1, getattr(F, kind)),
            ("keys", 2, F.TYPE_UINT64),
            ("shape", 3, F.TYPE_UINT64),
        ):
            added = msg.field.add(name=field, number=number, label=F.LABEL_REPEATED, type=ftype)
            added.options.packed = True
    raw = fd.message_type.add(name="Bytes")
    raw.field.add(name="value", number=1, label=F.LABEL_REPEATED, type=F.TYPE_BYTES)
    raw.field.add(name="content_type", number=2, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING)
    value = fd.message_type.add(name="Value")
    value.oneof_decl.add(name="value")
    for name, _, number in _TENSORS:
        field = name[0].lower() + name[1:].replace("32T", "32_t").replace("64T", "64_t")
        value.field.add(name=field, number=number, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                        type_name=f".aialgs.data.{name}", oneof_index=0)  # fmt: skip
    value.field.add(name="bytes", number=9, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                    type_name=".aialgs.data.Bytes", oneof_index=0)  # fmt: skip
    record = fd.message_type.add(name="Record")
    for map_name, number in (("features", 1), ("label", 2)):
        entry = record.nested_type.add(name=f"{map_name.capitalize()}Entry")
        entry.options.map_entry = True
        entry.field.add(name="key", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING)
        entry.field.add(name="value", number=2, label=F.LABEL_OPTIONAL, type=F.TYPE_MESSAGE,
                        type_name=".aialgs.data.Value")  # fmt: skip
        record.field.add(name=map_name, number=number, label=F.LABEL_REPEATED, type=F.TYPE_MESSAGE,
                         type_name=f".aialgs.data.Record.{map_name.capitalize()}Entry")  # fmt: skip
    for name, number in (("uid", 3), ("metadata", 4), ("configuration", 5)):
        record.field.add(name=name, number=number, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING)
    return fd


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_schema())
Record: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("aialgs.data.Record"))


# ---- RecordIO framing --------------------------------------------------------------------------------------------
def frames(body: bytes) -> Iterator[bytes]:
    """The payloads of a RecordIO body; RecordError for a torn or foreign one."""
    at = 0
    while at < len(body):
        if len(body) - at < 8:
            raise RecordError(f"RecordIO: {len(body) - at} stray bytes at offset {at}")
        magic, word = struct.unpack_from("<II", body, at)
        if magic != MAGIC:
            raise RecordError(f"RecordIO: no record at offset {at} (magic {magic:#x}, expected {MAGIC:#x})")
        if word >> 29:
            raise RecordError("RecordIO: split records (a continuation flag) are not read")
        length = word & _LENGTH_MASK
        start = at + 8
        if start + length > len(body):
            raise RecordError(f"RecordIO: a record of {length} bytes at offset {at} runs past the body's end")
        yield body[start : start + length]
        at = start + length + (-length % 4)


def frame(payload: bytes) -> bytes:
    return struct.pack("<II", MAGIC, len(payload)) + payload + b"\0" * (-len(payload) % 4)


# ---- tensors -----------------------------------------------------------------------------------------------------
def _tensor(value: Any, what: str) -> npt.NDArray[Any]:
    kind = value.WhichOneof("value")
    if kind not in _VALUE_FIELDS:
        raise RecordError(f"{what} holds {kind or 'nothing'}; expected a float32, float64 or int32 tensor")
    t = getattr(value, kind)
    values = np.asarray(t.values, dtype=_VALUE_FIELDS[kind])
    if not t.keys:
        return values.reshape(tuple(int(d) for d in t.shape)) if t.shape else values
    if not t.shape:
        raise RecordError(f"{what} is sparse (keys) without a shape")
    dense = np.zeros(int(np.prod([int(d) for d in t.shape])), dtype=values.dtype)
    keys = np.asarray(t.keys, dtype=np.int64)
    if keys.size != values.size or (keys.size and (keys.min() < 0 or keys.max() >= dense.size)):
        raise RecordError(f"{what}'s keys do not fit its values and shape")
    dense[keys] = values
    return dense.reshape(tuple(int(d) for d in t.shape))


def read(body: bytes, features: str = "values") -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64] | None]:
    """A body's records as a matrix (one row per record, its ``features[features]`` tensor flattened) and their
    labels (``label["values"]``'s first value, as the algorithms read them), None when no record has one."""
    rows: list[npt.NDArray[Any]] = []
    labels: list[float] = []
    for i, payload in enumerate(frames(body)):
        record = Record()
        try:
            record.ParseFromString(payload)
        except Exception as exc:  # protobuf's DecodeError
            raise RecordError(f"record {i} is not an aialgs.data.Record: {exc}") from None
        if features not in record.features:
            raise RecordError(f"record {i} has no features[{features!r}] (it has {sorted(record.features)})")
        rows.append(_tensor(record.features[features], f"record {i}'s features").ravel())
        if "values" in record.label:
            labels.append(float(_tensor(record.label["values"], f"record {i}'s label").ravel()[0]))
    if not rows:
        raise RecordError("the body holds no record")
    width = {r.size for r in rows}
    if len(width) != 1:
        raise RecordError(f"records have features of different sizes: {sorted(width)}")
    x = np.vstack(rows).astype(np.float64)
    if labels and len(labels) != len(rows):
        raise RecordError("some records have a label and some do not")
    return x, (np.asarray(labels, dtype=np.float64) if labels else None)


def _put(value: Any, array: npt.ArrayLike) -> None:
    a = np.asarray(array)
    if a.dtype == np.float64:
        value.float64_tensor.values.extend(a.ravel().tolist())
    elif np.issubdtype(a.dtype, np.integer):
        value.int32_tensor.values.extend(a.astype(np.int32).ravel().tolist())
    else:
        value.float32_tensor.values.extend(a.astype(np.float32).ravel().tolist())


def write(x: npt.ArrayLike, labels: npt.ArrayLike | None = None) -> bytes:
    """Rows of ``x`` as records (``features["values"]``, float32 unless float64), with ``label["values"]``."""
    matrix = np.atleast_2d(np.asarray(x))
    ys = None if labels is None else np.asarray(labels).ravel()
    out = []
    for i, row in enumerate(matrix):
        record = Record()
        _put(record.features["values"], row)
        if ys is not None:
            _put(record.label["values"], ys[i : i + 1])
        out.append(frame(record.SerializeToString()))
    return b"".join(out)


def write_labels(rows: Sequence[Mapping[str, npt.ArrayLike]]) -> bytes:
    """Predictions as the algorithms answer them in RecordIO-protobuf: a record per row, its ``label`` map holding
    each named output (``closest_cluster``, ``distance_to_cluster``; ``score``, ``predicted_label``)."""
    out = []
    for row in rows:
        record = Record()
        for name, value in row.items():
            _put(record.label[name], np.atleast_1d(np.asarray(value, dtype=np.float32)))
        out.append(frame(record.SerializeToString()))
    return b"".join(out)
