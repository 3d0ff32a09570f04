"""The naive way users serve a model today: FastAPI, one onnxruntime call per request, no batching.

The model file comes from NAIVE_MODEL (this is a stand-alone script, not library code).
"""

import os

import numpy as np
import onnxruntime as ort
from fastapi import FastAPI, Request

session = ort.InferenceSession(os.environ["NAIVE_MODEL"], providers=["CPUExecutionProvider"])
input_name = session.get_inputs()[0].name
app = FastAPI()


@app.post("/v1/models/{name}:predict")
async def predict(name: str, request: Request) -> dict[str, list[object]]:
    body = await request.json()
    x = np.asarray(body["instances"], dtype=np.float32)
    outputs = session.run(None, {input_name: x})
    return {"predictions": outputs[-1].tolist()}
