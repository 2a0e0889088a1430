"""Lint rules on constants: float weights out of the target type's range, Q/DQ scales and zero
points, and weights a QuantizeLinear clips."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trtverify.graph.onnxgraph import QDQ_OPS, GraphIndex
from trtverify.lint.findings import Found, at
from trtverify.lint.ranges import (
    RANGES,
    SMALL_SHARE,
    fp8_types,
    onnx_types,
    quant_range,
    role,
    stats,
)


def _range_key(dtype_key: str | None, has_data_use: bool, target: str) -> tuple[str | None, bool, bool]:
    """(range to check, converted by the build, FP16 fallback of a Q/DQ build) for one float constant."""
    if not has_data_use:
        return None, False, False  # a weight quantised by its own QuantizeLinear: only NaN/inf matter
    if dtype_key is not None:
        return dtype_key, False, False  # already stored narrow: only its own range matters
    if target in ("fp16", "bf16"):
        return target, True, False
    if target in ("int8", "fp8"):
        return "fp16", True, True  # unquantised layers of a Q/DQ build run in FP16 when it is enabled
    return None, False, False  # fp32 target


def _weight_uses(g: GraphIndex, name: str) -> list[tuple[int, int]]:
    """The (node, input position) reads of a constant as data or as quantised data (-1: inside a subgraph);
    none for Q/DQ scales (checked apart), shape-like inputs or an unused constant."""
    return [
        (n, i) for n, i in g.consumers.get(name, []) if i < 0 or role(g.nodes[n].op_type, i) in ("data", "quantized")
    ]


def _constant_findings(
    g: GraphIndex,
    name: str,
    uses: list[tuple[int, int]],
    arr: np.ndarray,
    stored: str,
    narrow_key: str | None,
    target: str,
) -> Found:
    """One constant (read at `uses`): one finding per problem (not per consumer), placed at its first
    consumer in graph order."""
    data_uses = [(n, i) for n, i in uses if i < 0 or role(g.nodes[n].op_type, i) == "data"]
    key, converted, fallback = _range_key(narrow_key, bool(data_uses), target)
    rng = RANGES[key] if key else None
    s = stats(arr, rng)
    pos = min(n for n, _ in (data_uses or uses))
    label, op = g.label(pos), g.nodes[pos].op_type
    base: dict[str, Any] = {"total": s.total, "consumers": sorted({g.label(n) for n, _ in uses})}
    if rng is not None:
        base.update({"target": key, "limit": rng.max})
        if fallback:
            base["fallback_for"] = target
    found: Found = []

    def add(kind: str, severity: str, count: int, message: str, **extra: Any) -> None:
        found.append(
            at(pos, kind, severity, message, node=label, op_type=op, tensor=name, count=count, detail={**base, **extra})
        )

    if s.nan or s.inf:
        add(
            "nonfinite_initializer",
            "high",
            s.nan + s.inf,
            f"{stored} constant '{name}' holds {s.nan} NaN and {s.inf} inf among {s.total} values; "
            "every output they reach is corrupted.",
            nan=s.nan,
            inf=s.inf,
        )
    if rng is None:
        return found
    when = f" (if FP16 is enabled next to {target.upper()})" if fallback else ""
    if converted and s.over:
        add(
            "initializer_overflow",
            "high",
            s.over,
            f"{s.over} of {s.total} values of '{name}' exceed the {rng.name} maximum {rng.max:g} "
            f"(largest |x| = {s.max_abs:.4g}); converted to {rng.name}{when} they become inf or are clamped "
            f"to ±{rng.max:g}.",
            max_abs=s.max_abs,
        )
    if converted and s.under:
        nonzero = s.total - s.zeros - s.nan
        whole = s.under == nonzero  # e.g. an epsilon: the tensor becomes all zeros
        which = " (all its nonzero values)" if whole else ""
        clamp = f", TensorRT's weight conversion clamps them to {rng.smallest_subnormal:.3g}" if key == "fp16" else ""
        add(
            "initializer_underflow",
            "medium" if whole or s.under / s.total >= SMALL_SHARE else "info",
            s.under,
            f"{s.under} of {s.total} values of '{name}'{which} are at or below {rng.zero_limit:.3g}, "
            f"too small for {rng.name}{when}: a cast makes them 0{clamp}.",
            nonzero=nonzero,
            zero_limit=rng.zero_limit,
        )
    if s.subnormal:
        share = s.subnormal / s.total
        verb = f"become{when}" if converted else "are"
        add(
            "initializer_subnormal",
            "medium" if share >= SMALL_SHARE else "info",
            s.subnormal,
            f"{s.subnormal} of {s.total} values ({share:.2%}) of '{name}' {verb} {rng.name} subnormals "
            f"(below {rng.smallest_normal:.3g}) and keep fewer significant bits.",
            share=share,
            smallest_normal=rng.smallest_normal,
        )
    return found


def initializer_findings(g: GraphIndex, target: str, narrow: dict[str, str] | None = None) -> tuple[Found, list[str]]:
    """Range of every float constant that TensorRT would store in the target type.

    `narrow` (strongly typed builds): tensor -> the narrow float type the graph gives it; an FP32 constant is
    judged against a narrow range only where the graph itself lowers it (a Cast to FP16/BF16 reads it), never
    because of the model's overall precision: a node kept in FP32 keeps its FP32 constants."""
    import onnx

    T = onnx.TensorProto
    stored_name = {T.FLOAT: "FP32", T.DOUBLE: "FP64", T.FLOAT16: "FP16", T.BFLOAT16: "BF16"}
    narrow_type = {T.FLOAT16: "fp16", T.BFLOAT16: "bf16"}
    found: Found = []
    unread: list[str] = []
    for name, t in g.constants.items():
        if t.data_type not in stored_name:
            continue  # integers, strings, float8 (already-quantised data behind a DequantizeLinear)
        uses = _weight_uses(g, name)
        if not uses:
            continue  # unused, Q/DQ scales (checked apart), or shape-like inputs
        arr = g.values_of(t)
        if arr is None:
            unread.append(name)
            continue
        own = narrow_type.get(t.data_type)
        lowered_to = target if narrow is None or own is not None else narrow.get(name, "fp32")
        found += _constant_findings(g, name, uses, arr, stored_name[t.data_type], own, lowered_to)
    return found, unread


def qdq_param_findings(g: GraphIndex) -> tuple[Found, list[str]]:
    """Q/DQ scales must be finite and > 0, zero points 0: TensorRT rejects or corrupts anything else."""
    found: Found = []
    unread: list[str] = []
    seen: set[str] = set()
    for idx, node in enumerate(g.nodes):
        if node.op_type not in QDQ_OPS:
            continue
        for i in (1, 2):
            name = node.input[i] if len(node.input) > i else ""
            if not name or name in seen or name not in g.constants:
                continue
            seen.add(name)
            arr = g.values_of(g.constants[name])
            if arr is None:
                unread.append(name)
                continue
            v = np.asarray(arr).astype(np.float64).reshape(-1)
            users = sorted({g.label(n) for n, j in g.consumers.get(name, []) if j == i})
            if i == 1:
                finite = np.isfinite(v)
                bad = int(np.count_nonzero(~(finite & (v > 0))))
                if not bad:
                    continue
                zero = int(np.count_nonzero(v == 0))
                nonfinite = int(np.count_nonzero(~finite))
                negative = bad - zero - nonfinite
                kind, message = (
                    "qdq_invalid_scale",
                    (
                        f"{node.op_type} '{g.label(idx)}' uses scale '{name}' with {bad} of {v.size} values "
                        f"not finite and > 0 ({zero} zero, {negative} negative, {nonfinite} inf/NaN); "
                        "TensorRT rejects it or produces inf/NaN."
                    ),
                )
                detail = {
                    "total": int(v.size),
                    "zero": zero,
                    "negative": negative,
                    "nonfinite": nonfinite,
                    "users": users,
                }
            else:
                bad = int(np.count_nonzero(v != 0))
                if not bad:
                    continue
                kind, message = (
                    "qdq_nonzero_zero_point",
                    (
                        f"{node.op_type} '{g.label(idx)}' uses zero point '{name}' with {bad} of {v.size} "
                        "values not 0; "
                        "TensorRT supports only symmetric quantisation and refuses to build it."
                    ),
                )
                detail = {"total": int(v.size), "users": users}
            found.append(
                at(
                    idx,
                    kind,
                    "high",
                    message,
                    node=g.label(idx),
                    op_type=node.op_type,
                    tensor=name,
                    count=bad,
                    detail=detail,
                )
            )
    return found, unread


@dataclass(frozen=True)
class _QParams:
    scale: np.ndarray  # float64, flat: one value, or one per channel of `axis`
    zero_point: np.ndarray  # float64, flat, 1 or scale.size values
    elem_type: int  # storage type of the quantised values
    axis: int
    blocked: bool  # opset 21 block quantisation: scales do not broadcast per axis


def _q_params(g: GraphIndex, qnode: Any) -> _QParams | None:
    """Constant scale/zero point of a QuantizeLinear; None when they are computed or unreadable."""
    import onnx

    scale_t = g.constants.get(qnode.input[1]) if len(qnode.input) > 1 else None
    scale = g.values_of(scale_t) if scale_t is not None else None
    if scale is None:
        return None
    elem, zp, axis, blocked = onnx.TensorProto.UINT8, np.zeros(1), 1, False  # UINT8: QuantizeLinear's default
    for a in qnode.attribute:
        if a.name == "output_dtype" and a.i:
            elem = int(a.i)
        elif a.name == "axis":
            axis = int(a.i)
        elif a.name == "block_size" and a.i:
            blocked = True
    zp_name = qnode.input[2] if len(qnode.input) > 2 else ""
    if zp_name:
        zp_t = g.constants.get(zp_name)
        zp_arr = g.values_of(zp_t) if zp_t is not None else None
        if zp_arr is None:
            return None
        elem, zp = zp_t.data_type, np.asarray(zp_arr)
    s = np.asarray(scale).astype(np.float64).reshape(-1)
    z = zp.astype(np.float64).reshape(-1)
    if s.size == 0 or z.size not in (1, s.size):
        return None
    return _QParams(s, z, elem, axis, blocked)


def q_limit(g: GraphIndex, qnode: Any) -> float | None:
    """Largest |x| a QuantizeLinear represents without clipping; None when its scale is not a constant."""
    qp = _q_params(g, qnode)
    rng = quant_range(qp.elem_type) if qp is not None else None
    if qp is None or rng is None:
        return None
    lim = np.maximum(rng[1] - qp.zero_point, qp.zero_point - rng[0]) * np.abs(qp.scale)
    return float(lim.max())


def quantized_weight_findings(g: GraphIndex) -> Found:
    """Float weights quantised by a QuantizeLinear: values its scale clips, and (FP8) values that become 0."""
    import onnx

    found: Found = []
    fp8_e4m3 = onnx_types("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ")
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    for idx, node in enumerate(g.nodes):
        if node.op_type != "QuantizeLinear" or not node.input or node.input[0] not in g.constants:
            continue
        t = g.constants[node.input[0]]
        qp = _q_params(g, node)
        rng = quant_range(qp.elem_type) if qp is not None else None
        if t.data_type not in floats or qp is None or rng is None or qp.blocked:
            continue
        w = g.values_of(t)
        if w is None or w.size == 0:
            continue  # unreadable constants are reported by the initializer rule
        w = np.asarray(w).astype(np.float32)
        s, z = np.abs(qp.scale), qp.zero_point
        if s.size > 1:
            axis = qp.axis % w.ndim if w.ndim else 0
            if w.ndim == 0 or w.shape[axis] != s.size:
                continue
            shape = [1] * w.ndim
            shape[axis] = s.size
            s = s.reshape(shape)
            z = z.reshape(shape) if z.size > 1 else z
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            q = w / s.astype(np.float32)
        is_float = qp.elem_type in fp8_types()
        margin = 0.0 if is_float else 0.5  # integers: round-to-nearest keeps up to half a step past the end
        clipped = int(np.count_nonzero((q > rng[1] - z + margin) | (q < rng[0] - z - margin)))
        label, total = g.label(idx), int(w.size)
        base = {"total": total, "quantize_node": label, "target": onnx.TensorProto.DataType.Name(qp.elem_type).lower()}
        if clipped:
            msg = (
                f"{clipped} of {total} values of weight '{t.name}' fall outside the range of QuantizeLinear '{label}' "
                f"(|w| / scale beyond {rng[1]:g}) and are clipped."
            )
            found.append(
                at(
                    idx,
                    "weight_saturation",
                    "medium",
                    msg,
                    node=label,
                    op_type=node.op_type,
                    tensor=t.name,
                    count=clipped,
                    detail=base,
                )
            )
        if qp.elem_type in fp8_e4m3:
            fp8 = RANGES["fp8"]
            a = np.abs(q)
            zero = int(np.count_nonzero((a <= fp8.zero_limit) & (w != 0)))
            if zero:
                share = zero / total
                msg = (
                    f"{zero} of {total} values ({share:.2%}) of weight '{t.name}' are nonzero but have "
                    f"|w| / scale at or below {fp8.zero_limit:.3g} for QuantizeLinear '{label}' "
                    f"and become 0 in {fp8.name}."
                )
                sev = "medium" if share >= SMALL_SHARE else "info"
                found.append(
                    at(
                        idx,
                        "weight_underflow",
                        sev,
                        msg,
                        node=label,
                        op_type=node.op_type,
                        tensor=t.name,
                        count=zero,
                        detail={**base, "share": share},
                    )
                )
    return found


# a weight read by a compute op: its output channels' axis (Gemm's B by transB; MatMul's and Gemm's B [K, N]: axis 1)
WEIGHT_CHANNEL_AXIS = {"Conv": 0, "ConvTranspose": 1, "MatMul": 1}
CHANNEL_SPREAD = 100.0  # channels' largest |w| differing by more than this under one scale: the small ones lose it


def per_tensor_scale_findings(g: GraphIndex) -> Found:
    """INT8 weights of a Conv/Gemm/MatMul quantized with one scale although their output channels' ranges differ
    by more than CHANNEL_SPREAD: the small channels keep a few of INT8's 255 levels (ModelOpt's INT8 of a model whose
    weights are Constant nodes, PP-OCRv4's recognizer, got one scale per weight). Weights stored quantized (an INT8
    constant read by a DequantizeLinear, as ONNX Runtime and ModelOpt write them) or stored in float and quantized
    by a QuantizeLinear are both read."""
    import onnx

    found: Found = []
    ints = (onnx.TensorProto.INT8, onnx.TensorProto.UINT8)
    for idx, node in enumerate(g.nodes):
        if node.op_type != "DequantizeLinear" or not node.input:
            continue
        user = _weight_user(g, node)
        if user is None:
            continue
        x = node.input[0]
        p = g.producers.get(x)
        q_node = g.nodes[p.index] if p is not None and p.op_type == "QuantizeLinear" else None
        if x in g.constants:  # stored quantized: the channels' ranges are their integer ranges
            qp = _q_params(g, node)
            if qp is None or qp.scale.size != 1 or g.constants[x].data_type not in ints:
                continue
            q = g.values_of(g.constants[x])
            w = None if q is None else (np.asarray(q, dtype=np.float32) - np.float32(qp.zero_point[0]))
            name, where = x, g.label(idx)
        elif q_node is not None and q_node.input and q_node.input[0] in g.constants:
            qp = _q_params(g, q_node)
            if qp is None or qp.scale.size != 1 or qp.elem_type not in ints:
                continue
            w = g.values_of(g.constants[q_node.input[0]])
            w = None if w is None else np.asarray(w, dtype=np.float32) / np.float32(abs(qp.scale[0]))
            name, where = q_node.input[0], g.label(p.index)  # type: ignore[union-attr]
        else:
            continue
        if w is None or w.ndim < 2:
            continue
        op, axis = user
        axis = axis % w.ndim
        levels = np.abs(w.astype(np.float64)).max(axis=tuple(i for i in range(w.ndim) if i != axis))  # INT8 steps
        if levels.size < 2 or not levels.max() > 0:
            continue
        stored = x in g.constants
        # a channel stored as all zeros lost everything: its range was below half a step; float channels say theirs
        low = max(float(levels.min()), 0.5) if stored else float(levels[levels > 0].min())
        spread = float(levels.max() / low)
        if spread <= CHANNEL_SPREAD:
            continue
        starved = int(np.count_nonzero(levels < 8))
        zeroed = int(np.count_nonzero(np.round(levels) == 0))
        lost = f", {zeroed} of them all zero" if zeroed else ""
        at_least = "at least " if zeroed and stored else ""
        msg = (
            f"weight '{name}' of {op} has one INT8 scale ('{where}') for {levels.size} output channels whose ranges "
            f"differ by {at_least}{spread:.3g}x: {starved} channels keep fewer than 8 of the 127 levels{lost}. "
            f"Quantize it per channel (axis={axis}); with ModelOpt, make Constant-node weights initializers first."
        )
        detail = {"channels": int(levels.size), "spread": spread, "starved_channels": starved, "zeroed": zeroed,
                  "axis": axis}  # fmt: skip
        found.append(at(idx, "weight_per_tensor_scale", "medium", msg, node=where, op_type=op, tensor=name,
                        count=starved, detail=detail))  # fmt: skip
    return found


def _weight_user(g: GraphIndex, dq: Any) -> tuple[str, int] | None:
    """(op type, output-channel axis) of the compute node reading this DequantizeLinear's output as its weight
    (input 1); None when none does."""
    for ci, pos in g.consumers.get(dq.output[0], []) if dq.output else []:
        user = g.nodes[ci]
        if pos != 1:
            continue
        if user.op_type == "Gemm":
            trans = next((a.i for a in user.attribute if a.name == "transB"), 0)
            return user.op_type, 0 if trans else 1
        if user.op_type in WEIGHT_CHANNEL_AXIS:
            return user.op_type, WEIGHT_CHANNEL_AXIS[user.op_type]
    return None
