"""Number formats the lint checks against: float ranges, Q/DQ storage ranges, and element statistics."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from trtverify.graph.onnxgraph import QDQ_OPS, values_of  # noqa: F401 - values_of: where the lint reads it

TARGETS = ("fp32", "fp16", "bf16", "int8", "fp8")
SMALL_SHARE = 0.01  # subnormals/underflows below this share of a tensor are only "info" (TensorRT warns on most models)
CLOSE_TO_MAX = 0.5  # an activation above this fraction of the type's maximum has little headroom
SATURATION_MEDIUM = 2.0  # an activation this many times past its Q/DQ range is clipped hard


@dataclass(frozen=True)
class FloatRange:
    """Representable magnitudes of a narrow float type."""

    name: str
    max: float
    smallest_normal: float
    smallest_subnormal: float

    @property
    def zero_limit(self) -> float:
        """|x| at or below this rounds to zero (round-to-nearest-even: the tie goes to 0)."""
        return self.smallest_subnormal / 2


RANGES: dict[str, FloatRange] = {
    "fp16": FloatRange("FP16", 65504.0, 2.0**-14, 2.0**-24),
    "bf16": FloatRange("BF16", (2 - 2.0**-7) * 2.0**127, 2.0**-126, 2.0**-133),
    "fp8": FloatRange("FP8 E4M3", 448.0, 2.0**-6, 2.0**-9),
}

# Float ops TensorRT quantises when both inputs come through DequantizeLinear.
COMPUTE_OPS = ("Conv", "ConvTranspose", "Gemm", "MatMul")
# Ops a DequantizeLinear output may pass through on its way to a compute op (TensorRT moves Q/DQ across them).
PASS_THROUGH_OPS = frozenset({"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Cast"})
# Float inputs that are shapes or thresholds, not weights: TensorRT does not convert them.
META_INPUTS: dict[str, frozenset[int]] = {
    "Resize": frozenset({1, 2}),
    "Upsample": frozenset({1}),
    "NonMaxSuppression": frozenset({3, 4}),
}
# integer-arithmetic quantised ops (QOperator format); the Q/DQ ops are onnxgraph.QDQ_OPS
QLINEAR_OPS = frozenset({"QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger"})


def onnx_types(*names: str) -> frozenset[int]:
    import onnx

    # getattr: older onnx releases lack the newest types (FLOAT4E2M1, ...)
    return frozenset(v for n in names if (v := getattr(onnx.TensorProto, n, None)) is not None)


def fp8_types() -> frozenset[int]:
    return onnx_types("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT4E2M1")


def quant_range(elem_type: int) -> tuple[float, float] | None:
    """(lowest, highest) value of a Q/DQ storage type."""
    import onnx

    T = onnx.TensorProto
    table = {
        "INT8": (-128, 127),
        "UINT8": (0, 255),
        "INT16": (-32768, 32767),
        "UINT16": (0, 65535),
        "INT4": (-8, 7),
        "UINT4": (0, 15),
        "FLOAT8E4M3FN": (-448, 448),
        "FLOAT8E4M3FNUZ": (-240, 240),
        "FLOAT8E5M2": (-57344, 57344),
        "FLOAT8E5M2FNUZ": (-57344, 57344),
        "FLOAT4E2M1": (-6, 6),
    }
    for name, rng in table.items():
        if getattr(T, name, None) == elem_type:
            return float(rng[0]), float(rng[1])
    return None


def role(op_type: str, i: int) -> str:
    """What input `i` of an `op_type` node is: data (a weight), qparam, quantized, or meta."""
    if op_type in QDQ_OPS:
        return "qparam" if i in (1, 2) else "quantized"
    if i in META_INPUTS.get(op_type, ()):
        return "meta"
    return "data"


# --- element statistics -------------------------------------------------------------------


@dataclass(frozen=True)
class Stats:
    total: int
    zeros: int
    nan: int
    inf: int
    over: int  # finite, |x| > max
    under: int  # 0 < |x| <= zero_limit
    subnormal: int  # zero_limit < |x| < smallest_normal
    max_abs: float  # largest finite |x|


def stats(arr: np.ndarray, rng: FloatRange | None) -> Stats:
    """Element counts by range, on the magnitude bits: integer compares, one pass each, no float temporaries."""
    flat = np.ascontiguousarray(arr).reshape(-1)
    if flat.size == 0:
        return Stats(0, 0, 0, 0, 0, 0, 0, 0.0)
    uint = {2: np.uint16, 4: np.uint32, 8: np.uint64}[flat.dtype.itemsize]
    b = flat.view(uint) & uint(np.iinfo(uint).max >> 1)  # |x| as bits; ordered like |x| for non-NaN

    def bits(value: float) -> int:
        return int(np.array(value, dtype=flat.dtype).reshape(1).view(uint)[0])

    inf_b = bits(math.inf)
    hi = int(b.max())
    nan = inf = over = 0
    if hi >= inf_b:
        nan = int(np.count_nonzero(b > inf_b))
        inf = int(np.count_nonzero(b == inf_b))
        finite = b[b < inf_b]
        hi = int(finite.max()) if finite.size else 0
    max_abs = float(np.array([hi], dtype=uint).view(flat.dtype).astype(np.float64)[0])
    zeros = under = subnormal = 0
    if rng is not None:
        max_b = bits(rng.max)
        if hi > max_b:
            over = int(np.count_nonzero(b > max_b)) - nan - inf
        small = int(np.count_nonzero(b < bits(rng.smallest_normal)))
        if small:
            zeros = int(np.count_nonzero(b == 0))
            under = int(np.count_nonzero(b <= bits(rng.zero_limit))) - zeros
            subnormal = small - zeros - under
    return Stats(int(flat.size), zeros, nan, inf, over, under, subnormal, max_abs)
