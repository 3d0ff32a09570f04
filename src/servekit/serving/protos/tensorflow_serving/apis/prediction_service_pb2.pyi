from servekit.serving.protos.tensorflow_serving.apis import classification_pb2 as _classification_pb2
from servekit.serving.protos.tensorflow_serving.apis import get_model_metadata_pb2 as _get_model_metadata_pb2
from servekit.serving.protos.tensorflow_serving.apis import inference_pb2 as _inference_pb2
from servekit.serving.protos.tensorflow_serving.apis import predict_pb2 as _predict_pb2
from servekit.serving.protos.tensorflow_serving.apis import regression_pb2 as _regression_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor
