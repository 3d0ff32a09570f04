"""An SKLearnProcessor script as SageMaker users write it: the paths it was given, hard-coded."""

import os

import pandas as pd

frame = pd.read_csv("/opt/ml/processing/input/raw.csv", header=None)
clean = frame.dropna()
os.makedirs("/opt/ml/processing/train", exist_ok=True)
clean.to_csv("/opt/ml/processing/train/train.csv", header=False, index=False)
print(f"preprocess kept {len(clean)} of {len(frame)} rows")
