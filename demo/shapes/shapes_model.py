"""A small CenterNet-style detector for the shapes demo (imports only torch).

Input  ``images``  float32 [N, 3, 128, 128], RGB pixels / 255 (no other normalisation).
Outputs (stride 4, a 32x32 grid for a 128x128 input):
  ``heatmap`` [N, 3, 32, 32]  per-class centre probabilities (sigmoid applied in the model),
                              channel k = COCO category id k + 1 (circle, square, triangle)
  ``wh``      [N, 2, 32, 32]  box width, height in grid cells (x 4 = input pixels)
  ``offset``  [N, 2, 32, 32]  sub-cell centre offset (x, y) in grid cells, ~[0, 1)

A box centred at input pixel (cx, cy) is encoded at cell (floor(cx/4), floor(cy/4));
see shapes_decode.decode for the inverse.

Backbone: 4 stride-2 stages (3x3 conv-BN-ReLU pairs, 16/32/64/128 channels),
a light top-down path (nearest upsample + 1x1 lateral, FPN-like) back to
stride 4 with 64 channels, and three heads (3x3 conv 64->48, ReLU, 1x1 conv).
"""

from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F

NUM_CLASSES = 3
STRIDE = 4
HEAT_BIAS_INIT = -2.19  # sigmoid(-2.19) ~ 0.1, as in CenterNet


def conv_bn_relu(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class Head(nn.Sequential):
    def __init__(self, cin: int, hidden: int, cout: int, bias_init: float | None = None) -> None:
        super().__init__(
            nn.Conv2d(cin, hidden, 3, 1, 1),
            nn.ReLU(inplace=True),
            nn.Conv2d(hidden, cout, 1),
        )
        if bias_init is not None:
            nn.init.constant_(self[2].bias, bias_init)


class ShapesCenterNet(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES, width: int = 64, head: int = 48) -> None:
        super().__init__()
        self.stage1 = nn.Sequential(conv_bn_relu(3, 16, 2), conv_bn_relu(16, 16))      # /2
        self.stage2 = nn.Sequential(conv_bn_relu(16, 32, 2), conv_bn_relu(32, 32))     # /4
        self.stage3 = nn.Sequential(conv_bn_relu(32, 64, 2), conv_bn_relu(64, 64))     # /8
        self.stage4 = nn.Sequential(conv_bn_relu(64, 128, 2), conv_bn_relu(128, 128))  # /16
        self.lat4 = nn.Conv2d(128, width, 1)
        self.lat3 = nn.Conv2d(64, width, 1)
        self.lat2 = nn.Conv2d(32, width, 1)
        self.smooth3 = conv_bn_relu(width, width)
        self.smooth2 = conv_bn_relu(width, width)
        self.heatmap = Head(width, head, num_classes, HEAT_BIAS_INIT)
        self.wh = Head(width, head, 2)
        self.offset = Head(width, head, 2)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        c2 = self.stage2(self.stage1(x))
        c3 = self.stage3(c2)
        c4 = self.stage4(c3)
        p3 = self.smooth3(self.lat3(c3) + F.interpolate(self.lat4(c4), scale_factor=2.0, mode="nearest"))
        p2 = self.smooth2(self.lat2(c2) + F.interpolate(p3, scale_factor=2.0, mode="nearest"))
        return p2

    def forward_logits(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(heatmap logits, wh, offset) -- used for training (numerically stable focal loss)."""
        f = self.features(x)
        return self.heatmap(f), self.wh(f), self.offset(f)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(heatmap probabilities, wh, offset)."""
        logits, wh, offset = self.forward_logits(images)
        return torch.sigmoid(logits), wh, offset


def build() -> ShapesCenterNet:
    """Factory used by trtverify and make_demo.py (untrained; load shapes_centernet.pt)."""
    return ShapesCenterNet()


OUTPUT_NAMES = ("heatmap", "wh", "offset")
INPUT_NAME = "images"
