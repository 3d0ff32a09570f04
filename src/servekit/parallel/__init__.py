"""Model parallelism: an ONNX graph cut into pipeline stages (:mod:`.split`) and the handler each stage process
serves its stage with (:mod:`.stage`). Serving-side code: it knows tensors, so the control plane never imports it;
hosting runs the split as a process and starts the stages as ``servekit serve`` instances."""
