"""A script-mode script whose score peaks at alpha = 0.3 (what a HyperparameterTuner searches)."""

import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--alpha", type=float)
args, _ = parser.parse_known_args()
print(f"score={1 - (args.alpha - 0.3) ** 2:.6f}")
