"""How the ModelOpt consoles here were made (2026-11-27, ModelOpt 0.47.0, onnxruntime 1.32.0, torch 2.13.0, CPU):
a tiny Conv-ReLU-Conv-Gemm model exported with torch.onnx.export (TorchScript exporter, opset 17), 8 random calibration
rows, then ModelOpt's documented commands with their output captured verbatim (2>&1); only the shell's exit-code
line was left out. Run from an empty folder: python make_modelopt_logs.py (needs torch, onnx, nvidia-modelopt)."""

import subprocess
import sys

import numpy as np
import torch


class M(torch.nn.Module):
    def __init__(s):
        super().__init__()
        s.c = torch.nn.Conv2d(3, 8, 3, padding=1)
        s.r = torch.nn.ReLU()
        s.c2 = torch.nn.Conv2d(8, 4, 3)
        s.fc = torch.nn.Linear(4, 2)

    def forward(s, x):
        return s.fc(s.c2(s.r(s.c(x))).mean((2, 3)))


torch.manual_seed(0)
torch.onnx.export(M().eval(), (torch.randn(1, 3, 16, 16),), "tiny.onnx", input_names=["x"], output_names=["y"],
                  dynamo=False, opset_version=17)  # fmt: skip
np.savez("calib.npz", x=np.random.RandomState(0).randn(8, 3, 16, 16).astype(np.float32))
Q = [sys.executable, "-m", "modelopt.onnx.quantization", "--onnx_path", "tiny.onnx", "--quantize_mode", "int8",
     "--calibration_eps", "cpu", "--calibration_data_path", "calib.npz"]  # fmt: skip
A = [sys.executable, "-m", "modelopt.onnx.autocast", "--onnx_path", "tiny.onnx", "--providers", "cpu"]
RUNS = {
    "modelopt_int8_entropy.log": Q + ["--output_path", "tiny.int8.onnx"],
    "modelopt_int8_max_exclude.log": Q[:7]
    + ["--calibration_method", "max", "--nodes_to_exclude", "/c2/Conv"]
    + Q[7:]
    + ["--output_path", "tiny.int8b.onnx"],
    "modelopt_autocast_fp16.log": A
    + ["--output_path", "tiny.fp16.onnx", "--low_precision_type", "fp16", "--keep_io_types"],  # fmt: skip
    "modelopt_autocast_bf16_exclude.log": A
    + [
        "--output_path",
        "tiny.bf16.onnx",
        "--low_precision_type",
        "bf16",
        "--nodes_to_exclude",
        "/c2/Conv",
    ],  # fmt: skip
}
for name, cmd in RUNS.items():
    with open(name, "w") as out:
        subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, check=True)
