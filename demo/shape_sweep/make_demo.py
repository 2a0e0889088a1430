#!/usr/bin/env python3
"""Build the shape-sweep demo: one small model exported twice with a dynamic batch, once right and once with the
traced batch baked into a Reshape (`int(x.shape[0])` in the forward), the classic "works at batch 1, wrong at
batch 8" export.

Writes, beside this file:
  head.pt       the weights (seeded; both exports are of these weights)
  fixed.onnx    torch.onnx.export of `Head` (opset 17, TorchScript exporter, dynamic batch): right at every batch
  baked.onnx    the same export of `Baked`: its Reshape holds the traced batch, 1, as a constant

Usage: python demo/shape_sweep/make_demo.py   (CPU, a second; deterministic)
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from headmodel import Baked, Head  # noqa: E402


def export(model: torch.nn.Module, path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TracerWarning about int(x.shape[0]) is the bug this demo shows
        torch.onnx.export(
            model, (torch.rand(1, 1, 16, 16),), str(path), input_names=["x"], output_names=["probs"],
            dynamic_axes={"x": {0: "batch"}, "probs": {0: "batch"}}, opset_version=17, dynamo=False,
        )  # fmt: skip


def main() -> None:
    torch.manual_seed(0)
    head = Head().eval()
    torch.save(head.state_dict(), HERE / "head.pt")
    baked = Baked().eval()
    baked.load_state_dict(head.state_dict())
    export(head, HERE / "fixed.onnx")
    export(baked, HERE / "baked.onnx")
    print(f"wrote {HERE / 'head.pt'}, {HERE / 'fixed.onnx'}, {HERE / 'baked.onnx'}")


if __name__ == "__main__":
    main()
