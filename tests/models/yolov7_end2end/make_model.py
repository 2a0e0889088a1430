"""Make the YOLOv7-style end-to-end detector of this folder (yolo_end2end.py) as a YOLOv7 user exports it:
seeded random weights saved as a state_dict (weights.pt), and `torch.onnx.export` of `End2End` with the TorchScript
exporter (`dynamo=False`, which autograd.Function's `symbolic` needs), opset 12 as YOLOv7's export.py uses, one
fixed input shape, output names num_dets, det_boxes, det_scores, det_classes (model.onnx).

    PYTHONPATH=. /work/main/.venv/bin/python tests/models/yolov7_end2end/make_model.py

Writes PROVENANCE.txt beside the files (versions and command).
"""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from yolo_end2end import SIZE, build  # noqa: E402

OUTPUTS = ["num_dets", "det_boxes", "det_scores", "det_classes"]


def main() -> None:
    torch.manual_seed(7)
    model = build().eval()
    torch.save(model.state_dict(), HERE / "weights.pt")
    torch.onnx.export(
        model,
        (torch.rand(1, 3, SIZE, SIZE),),
        str(HERE / "model.onnx"),
        opset_version=12,
        input_names=["images"],
        output_names=OUTPUTS,
        dynamo=False,
    )
    (HERE / "PROVENANCE.txt").write_text(
        "model.onnx, weights.pt: made by tests/models/yolov7_end2end/make_model.py\n"
        f"command: PYTHONPATH=. python tests/models/yolov7_end2end/make_model.py\n"
        f"torch {torch.__version__}, python {platform.python_version()}, seed 7, input [1, 3, {SIZE}, {SIZE}]\n"
        "the End2End / EfficientNMSStandIn pattern follows YOLOv7's models/experimental.py (End2End, ONNX_TRT, "
        "TRT_NMS; github.com/WongKinYiu/yolov7), written anew\n"
    )


if __name__ == "__main__":
    main()
