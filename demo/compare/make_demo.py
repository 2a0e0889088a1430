#!/usr/bin/env python3
"""Build the compare demo (task `compare`: no labels): the Fashion-MNIST CNN of demo/fashion_mnist, its FP16
candidate, and a planted FP16 candidate whose first block overflows.

The planted model is the FP32 reference rewritten into an equivalent graph: the first convolution's weights and
bias multiplied by 10,240 and the second convolution's weights divided by it. ReLU and max pooling commute with
a positive scale, so in FP32 the logits are the same (to rounding); the first block's activations, at most
about 9 in the reference, now reach 90,000, beyond FP16's largest finite value, 65,504. Converted to FP16 (the
same converter as the good candidate), the images with the brightest first-block activations overflow to inf,
then NaN, and the others stay right: an error that only some rows show, the case a per-row distribution finds.

Writes, beside this file:
  cnn_scaled_fp16.onnx   the planted candidate (onnxruntime.transformers.float16, keep_io_types)
  data/images.npz        'images': the first 500 images of demo/fashion_mnist/data/test_subset.npz, no labels

Usage: /work/main/.venv/bin/python demo/compare/make_demo.py   (a second; deterministic; needs no torch)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from onnx_steps import make_fp16  # noqa: E402

FASHION = HERE.parent / "fashion_mnist"
SCALE = 10240.0


def scaled(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with block1's conv (weights, bias) x SCALE and block2's conv weights / SCALE."""
    inits = {i.name: i for i in model.graph.initializer}
    for name, factor in (
        ("features.block1.conv.weight_bnfolded", SCALE),
        ("features.block1.conv.bias_bnfolded", SCALE),
        ("features.block2.conv.weight_bnfolded", 1 / SCALE),
    ):
        arr = numpy_helper.to_array(inits[name]).astype(np.float64) * factor
        inits[name].CopyFrom(numpy_helper.from_array(arr.astype(np.float32), name))
    return model


def main() -> None:
    images = np.load(FASHION / "data" / "test_subset.npz", allow_pickle=False)["images"][:500]
    np.savez_compressed(HERE / "data" / "images.npz", images=images)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "scaled_fp32.onnx"
        onnx.save(scaled(onnx.load(str(FASHION / "fashion_cnn_fp32.onnx"))), str(fp32))
        make_fp16(fp32, HERE / "cnn_scaled_fp16.onnx")
    print(f"wrote {HERE / 'cnn_scaled_fp16.onnx'} and {HERE / 'data' / 'images.npz'} ({images.shape})")


if __name__ == "__main__":
    main()
