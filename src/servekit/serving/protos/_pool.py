"""The descriptor pool of servekit's generated gRPC modules (scripts/grpc_protos.py; do not edit).

Not protobuf's default pool: TensorFlow, tritonclient and tensorflow-serving-api register the same proto file
names there, and two registrations that differ by a byte fail at import."""

from google.protobuf import any_pb2, descriptor_pool, wrappers_pb2

_POOL = descriptor_pool.DescriptorPool()
for _well_known in (any_pb2, wrappers_pb2):
    _POOL.AddSerializedFile(_well_known.DESCRIPTOR.serialized_pb)


def Default() -> descriptor_pool.DescriptorPool:  # noqa: N802  (stands in for descriptor_pool.Default)
    return _POOL
