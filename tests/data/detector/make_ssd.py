"""A tiny torchvision detector made as users make theirs: torchvision's SSD (its anchor generator, heads, box
coding and postprocessing with torchvision.ops.nms) on a small backbone, untrained (random weights: `init` reads
the graph, not the boxes), exported by `torch.onnx.export` as torchvision's detection docs show, which puts ONNX
NonMaxSuppression at the end. Outputs per image: boxes [N, 4], scores [N], labels [N].

    /work/tvenv/bin/python tests/data/detector/make_ssd.py   (torch + torchvision; the tests need neither)

The versions are written to PROVENANCE.txt beside the model.
"""

from pathlib import Path

import onnx
import torch
import torchvision
from torchvision.models.detection.anchor_utils import DefaultBoxGenerator
from torchvision.models.detection.ssd import SSD

HERE = Path(__file__).resolve().parent


class Backbone(torch.nn.Module):
    """Two feature maps (stride 8 and 16), as SSD's backbones give them."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(16, 16, 3, stride=2, padding=1), torch.nn.ReLU(),
        )  # fmt: skip
        self.b = torch.nn.Sequential(torch.nn.Conv2d(16, 16, 3, stride=2, padding=1), torch.nn.ReLU())

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        a = self.a(x)
        return {"0": a, "1": self.b(a)}


def main() -> None:
    torch.manual_seed(0)
    anchors = DefaultBoxGenerator([[2], [2]])
    model = SSD(Backbone(), anchors, (64, 64), num_classes=4, detections_per_img=20).eval()
    path = HERE / "ssd_tiny.onnx"
    torch.onnx.export(
        model,
        ([torch.rand(3, 64, 64)],),
        str(path),
        input_names=["images"],
        output_names=["boxes", "scores", "labels"],
        opset_version=17,
        dynamo=False,  # torchvision's detection models export with the TorchScript exporter (its docs and tests)
    )
    onnx.save(onnx.load(str(path)), str(path))
    (HERE / "PROVENANCE.txt").write_text(
        "ssd_tiny.onnx: made by tests/data/detector/make_ssd.py\n"
        f"torch {torch.__version__}, torchvision {torchvision.__version__}, onnx {onnx.__version__}\n"
        "command: /work/tvenv/bin/python tests/data/detector/make_ssd.py\n",
        encoding="utf-8",
    )


if __name__ == "__main__":
    main()
