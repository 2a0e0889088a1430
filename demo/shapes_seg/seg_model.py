"""A tiny U-Net-like semantic segmentation net for the shapes demo (imports only torch).

Input  ``images`` float32 [N, 3, H, W], RGB pixels / 255 (no other normalisation);
       H and W must be multiples of 8 (the demo uses 128x128).
Output ``logits`` float32 [N, 4, H, W], full resolution, unnormalised class scores;
       channel = class id: 0 background, 1 circle, 2 square, 3 triangle
       (argmax over channels gives the predicted label map).

Encoder: a 3x3 conv-BN-ReLU at full resolution, then three stride-2 levels of two
3x3 conv-BN-ReLU each (8 -> 16 -> 32 -> 48 channels, down to 1/8 resolution).
Decoder (three levels back to full resolution): 1x1 projection of the deeper
features, nearest 2x upsampling, addition of the encoder skip, 3x3 conv-BN-ReLU.
Head: 1x1 conv 8 -> 4.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

NUM_CLASSES = 4  # background, circle, square, triangle
CLASS_NAMES = ("background", "circle", "square", "triangle")
INPUT_NAME = "images"
OUTPUT_NAME = "logits"


def conv_bn_relu(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
        nn.BatchNorm2d(cout),
        nn.ReLU(inplace=True),
    )


class Up(nn.Module):
    """1x1 projection of the deeper map, nearest 2x upsampling, + skip, 3x3 conv-BN-ReLU."""

    def __init__(self, cdeep: int, cskip: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(cdeep, cskip, 1)
        self.fuse = conv_bn_relu(cskip, cskip)

    def forward(self, deep: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
        return self.fuse(skip + F.interpolate(self.proj(deep), scale_factor=2.0, mode="nearest"))


class ShapesUNet(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES, ch: tuple[int, int, int, int] = (8, 16, 32, 48)) -> None:
        super().__init__()
        c0, c1, c2, c3 = ch
        self.enc0 = conv_bn_relu(3, c0)  # 1/1
        self.enc1 = nn.Sequential(conv_bn_relu(c0, c1, 2), conv_bn_relu(c1, c1))  # 1/2
        self.enc2 = nn.Sequential(conv_bn_relu(c1, c2, 2), conv_bn_relu(c2, c2))  # 1/4
        self.enc3 = nn.Sequential(conv_bn_relu(c2, c3, 2), conv_bn_relu(c3, c3))  # 1/8
        self.up2 = Up(c3, c2)
        self.up1 = Up(c2, c1)
        self.up0 = Up(c1, c0)
        self.head = nn.Conv2d(c0, num_classes, 1)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        e0 = self.enc0(images)
        e1 = self.enc1(e0)
        e2 = self.enc2(e1)
        e3 = self.enc3(e2)
        d2 = self.up2(e3, e2)
        d1 = self.up1(d2, e1)
        d0 = self.up0(d1, e0)
        return self.head(d0)


def build() -> ShapesUNet:
    """Factory used by trtverify and make_demo.py (untrained; load shapes_seg.pt)."""
    return ShapesUNet()
