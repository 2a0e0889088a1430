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
  op, as YOLOv7 does (its forward here computes what the op does, so that ``build_v7`` is a PyTorch model whose
  detections the export's are compared with; YOLOv7's only gives the tracer a shape).

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
    """ONNX's NonMaxSuppression, written by `symbolic`. `forward` computes what the op computes (YOLOv7's only gives
    the tracer a shape), so that PyTorch's detections are the truth: per image and class, boxes of score above
    the threshold, best first, each dropping the later ones of IoU above the threshold, `max_out` at most."""

    @staticmethod
    def forward(ctx, boxes, scores, max_out, iou, score):  # noqa: ANN001, ANN205
        picked = []
        for b in range(scores.shape[0]):
            for c in range(scores.shape[1]):
                s = scores[b, c]
                order = [int(i) for i in torch.argsort(-s, stable=True) if s[i] > score]
                kept: list[int] = []
                for i in order:
                    if len(kept) == int(max_out):
                        break
                    if all(_iou(boxes[b, i], boxes[b, j]) <= iou for j in kept):
                        kept.append(i)
                picked += [(b, c, i) for i in kept]
        return torch.tensor(picked, dtype=torch.int64).reshape(-1, 3)

    @staticmethod
    def symbolic(g, boxes, scores, max_out, iou, score):  # noqa: ANN001, ANN205
        return g.op("NonMaxSuppression", boxes, scores, max_out, iou, score)


def _iou(a: torch.Tensor, b: torch.Tensor) -> float:
    x1, y1 = torch.minimum(a[0], a[2]), torch.minimum(a[1], a[3])
    x2, y2 = torch.maximum(a[0], a[2]), torch.maximum(a[1], a[3])
    u1, v1 = torch.minimum(b[0], b[2]), torch.minimum(b[1], b[3])
    u2, v2 = torch.maximum(b[0], b[2]), torch.maximum(b[1], b[3])
    inter = (torch.minimum(x2, u2) - torch.maximum(x1, u1)).clamp(min=0) * (
        torch.minimum(y2, v2) - torch.maximum(y1, v1)
    ).clamp(min=0)
    union = (x2 - x1) * (y2 - y1) + (u2 - u1) * (v2 - v1) - inter
    return float(inter / union) if union > 0 else 0.0


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


def build_v7() -> YoloV7End2EndORT:
    """The YOLOv7-style model with the trained weights: a factory for trtverify's models.pytorch."""
    net = spm.build_raw()
    net.load_state_dict(torch.load(ROOT / "demo" / "shapes" / "shapes_centernet.pt", weights_only=True))
    return YoloV7End2EndORT(YoloV5Head(net.eval())).eval()


def main() -> None:
    v5 = build_v7().head
    export(v5, HERE / "yolov5_head.onnx", "output0")
    export(build_v7(), HERE / "yolov7_end2end.onnx", "output")
    print(f"torch {torch.__version__}: wrote yolov5_head.onnx, yolov7_end2end.onnx")


if __name__ == "__main__":
    main()
