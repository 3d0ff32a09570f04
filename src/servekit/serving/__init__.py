"""The model server, TF Serving's half: the model repository and its runtimes, the servable lifecycle, batching,
the protocol-neutral inference core, codecs, capture and metrics, and the protocol fronts (REST and gRPC) over
them. Nothing below ``serving.protocols`` knows HTTP."""
