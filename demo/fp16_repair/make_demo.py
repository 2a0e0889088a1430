#!/usr/bin/env python3
"""Build the FP16-repair demo: a model whose FP16 conversion really collapses, and its repair.

The Fashion-MNIST CNN of demo/fashion_mnist (its trained weights, unchanged) with one more layer:
a BatchNormalization after block2's ReLU (post-activation BatchNorm, which torch's exporter does
not fold into a Conv). Its statistics make it the identity in FP32 except for one channel, the
most active one, whose running variance is 1e8 with a matching scale (1e4): the pattern of a
rarely active channel in real exports, and the same function. FP16 cannot hold 1e8:
`onnxruntime.transformers.float16` clips it to 65504, and that channel comes out 39 times too
large. `trtverify repair` finds the BatchNormalization; the repaired model keeps it in FP32.

Writes, beside this file:
  fashion_bn_fp32.onnx            the reference (opset 17)
  fashion_bn_fp16.onnx            onnxruntime.transformers.float16 (keep_io_types): collapses
  fashion_bn_fp16_repaired.onnx   trtverify's FP16 with the BatchNormalization kept in FP32
  metrics.json                    accuracy of each on the 2,000-image test subset (ONNX Runtime CPU)

Usage: python demo/fp16_repair/make_demo.py   (CPU, a few seconds; deterministic)
"""

from __future__ import annotations

import json
import sys
import warnings
from collections import OrderedDict
from pathlib import Path

import numpy as np
import onnx
import torch

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FASHION = ROOT / "demo" / "fashion_mnist"
sys.path.insert(0, str(FASHION))
sys.path.insert(1, str(HERE.parent))  # demo/onnx_steps.py
sys.path.insert(2, str(ROOT))
import fmnist_model  # noqa: E402
from onnx_steps import make_fp16, ort_session  # noqa: E402

from trtverify.convert.fp16 import to_fp16  # noqa: E402

BN_NODE = "/features/post_bn/BatchNormalization"
VARIANCE = 1e8


def build() -> torch.nn.Module:
    """The demo CNN with the post-activation BatchNorm (the identity in FP32 but for one channel's scale)."""
    model = fmnist_model.FashionCNN()
    model.load_state_dict(torch.load(FASHION / "fashion_cnn.pt", weights_only=True))
    model.eval()
    f = model.features
    layers = [("block1", f.block1), ("pool1", f.pool1), ("block2", f.block2)]
    bn = torch.nn.BatchNorm2d(32)
    layers += [("post_bn", bn), ("pool2", f.pool2), ("block3", f.block3), ("block4", f.block4), ("pool3", f.pool3)]
    model.features = torch.nn.Sequential(OrderedDict(layers))
    images = np.load(FASHION / "data" / "test_subset.npz")["images"][:256].astype(np.float32) / 255.0
    with torch.no_grad():
        act = torch.nn.Sequential(f.block1, f.pool1, f.block2)(torch.from_numpy(images))
        channel = int(act.mean(dim=(0, 2, 3)).argmax())
        bn.running_mean.zero_()
        bn.running_var.fill_(1.0 - bn.eps)
        bn.weight.fill_(1.0)
        bn.bias.zero_()
        bn.running_var[channel] = VARIANCE
        bn.weight[channel] = float(np.sqrt(VARIANCE + bn.eps))
    model.eval()
    return model


def export(model: torch.nn.Module, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            model,
            (torch.zeros(2, 1, 28, 28),),
            str(path),
            dynamo=False,
            opset_version=17,
            input_names=["input"],
            output_names=["logits"],
            dynamic_axes={"input": {0: "batch"}, "logits": {0: "batch"}},
        )
    m = onnx.load(str(path))
    assert BN_NODE in {n.name for n in m.graph.node}, "the post-activation BatchNorm was folded away"
    onnx.checker.check_model(m, full_check=True)


def accuracy(path: Path, images: np.ndarray, labels: np.ndarray) -> float:
    session = ort_session(path, threads=1)
    logits = np.concatenate([session.run(None, {"input": images[i : i + 500]})[0] for i in range(0, len(images), 500)])
    return float((logits.argmax(1) == labels).mean())


def main() -> None:
    torch.manual_seed(0)
    ref = HERE / "fashion_bn_fp32.onnx"
    export(build(), ref)
    make_fp16(ref, HERE / "fashion_bn_fp16.onnx")
    repaired = to_fp16(onnx.load(str(ref)), [BN_NODE])
    onnx.checker.check_model(repaired, full_check=True)
    onnx.save(repaired, str(HERE / "fashion_bn_fp16_repaired.onnx"))
    data = np.load(FASHION / "data" / "test_subset.npz")
    images, labels = data["images"].astype(np.float32) / 255.0, data["labels"]
    results = {
        name: {"accuracy": accuracy(HERE / f"fashion_bn_{name}.onnx", images, labels)}
        for name in ("fp32", "fp16", "fp16_repaired")
    }
    (HERE / "metrics.json").write_text(json.dumps({"subset": len(labels), "results": results}, indent=2) + "\n")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
