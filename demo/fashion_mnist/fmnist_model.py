"""Small CNN for the trtverify Fashion-MNIST demo.

Input:  float32 tensor [N, 1, 28, 28] with pixel values scaled to [0, 1]
        (uint8 image / 255). No other normalisation is applied, neither
        outside nor inside the model (the BatchNorm after the first
        convolution takes care of input scale).
Output: float32 logits [N, 10] for the Fashion-MNIST classes 0..9.

Only plain Conv2d / BatchNorm2d / ReLU / MaxPool2d / Flatten / Linear layers
are used, so ONNX export (BatchNorm is folded into Conv in eval mode) and
TensorRT / INT8 QDQ conversion are straightforward.

Importing this module has no side effects: nothing is trained or loaded.
"""

from collections import OrderedDict

import torch
from torch import nn

NUM_CLASSES = 10


class ConvBNReLU(nn.Sequential):
    """3x3 convolution (no bias) -> BatchNorm -> ReLU, spatial size preserved."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(
            OrderedDict(
                conv=nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False),
                bn=nn.BatchNorm2d(c_out),
                relu=nn.ReLU(inplace=True),
            )
        )


class FashionCNN(nn.Module):
    """4 conv-bn-relu blocks with 3 max-pools, then a 2-layer MLP head.

    93,282 parameters (``sum(p.numel() for p in model.parameters())``,
    BatchNorm affine parameters included, running statistics not).
    """

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.features = nn.Sequential(
            OrderedDict(
                block1=ConvBNReLU(1, 16),   # 16 x 28 x 28
                pool1=nn.MaxPool2d(2),      # 16 x 14 x 14
                block2=ConvBNReLU(16, 32),  # 32 x 14 x 14
                pool2=nn.MaxPool2d(2),      # 32 x 7 x 7
                block3=ConvBNReLU(32, 64),  # 64 x 7 x 7
                block4=ConvBNReLU(64, 64),  # 64 x 7 x 7
                pool3=nn.MaxPool2d(2),      # 64 x 3 x 3
            )
        )
        self.classifier = nn.Sequential(
            OrderedDict(
                flatten=nn.Flatten(1),      # 576
                fc1=nn.Linear(64 * 3 * 3, 56),
                relu=nn.ReLU(inplace=True),
                fc2=nn.Linear(56, num_classes),
            )
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def build() -> nn.Module:
    """Return a freshly initialised FashionCNN (no weights are loaded here)."""
    return FashionCNN()
