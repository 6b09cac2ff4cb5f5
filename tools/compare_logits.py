#!/usr/bin/env python3
"""Compares a logits .npy written by `deepinfer score` with a golden one: argmax agreement and
max |d| / max |golden|. Exit 1 when the relative difference exceeds --tol or an argmax differs."""
import argparse
import sys

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("got")
p.add_argument("golden")
p.add_argument("--tol", type=float, default=1e-3)
a = p.parse_args()
got, ref = np.load(a.got), np.load(a.golden)
if got.shape != ref.shape:
    sys.exit(f"shape {got.shape} != golden {ref.shape}")
rel = float(np.abs(got - ref).max() / np.abs(ref).max())
mism = int((got.argmax(-1) != ref.argmax(-1)).sum())
print(f"{a.got}: max|d|/max|golden| = {rel:.3g}, argmax mismatches {mism}/{ref.shape[0]}")
sys.exit(0 if rel <= a.tol and mism == 0 else 1)
