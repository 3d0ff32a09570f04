"""A SageMaker-style handler: the model is a weight vector in weights.json beside the code."""

import json
import os


def model_fn(model_dir):
    with open(os.path.join(model_dir, "weights.json")) as f:
        return json.load(f)


def input_fn(body, content_type):
    return json.loads(body)


def predict_fn(rows, weights):
    rows = rows if isinstance(rows[0], list) else [rows]
    return [sum(w * x for w, x in zip(weights, row, strict=False)) for row in rows]


def output_fn(prediction, accept):
    return json.dumps(prediction), "application/json"
