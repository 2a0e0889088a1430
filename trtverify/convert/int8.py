"""INT8 Q/DQ models: quantised the way TensorRT builds them, and with chosen nodes kept in FP32.

`quantize` runs ONNX Runtime's `quantize_static` with TensorRT-compatible settings by default
(QDQ format, symmetric INT8 activations and weights, per-channel weights, MinMax calibration, Q/DQ
on the inputs of Conv/Gemm/MatMul only, float biases): its own defaults (asymmetric uint8
activations, Q/DQ around every op) make a model TensorRT refuses to build.

`keep_fp32` takes a Q/DQ model and gives chosen nodes back their FP32 inputs: each input that
comes through a QuantizeLinear -> DequantizeLinear pair reads the value before the pair again, and
each quantised weight is replaced by the reference's FP32 weight. The Q/DQ pairs other readers
still use stay; the ones nobody reads any more are removed. Nothing is recalibrated, so a keep-list
search changes only what it keeps.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.onnxgraph import GraphIndex

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
    """Static INT8 Q/DQ quantisation of `reference` calibrated on `calibration` (feeds), written to `out`."""
    from trtverify.deps import quiet_onnxruntime

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
    try:
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
    """A copy of the Q/DQ model `qdq` where the nodes named in `keep` read FP32 inputs (see the module)."""
    import onnx

    keep = set(keep)
    out = onnx.ModelProto()
    out.CopyFrom(qdq)
    g = GraphIndex.from_model(out)
    ref = GraphIndex.from_model(reference)
    ref_by_name = {n.name: n for n in ref.nodes if n.name}
    missing = sorted(keep - {n.name for n in g.nodes if n.name})
    if missing:
        raise ValueError(f"keep names nodes the model does not have: {', '.join(missing[:5])}")
    have = {t.name for t in out.graph.initializer}
    for node in out.graph.node:
        if node.name not in keep:
            continue
        for pos, name in enumerate(node.input):
            p = g.producers.get(name)
            if p is None or p.op_type != "DequantizeLinear":
                continue
            source = g.nodes[p.index].input[0]
            q = g.producers.get(source)
            if q is not None and q.op_type == "QuantizeLinear":
                node.input[pos] = g.nodes[q.index].input[0]  # the activation before its Q/DQ pair
                continue
            twin = ref_by_name.get(node.name)
            weight = twin.input[pos] if twin is not None and pos < len(twin.input) else None
            if weight and weight in ref.constants:  # a quantised weight: the reference's FP32 one
                # under its own name: quantizers give the DequantizeLinear output the reference's name at times
                fp32 = f"{weight}__fp32"
                node.input[pos] = fp32
                if fp32 not in have:
                    tensor = onnx.TensorProto()
                    tensor.CopyFrom(ref.constants[weight])
                    tensor.name = fp32
                    out.graph.initializer.append(tensor)
                    have.add(fp32)
    _prune(out)
    return out


def _prune(model: Any) -> None:
    """Drop nodes whose outputs nobody reads (and initializers nobody reads), keeping graph outputs."""
    graph = model.graph
    wanted = {o.name for o in graph.output}
    while True:
        read = {i for n in graph.node for i in n.input} | wanted
        dead = [n for n in graph.node if not any(o in read for o in n.output if o)]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
    read = {i for n in graph.node for i in n.input}
    kept = [t for t in graph.initializer if t.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)
