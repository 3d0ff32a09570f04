"""``servekit optimize``: a faster version of a model (onnxruntime graph optimization, int8 quantization, sklearn
converted to ONNX) written as a new version directory, with its latency and accuracy cost measured beside the
original's."""
