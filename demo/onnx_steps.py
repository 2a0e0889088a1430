"""The steps every demo script (``demo/*/make_demo.py``) shares: seeding, and turning an exported
FP32 ONNX model into the FP16 and INT8 QDQ candidates with the real tools' converters.

The scripts put this folder on ``sys.path`` and import it; it is not part of the trtverify package.
"""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np


def seed_everything(seed: int, threads: int) -> None:
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)


def rename_initializers(m, rename: dict[str, str]) -> None:
    """Rename initializers (and every node input that reads them) by `rename`."""
    for init in m.graph.initializer:
        init.name = rename.get(init.name, init.name)
    for node in m.graph.node:
        for i, name in enumerate(node.input):
            if name in rename:
                node.input[i] = rename[name]


def toposort_graph(graph) -> None:
    """Reorder graph.node topologically (stable: keeps the original order where possible)."""
    available = {i.name for i in graph.input} | {i.name for i in graph.initializer} | {""}
    pending = list(graph.node)
    ordered = []
    while pending:
        for k, node in enumerate(pending):
            if all(name in available for name in node.input):
                ordered.append(node)
                available.update(node.output)
                del pending[k]
                break
        else:
            raise RuntimeError("graph has a cycle or a dangling input")
    nodes = [type(n)() for n in ordered]
    for dst, src in zip(nodes, ordered):
        dst.CopyFrom(src)
    del graph.node[:]
    graph.node.extend(nodes)


def make_fp16(fp32_path: Path, out_path: Path) -> None:
    """FP16 weights and activations, float32 I/O (`onnxruntime.transformers.float16`)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    m = convert_float_to_float16(onnx.load(str(fp32_path)), keep_io_types=True)
    toposort_graph(m.graph)  # the converter appends its input/output Casts at the end
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, str(out_path))


def make_int8_qdq(
    fp32_path: Path,
    out_path: Path,
    calib: np.ndarray,
    *,
    input_name: str,
    extra_options: dict,
    op_types: list[str] | None = None,
) -> None:
    """Static INT8 QDQ quantization (ONNX Runtime's quantize_static): symmetric QInt8 activations,
    per-channel QInt8 weights, MinMax calibration on `calib` (fed to `input_name` 32 at a time).

    op_types: the op types whose inputs get Q/DQ (None: quantize_static's default, every op it can).
    quant_pre_process is not run: the exported graphs already have BatchNorm folded and complete
    shape information, and pre-processing gave identical numbers while adding about 8 unused opset
    domains (com.microsoft, ai.onnx.ml, ...) to the model.
    """
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self, data: np.ndarray, batch: int = 32) -> None:
            self._batches = [data[i : i + batch] for i in range(0, len(data), batch)]
            self._it = iter(self._batches)

        def get_next(self):
            b = next(self._it, None)
            return None if b is None else {input_name: b}

        def rewind(self) -> None:
            self._it = iter(self._batches)

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # silence "Please consider pre-processing before quantization"
    try:
        quantize_static(
            str(fp32_path),
            str(out_path),
            Reader(calib),
            quant_format=QuantFormat.QDQ,
            op_types_to_quantize=op_types,
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
            per_channel=True,
            calibrate_method=CalibrationMethod.MinMax,
            extra_options=dict(extra_options),
        )
    finally:
        root.setLevel(level)
    onnx.checker.check_model(onnx.load(str(out_path)), full_check=True)


def ort_session(path: Path, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
