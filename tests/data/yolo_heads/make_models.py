"""Make the YOLOv5- and YOLOv7-style exports the detection-layout tests use, the way those projects export them.

The network is the trained shapes detector of demo/shapes (``shapes_centernet.pt``, loaded unchanged into
demo/plugins' ``ShapesYoloRaw``: per heatmap cell a box centre, size and 3 class probabilities); only the head
that YOLO exporters put after the network is written here, in torch, as YOLOv5 and YOLOv7 write theirs:

- ``yolov5_head.onnx``: YOLOv5's raw ``Detect`` output ``[B, N, 5 + C]`` (cx, cy, w, h, objectness, then C class
  scores; YOLOv5's non_max_suppression scores a pair objectness x class score). Objectness is the cell's highest
  class probability and each class score that probability over it, so objectness x class score is the demo's class
  probability: decoded with the same NMS settings it gives the demo raw head's detections.
- ``yolov7_end2end.onnx``: YOLOv7's ``export.py --end2end`` with ONNX Runtime's NMS (its ``ONNX_ORT`` tail): the
  boxes turned to corners by a matrix product, each box's best class score, a class offset (``max_wh``) so that one
  ``NonMaxSuppression`` is class-wise, then ``Gather`` by the selected indices into one output ``[N, 7]``: batch
  index, x1, y1, x2, y2, class index, score. The NMS is an ``autograd.Function`` whose ``symbolic`` writes the ONNX
  op, as YOLOv7 does (its forward only gives the tracer a shape).

Both: ``torch.onnx.export`` with the TorchScript exporter (``dynamo=False``, as YOLOv5 and YOLOv7 export), opset 17,
input ``images`` [batch, 3, 128, 128] with a dynamic batch. Run from the repository root with this project's venv
(torch CPU)::

    python tests/data/yolo_heads/make_models.py
"""

from __future__ import annotations

import pathlib
import sys
import warnings

import torch

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[2]
sys.path.insert(0, str(ROOT / "demo" / "plugins"))
sys.path.insert(0, str(ROOT / "demo" / "shapes"))

import shapes_plugin_models as spm  # noqa: E402

MAX_WH = 4096  # YOLOv7's class offset: larger than any box coordinate


class YoloV5Head(torch.nn.Module):
    """The raw network's [B, 4 + C, N] as YOLOv5's Detect writes it: [B, N, 5 + C] with an objectness column."""

    def __init__(self, net: torch.nn.Module):
        super().__init__()
        self.net = net

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        raw = self.net(images).transpose(1, 2)  # [B, N, 4 + C]
        probs = raw[..., 4:]
        obj = probs.max(dim=2, keepdim=True).values.clamp(min=1e-6)
        return torch.cat([raw[..., :4], obj, probs / obj], dim=2)


class OrtNMS(torch.autograd.Function):
    """ONNX's NonMaxSuppression, written by `symbolic`; `forward` gives the tracer indices of the right type."""

    @staticmethod
    def forward(ctx, boxes, scores, max_out, iou, score):  # noqa: ANN001, ANN205
        n = min(int(max_out), boxes.shape[1])
        return torch.stack([torch.zeros(n, dtype=torch.int64), torch.zeros(n, dtype=torch.int64),
                            torch.arange(n, dtype=torch.int64)], 1)  # fmt: skip

    @staticmethod
    def symbolic(g, boxes, scores, max_out, iou, score):  # noqa: ANN001, ANN205
        return g.op("NonMaxSuppression", boxes, scores, max_out, iou, score)


class YoloV7End2EndORT(torch.nn.Module):
    """YOLOv7's end2end tail for ONNX Runtime on a YOLOv5-style raw head: [N, 7] rows."""

    def __init__(self, head: torch.nn.Module, max_obj: int = 100, iou: float = 0.5, score: float = 0.05):
        super().__init__()
        self.head = head
        self.max_obj = torch.tensor([max_obj])
        self.iou = torch.tensor([iou])
        self.score = torch.tensor([score])
        self.convert = torch.tensor([[1, 0, 1, 0], [0, 1, 0, 1], [-0.5, 0, 0.5, 0], [0, -0.5, 0, 0.5]])

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.head(images)
        boxes = x[:, :, :4] @ self.convert  # cx, cy, w, h -> x1, y1, x2, y2
        scores = x[:, :, 5:] * x[:, :, 4:5]
        best, category = scores.max(2, keepdim=True)
        shifted = boxes + category.float() * MAX_WH
        picked = OrtNMS.apply(shifted, best.transpose(1, 2).contiguous(), self.max_obj, self.iou, self.score)
        b, i = picked[:, 0], picked[:, 2]
        return torch.cat([b.unsqueeze(1).float(), boxes[b, i, :], category[b, i, :].float(), best[b, i, :]], 1)


def export(model: torch.nn.Module, path: pathlib.Path, output: str) -> None:
    model.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (torch.zeros(2, 3, 128, 128),), str(path), dynamo=False, opset_version=17,
            input_names=["images"], output_names=[output],
            dynamic_axes={"images": {0: "batch"}, output: {0: "batch" if output == "output0" else "detections"}},
        )  # fmt: skip


def main() -> None:
    net = spm.build_raw()
    net.load_state_dict(torch.load(ROOT / "demo" / "shapes" / "shapes_centernet.pt", weights_only=True))
    net.eval()
    v5 = YoloV5Head(net).eval()
    export(v5, HERE / "yolov5_head.onnx", "output0")
    export(YoloV7End2EndORT(v5), HERE / "yolov7_end2end.onnx", "output")
    print(f"torch {torch.__version__}: wrote yolov5_head.onnx, yolov7_end2end.onnx")


if __name__ == "__main__":
    main()
