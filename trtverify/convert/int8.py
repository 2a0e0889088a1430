"""INT8 Q/DQ models: quantised the way TensorRT builds them, and with chosen nodes kept in FP32.

`quantize` runs ONNX Runtime's `quantize_static` with TensorRT-compatible settings by default
(QDQ format, symmetric INT8 activations and weights, per-channel weights, MinMax calibration unless `method` says
otherwise, Q/DQ
on the inputs of Conv/Gemm/MatMul only, float biases): its own defaults (asymmetric uint8
activations, Q/DQ around every op) make a model TensorRT refuses to build.

`keep_fp32` takes a Q/DQ model and gives chosen nodes back their FP32 computation (convert/islands.py):
each input that comes through a QuantizeLinear -> DequantizeLinear pair reads the value before the
pair again, and each quantised weight is replaced by the reference's FP32 weight. The Q/DQ pairs
other readers still use stay; the ones nobody reads any more are removed. Nothing is recalibrated,
so a keep-list search changes only what it keeps.
"""

from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.util import native
from trtverify.util.errors import UsageError

# TensorRT's recommended Q/DQ placement: the inputs of its INT8 compute layers, not their outputs (it fuses a
# Conv's bias and activation itself; elementwise ops follow the precision of their neighbours)
QUANTIZED_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")

# calibration methods: how an activation's range is read from the calibration rows. ONNX Runtime has the first
# three (minmax: the largest |x| seen; entropy: the clip that keeps the KL divergence of the INT8 histogram
# smallest; percentile: the 99.999th percentile of |x|); "auto" (repair/calibrate.py) tries them and keeps the best
METHODS = ("minmax", "entropy", "percentile")
CHOICES = ("auto", *METHODS, "mse")


def check_method(method: str) -> None:
    """UsageError (exit 2) for a method ONNX Runtime's quantize_static cannot calibrate with."""
    if method == "mse":
        raise UsageError(
            "--method mse: ONNX Runtime's quantize_static has no MSE calibrator; use one of "
            f"{', '.join(METHODS)} or auto (tries each on held-out rows)"
        )
    if method not in METHODS:
        raise UsageError(f"unknown calibration method {method!r}: use one of {', '.join(CHOICES)}")


def quantize(
    reference: Path,
    out: Path,
    calibration: Sequence[dict[str, np.ndarray]],
    *,
    symmetric: bool = True,
    per_channel: bool = True,
    exclude: Iterable[str] = (),
    method: str = "minmax",
    progress: Callable[[str], None] | None = None,
    budget_s: float | None = None,
) -> Path:
    """Static INT8 Q/DQ quantisation of `reference` calibrated on `calibration` (feeds) with `method` (one of
    METHODS), written to `out`; `progress` gets the rows done (calibranges.RowProgress: at the start, every few
    seconds, at the end), then the range computation's (convert/calibranges.py); `budget_s`: stop the range
    computation with calibranges.OverBudget once its projected time passes it. A graph with plugin nodes is
    quantized up to them (convert/around_plugins.py); weights held in Constant nodes are made initializers first
    (convert/weights.py), so that they are quantized per channel."""
    import shutil
    import tempfile

    import onnx

    from trtverify.convert.around_plugins import split, stitch
    from trtverify.convert.weights import constants_to_initializers
    from trtverify.graph.onnxwire import weightless
    from trtverify.plugins.onnxops import plugin_nodes

    graph = weightless(reference)[0]  # what to rewrite, read from the graph alone: the weights are read once
    moved = constants_to_initializers(graph, dry=True)  # weights in Constant nodes: one activation scale each
    upgraded = per_channel and _opset(graph) < 13  # DequantizeLinear's `axis` (per channel) is opset 13
    if not moved and not upgraded and not plugin_nodes(graph):
        del graph
        return _quantize(reference, out, calibration, symmetric=symmetric, per_channel=per_channel, exclude=exclude,
                         method=method, progress=progress, budget_s=budget_s)  # fmt: skip
    del graph
    model = onnx.load(str(reference))
    constants_to_initializers(model)
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
    with tempfile.TemporaryDirectory(prefix="trtverify-int8-") as tmp:
        head, rest = (parts[0], parts[1]) if parts is not None else (model, [])
        onnx.save(head, str(Path(tmp) / "head.onnx"))
        q = _quantize(Path(tmp) / "head.onnx", Path(tmp) / "head_int8.onnx", calibration, symmetric=symmetric,
                      per_channel=per_channel, exclude=exclude, name=Path(reference).name, method=method,
                      progress=progress, budget_s=budget_s)  # fmt: skip
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
    method: str = "minmax",
    progress: Callable[[str], None] | None = None,
    budget_s: float | None = None,
) -> Path:
    check_method(method)
    from trtverify.util.deps import quiet_onnxruntime

    quiet_onnxruntime()
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    from trtverify.convert.calibranges import RowProgress, compute_ranges

    rows = RowProgress(method, len(calibration), progress)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it = iter(calibration)
            self._asked = 0

        def get_next(self) -> dict[str, np.ndarray] | None:
            # ONNX Runtime runs each row before it asks for the next: at the k-th request k-1 rows are done
            rows.done(self._asked)
            self._asked += 1
            return next(self._it, None)

    calibrate = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }[method]
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # "Please consider pre-processing before quantization"
    import onnxruntime
    from onnxruntime.quantization.calibrate import save_tensors_data

    try:
        with (
            native.Operation(
                f"quantizing {name or Path(reference).name} with ONNX Runtime {onnxruntime.__version__}'s "
                f"quantize_static ({method} calibration)",
                key=f"onnxruntime-quantize:{reference}",
                model=str(reference),
            ),
            tempfile.TemporaryDirectory(prefix="trtverify-calib-") as tmp,
            contextlib.redirect_stdout(io.StringIO()),  # its histogram calibrators print() their settings
        ):
            # the ranges are computed here, step by step with progress (convert/calibranges.py); quantize_static
            # then takes them from the cache instead of calibrating again
            cache = Path(tmp) / "ranges.json"
            data = compute_ranges(reference, Reader(), method, symmetric, Path(tmp), QUANTIZED_OPS, rows, budget_s)
            save_tensors_data(data, cache)
            del data
            quantize_static(
                str(reference),
                str(out),
                None,
                quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QInt8 if symmetric else QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                per_channel=per_channel,
                calibrate_method=calibrate,
                op_types_to_quantize=list(QUANTIZED_OPS),
                nodes_to_exclude=list(exclude),
                extra_options={
                    "ActivationSymmetric": symmetric,
                    "WeightSymmetric": True,
                    "QuantizeBias": False,  # TensorRT's parser rejects DequantizeLinear on int32 biases
                    "OpTypesToExcludeOutputQuantization": list(QUANTIZED_OPS),
                },
                calibration_cache_path=cache,
            )
    finally:
        root.setLevel(level)
    return out


CALIBRATION_KEY = "trtverify.int8_calibration"  # the model's metadata_props entry: how it was calibrated


def record_calibration(model: Any, record: dict[str, Any]) -> None:
    """Write `record` (method, figures) as JSON into `model`'s metadata_props under CALIBRATION_KEY (replacing one
    that was there), so the candidate file says how it was calibrated."""
    import json

    kept = [(p.key, p.value) for p in model.metadata_props if p.key != CALIBRATION_KEY]
    del model.metadata_props[:]
    for key, value in [*kept, (CALIBRATION_KEY, json.dumps(record, sort_keys=True))]:
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value


def keep_fp32(qdq: Any, reference: Any, keep: Iterable[str]) -> Any:
    """A copy of the Q/DQ model `qdq` where the nodes named in `keep` compute in FP32 (convert/islands.py: the same
    rewrite for any lowered candidate, Q/DQ, FP16/BF16 types or both)."""
    from trtverify.convert.islands import keep_fp32 as islands

    return islands(qdq, reference, keep)
