"""A tiny CNN classifier for tests: real PyTorch, real ONNX, small enough to commit."""

import torch


class TinyNet(torch.nn.Module):
    def __init__(self, classes: int = 5):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(4, 8, 3, padding=1, stride=2)
        self.fc = torch.nn.Linear(8 * 4 * 4, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        return self.fc(x.flatten(1))


class TwoHeads(TinyNet):
    """Returns (logits, features): for output naming and pairing tests."""

    def forward(self, x: torch.Tensor):  # type: ignore[override]
        f = torch.relu(self.conv2(torch.relu(self.conv1(x)))).flatten(1)
        return self.fc(f), f


def build(classes: int = 5) -> torch.nn.Module:
    torch.manual_seed(0)
    return TinyNet(classes)


def build_two_heads() -> torch.nn.Module:
    torch.manual_seed(0)
    return TwoHeads()
