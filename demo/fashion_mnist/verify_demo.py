#!/usr/bin/env python3
"""Tiny consistency check of the committed demo artefacts.

Loads fashion_cnn.pt into fmnist_model.build() and compares PyTorch logits
with ONNX Runtime (CPU) logits of fashion_cnn_fp32.onnx on the first 64
images of data/test_subset.npz. Exits non-zero if the max abs diff > --tol.

Usage: python demo/fashion_mnist/verify_demo.py [--tol 1e-4]
"""

import argparse
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import fmnist_model  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("-n", type=int, default=64)
    args = ap.parse_args()

    model = fmnist_model.build()
    model.load_state_dict(torch.load(HERE / "fashion_cnn.pt", weights_only=True))
    model.eval()
    x = np.load(HERE / "data" / "test_subset.npz")["images"][: args.n].astype(np.float32) / 255.0
    with torch.no_grad():
        ref = model(torch.from_numpy(x)).numpy()
    sess = ort.InferenceSession(str(HERE / "fashion_cnn_fp32.onnx"), providers=["CPUExecutionProvider"])
    out = sess.run(["logits"], {"input": x})[0]
    diff = float(np.abs(out - ref).max())
    same_top1 = float(np.mean(out.argmax(1) == ref.argmax(1)))
    print(f"{args.n} images: max |torch - ort_fp32| = {diff:.3g}, top-1 agreement = {same_top1:.3f}")
    return 0 if diff <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
