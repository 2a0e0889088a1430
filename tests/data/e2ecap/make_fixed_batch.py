"""Make fashion_cnn_b4.onnx: the Fashion-MNIST demo CNN (demo/fashion_mnist, its trained weights) exported with
torch.onnx.export's defaults at a dummy batch of 4, so its batch axis is fixed at 4 (what the exporter does unless
dynamic axes are asked for): the fixed-batch model of tests/stages/e2e/test_e2e_captured.py, whose last validation batch
the capture kit pads.

Run from the repository root: /work/main/.venv/bin/python tests/data/e2ecap/make_fixed_batch.py
(made with torch 2.13.0 CPU, onnx in /work/main/.venv; 2026-11-28).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "demo" / "fashion_mnist"))
import fmnist_model  # noqa: E402

model = fmnist_model.build()
model.load_state_dict(torch.load(ROOT / "demo" / "fashion_mnist" / "fashion_cnn.pt", weights_only=True))
model.eval()
torch.onnx.export(model, (torch.zeros(4, 1, 28, 28),), Path(__file__).with_name("fashion_cnn_b4.onnx"),
                  input_names=["input"], output_names=["logits"])  # fmt: skip
