from servekit.serving.protos.tensorflow_serving.apis import get_model_status_pb2 as _get_model_status_pb2
from servekit.serving.protos.tensorflow_serving.apis import model_management_pb2 as _model_management_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor
