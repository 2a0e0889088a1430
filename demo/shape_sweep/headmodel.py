"""The shape-sweep demo's model: a small per-pixel classifier head whose forward flattens the spatial dimensions.

`build()` is the suite's PyTorch factory (`models.pytorch.factory: "headmodel:build"`); `Baked` is the same
module written as export scripts often are, reading the batch as a Python int (`int(x.shape[0])`): tracing then
records the traced batch as a constant in the Reshape, and the ONNX model is right at that batch only.
"""

from __future__ import annotations

import torch


class Head(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 3, 3, padding=1)

    def flat(self, y: torch.Tensor) -> torch.Tensor:
        return y.reshape(y.shape[0], 3, -1)  # traced as Shape -> Gather: right at every batch

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.flat(torch.relu(self.conv(x))), dim=-1)


class Baked(Head):
    def flat(self, y: torch.Tensor) -> torch.Tensor:
        n = int(y.shape[0])  # a Python int: tracing bakes the traced batch into the Reshape
        return y.reshape(n, 3, -1)


def build() -> torch.nn.Module:
    return Head().eval()
