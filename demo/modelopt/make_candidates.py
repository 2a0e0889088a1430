"""Regenerate the ModelOpt candidates of this folder: what TensorRT 11 users build, made on a CPU.

    pip install "nvidia-modelopt==0.47.0" onnx-graphsurgeon lief cppimport onnxslim ml_dtypes onnxscript polygraphy
    python demo/modelopt/make_candidates.py            # about a minute; writes demo/modelopt/*.onnx

(Install torch first where it would otherwise pull a CUDA build: `pip install torch==2.13.0`, a CPU build here.
`nvidia-modelopt[onnx]` pulls onnxruntime-gpu and cupy: use the plain package and the list above.) The committed
files were made with nvidia-modelopt 0.47.0, onnx 1.23.2 and onnxruntime 1.32.0: ModelOpt's INT8 output depends on
the onnxruntime version it calibrates with (1.24 truncates FP16 QuantizeLinear, 1.32 rounds), so pin both.

Every command runs on the CPU (`--providers cpu` for AutoCast, `--calibration_eps cpu` for quantization) with
ModelOpt's defaults otherwise, on a private copy of the FP32 model: ModelOpt's quantizer writes shape inference
back over its --onnx_path. Calibration: the first 64 test images of the Fashion-MNIST demo, scaled to [0, 1].
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
BN = REPO / "demo" / "fp16_repair" / "fashion_bn_fp32.onnx"  # the CNN + a BatchNorm whose running_var is 1e8
CNN = REPO / "demo" / "fashion_mnist" / "fashion_cnn_fp32.onnx"
AUTOCAST = ["-m", "modelopt.onnx.autocast", "--keep_io_types", "--providers", "cpu"]
QUANTIZE = ["-m", "modelopt.onnx.quantization", "--calibration_eps", "cpu"]

# output name: (FP32 model, the ModelOpt command's own arguments)
CANDIDATES = {
    # INT8 Q/DQ, the rest FP16 (high_precision_dtype's default): the BatchNorm becomes FP16, its variance clamped
    "fashion_bn_int8.onnx": (BN, [*QUANTIZE, "--quantize_mode", "int8"]),
    # FP8 E4M3 Q/DQ on the wide convolutions, the rest FP16: broken the same way
    "fashion_bn_fp8.onnx": (BN, [*QUANTIZE, "--quantize_mode", "fp8"]),
    # AutoCast FP16: it keeps the BatchNorm in FP32 itself (init_max), a correct candidate
    "fashion_bn_autocast_fp16.onnx": (BN, [*AUTOCAST, "--low_precision_type", "fp16"]),
    # AutoCast BF16 (opset 22): ONNX Runtime's CPU provider has no BF16 kernels; trtverify emulates it
    "fashion_bn_autocast_bf16.onnx": (BN, [*AUTOCAST, "--low_precision_type", "bf16"]),
    # INT4 weight-only blocks on the Gemms, round to nearest (the default awq_clip writes scales for the wrong axis
    # in 0.47.0, which ONNX Runtime refuses), the rest FP32
    "fashion_cnn_int4.onnx": (CNN, [*QUANTIZE, "--quantize_mode", "int4", "--calibration_method", "rtn_dq"]),
}


def main() -> int:
    images = np.load(REPO / "demo" / "fashion_mnist" / "data" / "test_subset.npz", allow_pickle=False)["images"]
    with tempfile.TemporaryDirectory(prefix="modelopt-") as tmp:
        work = Path(tmp)
        calib = work / "calib.npz"
        np.savez(calib, input=images[:64].astype(np.float32) / np.float32(255.0))
        for name, (model, args) in CANDIDATES.items():
            copy = work / name.replace(".onnx", "_fp32.onnx")
            shutil.copy(model, copy)
            flag = "--calibration_data" if "autocast" in args[1] else "--calibration_data_path"
            data = [flag, str(calib)]
            cmd = [sys.executable, *args, "--onnx_path", str(copy), "--output_path", str(HERE / name), *data]
            t0 = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True)
            if done.returncode != 0:
                print(done.stdout[-2000:], done.stderr[-4000:], sep="\n", file=sys.stderr)
                print(f"failed: {name}: {' '.join(cmd)}", file=sys.stderr)
                return 1
            print(f"{name}: {time.perf_counter() - t0:.1f} s, {(HERE / name).stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
