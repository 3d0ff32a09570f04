"""An SKLearn script-mode training script as SageMaker users write it (and its model_fn for serving)."""

import argparse
import json
import os

import joblib
import numpy as np
from sklearn.linear_model import LinearRegression


def model_fn(model_dir):
    return joblib.load(os.path.join(model_dir, "model.joblib"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--fit_intercept", type=lambda s: s.lower() == "true", default=True)
    parser.add_argument("--note", type=str, default="")
    parser.add_argument("--model-dir", type=str, default=os.environ.get("SM_MODEL_DIR"))
    parser.add_argument("--train", type=str, default=os.environ.get("SM_CHANNEL_TRAIN"))
    args = parser.parse_args()
    rows = np.loadtxt(os.path.join(args.train, "train.csv"), delimiter=",")
    y, x = rows[:, 0], rows[:, 1:]
    model = LinearRegression(fit_intercept=args.fit_intercept).fit(x, y)
    print(f"note={args.note} hosts={json.loads(os.environ['SM_HOSTS'])}")
    print(f"r2={model.score(x, y):.4f}")
    joblib.dump(model, os.path.join(args.model_dir, "model.joblib"))
