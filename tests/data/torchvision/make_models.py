"""Make the torchvision detector exports the tests use, the way users make them.

torchvision's own model builders with their defaults (random weights: nothing is downloaded; the numbers of a
trained model are not what these tests check, the graph torchvision writes is), exported by
``torch.onnx.export`` with the TorchScript exporter (``dynamo=False``), opset 17, as torchvision's own ONNX tests
and most deployment guides do. Only the size is cut to keep the committed files small: SSDlite's backbone width
0.25 (``width_mult``), 4 classes and 160x160 images (torchvision resizes them to 320 inside the graph).

Run with a torch + torchvision pair whose C++ ops load (not this project's CPU torch beside PyPI's torchvision;
on x86_64: ``pip install torch==2.14.1 torchvision==0.29.1``)::

    python tests/data/torchvision/make_models.py

It writes ``ssdlite.onnx`` (boxes [K,4], scores [K], labels [K]: torchvision's detection output, with its
If/Loop subgraphs) and ``inputs.npz`` (2 rows of images in [0, 1]) beside this file.
"""

from __future__ import annotations

import pathlib

import numpy as np
import torch
import torchvision
from torchvision.models.detection import ssdlite320_mobilenet_v3_large

HERE = pathlib.Path(__file__).resolve().parent
SIZE = 160


class Single(torch.nn.Module):
    """torchvision detectors take a list of images and return a list of dicts: one image in, three tensors out."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, image: torch.Tensor):
        out = self.model([image])[0]
        return out["boxes"], out["scores"], out["labels"]


def main() -> None:
    torch.manual_seed(0)
    model = ssdlite320_mobilenet_v3_large(
        weights=None,
        weights_backbone=None,
        num_classes=4,
        width_mult=0.25,
        score_thresh=0.001,
        detections_per_img=50,
    ).eval()
    # random weights with torchvision's init shrink activations to ~1e-20 by the last feature map, so every class
    # scores 1/4 (ties everywhere). Set the BatchNorm statistics from a few random batches, as a trained model's
    # are set by its data, and widen the class logits so scores spread over (0, 1) as a trained detector's do:
    # torchvision's graph is unchanged, only the numbers move.
    for module in model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.momentum = None  # a plain average over the batches below
    model.train()
    with torch.no_grad():
        for _ in range(4):
            model.head(list(model.backbone(torch.rand(8, 3, 320, 320)).values()))
        for block in model.head.classification_head.module_list:
            block[-1].weight.mul_(8.0)
    model.eval()
    image = torch.rand(3, SIZE, SIZE)
    wrapped = Single(model).eval()
    with torch.no_grad():
        boxes, scores, labels = wrapped(image)
    torch.onnx.export(
        wrapped,
        (image,),
        HERE / "ssdlite.onnx",
        opset_version=17,
        dynamo=False,
        input_names=["image"],
        output_names=["boxes", "scores", "labels"],
    )
    rng = np.random.default_rng(0)
    np.savez(HERE / "inputs.npz", image=np.stack([image.numpy(), rng.random((3, SIZE, SIZE), dtype=np.float32)]))
    print(
        f"torch {torch.__version__}, torchvision {torchvision.__version__}: {len(boxes)} boxes, "
        f"top score {float(scores.max()) if len(scores) else 0:.3f}"
    )


if __name__ == "__main__":
    main()
