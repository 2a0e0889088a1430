"""INT8 Q/DQ models: quantised the way TensorRT builds them, and with chosen nodes kept in FP32.

`quantize` runs ONNX Runtime's `quantize_static` with TensorRT-compatible settings by default
(QDQ format, symmetric INT8 activations and weights, per-channel weights, MinMax calibration, Q/DQ
on the inputs of Conv/Gemm/MatMul only, float biases): its own defaults (asymmetric uint8
activations, Q/DQ around every op) make a model TensorRT refuses to build.

`keep_fp32` takes a Q/DQ model and gives chosen nodes back their FP32 computation (convert/islands.py):
each input that comes through a QuantizeLinear -> DequantizeLinear pair reads the value before the
pair again, and each quantised weight is replaced by the reference's FP32 weight. The Q/DQ pairs
other readers still use stay; the ones nobody reads any more are removed. Nothing is recalibrated,
so a keep-list search changes only what it keeps.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.util import native
from trtverify.util.errors import UsageError

# TensorRT's recommended Q/DQ placement: the inputs of its INT8 compute layers, not their outputs (it fuses a
# Conv's bias and activation itself; elementwise ops follow the precision of their neighbours)
QUANTIZED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def quantize(
    reference: Path,
    out: Path,
    calibration: Sequence[dict[str, np.ndarray]],
    *,
    symmetric: bool = True,
    per_channel: bool = True,
    exclude: Iterable[str] = (),
) -> Path:
    """Static INT8 Q/DQ quantisation of `reference` calibrated on `calibration` (feeds), written to `out`. A graph with
    plugin nodes is quantized up to them (convert/around_plugins.py); weights held in Constant nodes are made
    initializers first (convert/weights.py), so that they are quantized per channel."""
    import shutil
    import tempfile

    import onnx

    from trtverify.convert.around_plugins import split, stitch
    from trtverify.convert.weights import constants_to_initializers

    model = onnx.load(str(reference))
    moved = constants_to_initializers(model)  # weights in Constant nodes would get one activation scale each
    upgraded = per_channel and _opset(model) < 13  # DequantizeLinear's `axis` (per channel) is opset 13
    if upgraded:
        from onnx import version_converter

        try:
            model = version_converter.convert_version(model, 13)
        except Exception as exc:  # noqa: BLE001 - the converter raises its own types for ops it cannot convert
            raise UsageError(
                f"{reference}: per-channel INT8 needs opset 13 (the model's is {_opset(model)}) and ONNX's version "
                f"converter failed ({exc}): re-export at opset 13 or later"
            ) from exc
    parts = split(model)
    if parts is None and not moved and not upgraded:
        del model
        return _quantize(reference, out, calibration, symmetric=symmetric, per_channel=per_channel, exclude=exclude)
    with tempfile.TemporaryDirectory(prefix="trtverify-int8-") as tmp:
        head, rest = (parts[0], parts[1]) if parts is not None else (model, [])
        onnx.save(head, str(Path(tmp) / "head.onnx"))
        q = _quantize(Path(tmp) / "head.onnx", Path(tmp) / "head_int8.onnx", calibration, symmetric=symmetric,
                      per_channel=per_channel, exclude=exclude, name=Path(reference).name)  # fmt: skip
        if parts is not None:
            stitch(q, model, rest, out)
        else:
            shutil.copyfile(q, out)
    return out


def _opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)


def _quantize(
    reference: Path,
    out: Path,
    calibration: Sequence[dict[str, np.ndarray]],
    *,
    symmetric: bool,
    per_channel: bool,
    exclude: Iterable[str],
    name: str | None = None,
) -> Path:
    from trtverify.util.deps import quiet_onnxruntime

    quiet_onnxruntime()
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(calibration)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # "Please consider pre-processing before quantization"
    import onnxruntime

    try:
        with native.Operation(
            f"quantizing {name or Path(reference).name} with ONNX Runtime {onnxruntime.__version__}'s quantize_static",
            key=f"onnxruntime-quantize:{reference}",
            model=str(reference),
        ):
            quantize_static(
                str(reference),
                str(out),
                Reader(),
                quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                per_channel=per_channel,
                calibrate_method=CalibrationMethod.MinMax,
                op_types_to_quantize=list(QUANTIZED_OPS),
                nodes_to_exclude=list(exclude),
                extra_options={
                    "ActivationSymmetric": symmetric,
                    "WeightSymmetric": True,
                    "QuantizeBias": False,  # TensorRT's parser rejects DequantizeLinear on int32 biases
                    "OpTypesToExcludeOutputQuantization": list(QUANTIZED_OPS),
                },
            )
    finally:
        root.setLevel(level)
    return out


def keep_fp32(qdq: Any, reference: Any, keep: Iterable[str]) -> Any:
    """A copy of the Q/DQ model `qdq` where the nodes named in `keep` compute in FP32 (convert/islands.py: the same
    rewrite for any lowered candidate, Q/DQ, FP16/BF16 types or both)."""
    from trtverify.convert.islands import keep_fp32 as islands

    return islands(qdq, reference, keep)
