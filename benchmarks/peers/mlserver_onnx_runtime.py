"""A minimal MLServer custom runtime that runs an ONNX file with onnxruntime (MLServer ships none).

Copied next to model-settings.json by peers/mlserver.py and named there as ``implementation``; it runs inside
the MLServer venv, not in servekit's. Every ONNX output is returned as a V2 output tensor.
"""

import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse
from mlserver.utils import get_model_uri


class OnnxModel(MLModel):
    async def load(self) -> bool:
        uri = await get_model_uri(self._settings, wellknown_filenames=["model.onnx"])
        self._session = ort.InferenceSession(uri, providers=["CPUExecutionProvider"])
        self._input = self._session.get_inputs()[0].name
        self._outputs = [o.name for o in self._session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        x = NumpyCodec.decode_input(payload.inputs[0]).astype("float32", copy=False)
        values = self._session.run(None, {self._input: x})
        return InferenceResponse(
            model_name=self.name,
            id=payload.id,
            outputs=[NumpyCodec.encode_output(n, v) for n, v in zip(self._outputs, values, strict=True)],
        )
