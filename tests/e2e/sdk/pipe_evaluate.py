"""A pipeline's evaluation script: the trained model on the test split, its R² written as evaluation.json (the
PropertyFile a ConditionStep reads with JsonGet)."""

import json
import os
import tarfile

import joblib
import numpy as np

with tarfile.open("/opt/ml/processing/model/model.tar.gz") as tar:
    tar.extractall("/tmp/model")
model = joblib.load("/tmp/model/model.joblib")
rows = np.loadtxt("/opt/ml/processing/test/test.csv", delimiter=",")
y, x = rows[:, 0], rows[:, 1:]
report = {"regression_metrics": {"r2": {"value": float(model.score(x, y))}}}
os.makedirs("/opt/ml/processing/evaluation", exist_ok=True)
with open("/opt/ml/processing/evaluation/evaluation.json", "w") as f:
    json.dump(report, f)
print("evaluation", report)
