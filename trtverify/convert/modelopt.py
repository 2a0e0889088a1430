"""Candidates made by NVIDIA ModelOpt (the `[modelopt]` extra), the TensorRT 11 way: AutoCast for FP16/BF16,
ONNX quantization for INT8/FP8/INT4 (its rest FP16, ModelOpt's default).

ModelOpt runs in a child process (`python -m modelopt.onnx.autocast | .quantization`, the documented command
lines): it logs to stdout and its calibrator prints there, which would mix into trtverify's verdict lines. It gets
a private copy of the model (its quantizer writes shape inference back over its --onnx_path) and the CPU
(`--providers cpu`, `--calibration_eps cpu`); nothing else is set, so what it makes is what its defaults make.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from trtverify.convert.weights import constants_to_initializers, has_constant_weights
from trtverify.util import native
from trtverify.util.errors import MissingDependency, UsageError

PRECISIONS = ("fp16", "bf16", "int8", "fp8", "int4")
INSTALL = "pip install 'trtverify[modelopt]'   (nvidia-modelopt and the ONNX packages it needs; torch first)"


def available() -> bool:
    try:
        return importlib.util.find_spec("modelopt") is not None
    except (ImportError, ValueError):  # a broken install, or blocked in sys.modules
        return False


# trtverify's calibration method -> ModelOpt's --calibration_method (int8, fp8)
def exact_patterns(names: Sequence[str]) -> list[str]:
    """Node names as ModelOpt `--nodes_to_exclude` patterns for exactly those nodes: ModelOpt matches each with
    re.match, so a bare name would also exclude every node whose name starts with it."""
    import re

    return [f"^{re.escape(n)}$" for n in names]


METHODS = {"minmax": "max", "entropy": "entropy"}


def _method(method: str | None, precision: str) -> str | None:
    """ModelOpt's name of `method` (None: its default), or UsageError naming what it has."""
    if method in (None, "auto"):
        return None
    if precision not in ("int8", "fp8"):
        raise UsageError(f"--method {method}: ModelOpt's {precision} lowering takes no calibration method")
    if method not in METHODS:
        raise UsageError(
            f"--method {method}: ModelOpt calibrates {precision} with {' or '.join(METHODS)} (auto: its default, "
            "entropy); percentile and mse are --tool trtverify's (percentile) or nobody's (mse)"
        )
    return METHODS[method]


def make(
    reference: Path,
    precision: str,
    out: Path,
    calibration: Sequence[dict[str, np.ndarray]] = (),
    exclude: Sequence[str] = (),
    timeout_s: float = 1800,
    progress: Callable[[str], None] | None = None,
    method: str | None = None,
) -> Path:
    """ModelOpt's `precision` lowering of `reference`, written to `out`. `exclude`: nodes AutoCast keeps in FP32
    (exact names), or that quantization leaves without Q/DQ. `method` (int8, fp8): minmax (its `max`) or entropy;
    None or auto: its default (entropy)."""
    if precision not in PRECISIONS:
        raise UsageError(f"ModelOpt lowers to {', '.join(PRECISIONS)}, not {precision}")
    calibration_method = _method(method, precision)  # a method it lacks: exit 2 before anything runs
    if not available():
        raise MissingDependency(
            "making candidates with ModelOpt needs nvidia-modelopt, which is not installed", INSTALL
        )
    if precision in ("int8", "fp8", "int4") and not calibration:
        raise UsageError(f"ModelOpt's {precision} quantization needs calibration rows (--calibration X.npz)")

    with tempfile.TemporaryDirectory(prefix="trtverify-modelopt-") as tmp:
        work = Path(tmp)
        copy = work / "model.onnx"
        if precision in ("int8", "fp8", "int4") and has_constant_weights(reference):
            # quantized per channel only as initializers (convert/weights.py): ModelOpt gave PP-OCRv4's recognizer,
            # whose weights are Constant nodes, one scale per weight
            import onnx

            model = onnx.load(str(reference))
            constants_to_initializers(model)
            onnx.save(model, str(copy))
            del model
        else:
            shutil.copy(reference, copy)
        cmd = [sys.executable, "-m"]
        data: list[str] = []
        if calibration:
            names = list(calibration[0])
            np.savez(work / "calib.npz", **{n: np.concatenate([np.asarray(f[n]) for f in calibration]) for n in names})
        if precision in ("fp16", "bf16"):
            cmd += [
                "modelopt.onnx.autocast",
                "--low_precision_type",
                precision,
                "--keep_io_types",
                "--providers",
                "cpu",
            ]
            data = ["--calibration_data", str(work / "calib.npz")] if calibration else []
            if exclude:
                cmd += ["--nodes_to_exclude", *exact_patterns(exclude)]
        else:
            cmd += ["modelopt.onnx.quantization", "--quantize_mode", precision, "--calibration_eps", "cpu"]
            if calibration_method:
                cmd += ["--calibration_method", calibration_method]
            data = ["--calibration_data_path", str(work / "calib.npz")]
            if exclude:
                cmd += ["--nodes_to_exclude", *exclude]
        cmd += ["--onnx_path", str(copy), "--output_path", str(work / "out.onnx"), *data]
        code, lines = _run(cmd, work, timeout_s, progress)
        if code != 0 or not (work / "out.onnx").is_file():
            tail = "\n".join(lines[-8:])
            ended = f"exit {code}"
            if code < 0:  # a native crash in ModelOpt's process (ONNX Runtime, its calibration)
                name = native.signal_name(-code)
                ended = f"died of {name} ({native.SIGNALS.get(name, 'a native crash')})"
            raise UsageError(f"ModelOpt failed ({' '.join(cmd[2:5])}, {ended}):\n{tail}")
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(work / "out.onnx"), out)
    return out


def _run(cmd: list[str], cwd: Path, timeout_s: float, progress: Callable[[str], None] | None) -> tuple[int, list[str]]:
    """Run ModelOpt's command, each line of its log handed to `progress` as it comes (ModelOpt calibrating shows
    nothing else for minutes); killed past `timeout_s`, naming its last line. (exit code, its output's lines)."""
    import threading

    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
    lines: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip()
            if line:
                lines.append(line)
                if progress is not None:
                    progress(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        last = lines[-1] if lines else "nothing"
        raise UsageError(
            f"ModelOpt did not finish within {timeout_s:.0f} s ({' '.join(cmd[2:5])}; its last line: {last}): "
            "fewer or cleaner calibration rows (trtverify convert names outlier rows), --method minmax, or a larger "
            "--timeout"
        ) from None
    reader.join(timeout=5)
    return code, lines
