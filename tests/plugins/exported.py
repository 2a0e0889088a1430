"""Small models with plugin nodes, exported the way users' exporters write them: `torch.onnx.export` (TorchScript
exporter) of a module whose plugin is a `torch.autograd.Function` with a `symbolic` that emits the node (as YOLO
exporters emit EfficientNMS_TRT). The forward computes what the plugin does, so PyTorch's outputs are the truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np

HOOKS = '''
import numpy as np


def scale_shift(x, bias=None, scale=1.0):
    """the user's reference of ScaleShift_TRT: x * scale + bias (per channel)"""
    return (x * np.float32(scale) + bias.reshape(1, -1, 1, 1)).astype(x.dtype)


def wrong_count(x, bias=None, scale=1.0):
    return x, x
'''


def export_scale_shift(folder: Path, fp16: bool = True) -> tuple[Path, Path | None]:
    """conv -> relu -> ScaleShift_TRT (domain 'trt.plugins', a user plugin mid-graph) -> conv -> relu, plus a
    branch (sigmoid of the first relu) that does not depend on the plugin. Writes model.onnx (and an FP16 candidate
    from ONNX Runtime's float16 converter, I/O kept FP32) and hooks.py."""
    import torch

    class ScaleShift(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, bias):  # noqa: ANN001, ANN205
            return x * 0.5 + bias.reshape(1, -1, 1, 1)

        @staticmethod
        def symbolic(g, x, bias):  # noqa: ANN001, ANN205
            return g.op("trt.plugins::ScaleShift_TRT", x, bias, scale_f=0.5)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = torch.nn.Conv2d(8, 8, 3, padding=1)
            self.bias = torch.nn.Parameter(torch.linspace(-0.5, 0.5, 8))

        def forward(self, x):  # noqa: ANN001, ANN201
            r = torch.relu(self.c1(x))
            y = torch.relu(self.c2(ScaleShift.apply(r, self.bias)))
            return y, torch.sigmoid(r)

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    torch.onnx.export(
        Net().eval(),
        (torch.rand(1, 3, 16, 16),),
        str(path),
        input_names=["x"],
        output_names=["y", "gate"],
        opset_version=17,
        dynamo=False,
    )
    (folder / "hooks.py").write_text(HOOKS)
    fp16_path = None
    if fp16:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        fp16_path = folder / "model_fp16.onnx"
        onnx.save(convert_float_to_float16(onnx.load(str(path)), keep_io_types=True), str(fp16_path))
    return path, fp16_path


def sample(seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).random((1, 3, 16, 16), dtype=np.float32)}
