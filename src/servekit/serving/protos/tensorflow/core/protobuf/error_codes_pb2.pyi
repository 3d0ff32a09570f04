from servekit.serving.protos.xla.tsl.protobuf import error_codes_pb2 as _error_codes_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar
from xla.tsl.protobuf.error_codes_pb2 import Code as Code

DESCRIPTOR: _descriptor.FileDescriptor
OK: _error_codes_pb2.Code
CANCELLED: _error_codes_pb2.Code
UNKNOWN: _error_codes_pb2.Code
INVALID_ARGUMENT: _error_codes_pb2.Code
DEADLINE_EXCEEDED: _error_codes_pb2.Code
NOT_FOUND: _error_codes_pb2.Code
ALREADY_EXISTS: _error_codes_pb2.Code
PERMISSION_DENIED: _error_codes_pb2.Code
UNAUTHENTICATED: _error_codes_pb2.Code
RESOURCE_EXHAUSTED: _error_codes_pb2.Code
FAILED_PRECONDITION: _error_codes_pb2.Code
ABORTED: _error_codes_pb2.Code
OUT_OF_RANGE: _error_codes_pb2.Code
UNIMPLEMENTED: _error_codes_pb2.Code
INTERNAL: _error_codes_pb2.Code
UNAVAILABLE: _error_codes_pb2.Code
DATA_LOSS: _error_codes_pb2.Code
DO_NOT_USE_RESERVED_FOR_FUTURE_EXPANSION_USE_DEFAULT_IN_SWITCH_INSTEAD_: _error_codes_pb2.Code
