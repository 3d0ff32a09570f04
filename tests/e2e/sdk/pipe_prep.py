"""A pipeline's preprocessing script (an SKLearnProcessor's code): two outputs, train and test."""

import os

import pandas as pd

frame = pd.read_csv("/opt/ml/processing/input/raw.csv", header=None).dropna()
os.makedirs("/opt/ml/processing/train", exist_ok=True)
os.makedirs("/opt/ml/processing/test", exist_ok=True)
frame.iloc[:15].to_csv("/opt/ml/processing/train/train.csv", header=False, index=False)
frame.iloc[15:].to_csv("/opt/ml/processing/test/test.csv", header=False, index=False)
print(f"prep: {len(frame)} rows, 15 to train")
