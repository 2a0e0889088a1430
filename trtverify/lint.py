"""Static precision lint of a candidate ONNX model, before any engine is built.

A TensorRT build changes numbers the ONNX file does not show: `--fp16` (TensorRT <= 10)
converts FP32 weights to FP16, activations run in a narrower type, and a Q/DQ model runs
in INT8/FP8 only where a layer's inputs carry Q/DQ. This module finds, from the file
alone (and optionally the largest |activation| seen on the FP32 reference), the places
where that conversion overflows, underflows, loses precision or silently does not happen.

Pure onnx + numpy; findings are data, sorted high -> medium -> info, then graph order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trtverify.errors import UsageError, unknown
from trtverify.onnxinfo import load_onnx

if TYPE_CHECKING:
    import onnx

    ModelLike = onnx.ModelProto | Path | str

TARGETS = ("fp32", "fp16", "bf16", "int8", "fp8")
SEVERITY_RANK = {"high": 0, "medium": 1, "info": 2}
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
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")
QLINEAR_OPS = frozenset({"QLinearConv", "QLinearMatMul", "MatMulInteger", "ConvInteger", "DynamicQuantizeLinear"})


@dataclass(frozen=True)
class LintFinding:
    """One place where the build is likely to change the numbers, said so a user can act on it."""

    kind: str
    severity: str  # "high" | "medium" | "info"
    node: str | None  # consuming (initializers) or producing (activations) ONNX node
    op_type: str | None
    tensor: str | None
    message: str  # one sentence with the numbers
    count: int = 1  # elements affected (initializers) or 1
    detail: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "severity": self.severity,
            "node": self.node,
            "op_type": self.op_type,
            "tensor": self.tensor,
            "message": self.message,
            "count": self.count,
            "detail": dict(self.detail),
        }


# --- ONNX types ---------------------------------------------------------------------------


def _types(*names: str) -> frozenset[int]:
    import onnx

    # getattr: older onnx releases lack the newest types (FLOAT4E2M1, ...)
    return frozenset(v for n in names if (v := getattr(onnx.TensorProto, n, None)) is not None)


def _fp8_types() -> frozenset[int]:
    return _types("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT4E2M1")


def _quant_range(elem_type: int) -> tuple[float, float] | None:
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


def _as_model(model: ModelLike, weights: bool) -> onnx.ModelProto:
    if isinstance(model, (str, Path)):
        path = Path(model)
        if weights:
            try:
                return load_onnx(path, with_weights=True)
            except UsageError:  # external data files missing: lint what the file itself holds
                pass
        return load_onnx(path)
    return model


def target_precision(model: ModelLike) -> str:
    """The precision a model is meant for, read from its types: fp8 > int8 > fp16 > bf16 > fp32."""
    import onnx

    m = _as_model(model, weights=False)
    g = m.graph
    types: set[int] = {t.data_type for t in g.initializer}
    for vi in [*g.input, *g.output, *g.value_info]:
        types.add(vi.type.tensor_type.elem_type)
    quantised = False
    for node in g.node:
        if node.op_type in QDQ_OPS or node.op_type in QLINEAR_OPS:
            quantised = True
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                types.add(a.t.data_type)
            elif a.name in ("to", "output_dtype") and a.type == onnx.AttributeProto.INT:
                types.add(int(a.i))
    if types & _fp8_types():
        return "fp8"
    if quantised:
        return "int8"  # Q/DQ without a float8 type: int8/uint8 (uint8 is QuantizeLinear's default)
    if onnx.TensorProto.FLOAT16 in types:
        return "fp16"
    if onnx.TensorProto.BFLOAT16 in types:
        return "bf16"
    return "fp32"


# --- graph index --------------------------------------------------------------------------


@dataclass
class _Graph:
    nodes: list[Any]
    producer: dict[str, int]
    consumers: dict[str, list[tuple[int, int]]]  # tensor -> (node index, input index); -1: used in a subgraph
    constants: dict[str, Any]  # name -> TensorProto (initializers and Constant nodes)
    inputs: set[str]
    outputs: set[str]
    subgraph_nodes: dict[int, int]  # control-flow node index -> nodes in its subgraphs (recursive)


def _subgraphs(node: Any) -> list[Any]:
    """The GraphProto attributes of a node (If branches, Loop/Scan bodies)."""
    import onnx

    out: list[Any] = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def _subgraph_scan(graphs: list[Any]) -> tuple[int, set[str]]:
    """Nodes in `graphs` (recursive) and every tensor name they read."""
    count, names = 0, set()
    for graph in graphs:
        for node in graph.node:
            count += 1
            names.update(i for i in node.input if i)
            c, n = _subgraph_scan(_subgraphs(node))
            count, names = count + c, names | n
    return count, names


def _constant_tensor(node: Any) -> Any | None:
    import onnx

    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return a.t
        if a.name == "value_float":
            return onnx.helper.make_tensor(node.output[0], onnx.TensorProto.FLOAT, [], [a.f])
        if a.name == "value_floats":
            return onnx.helper.make_tensor(node.output[0], onnx.TensorProto.FLOAT, [len(a.floats)], list(a.floats))
    return None  # sparse_value or an integer/string constant: not a float weight


def _index(graph: Any) -> _Graph:
    nodes = list(graph.node)
    producer: dict[str, int] = {}
    consumers: dict[str, list[tuple[int, int]]] = {}
    constants: dict[str, Any] = {t.name: t for t in graph.initializer}
    subgraph_nodes: dict[int, int] = {}
    for idx, node in enumerate(nodes):
        for o in node.output:
            if o:
                producer[o] = idx
        for i, name in enumerate(node.input):
            if name:
                consumers.setdefault(name, []).append((idx, i))
        if node.op_type == "Constant" and node.output:
            t = _constant_tensor(node)
            if t is not None:
                constants[node.output[0]] = t
        subs = _subgraphs(node)
        if subs:
            count, names = _subgraph_scan(subs)
            subgraph_nodes[idx] = count
            for name in names:  # outer-scope reads: a weight used only inside an If branch is still a weight
                if name in constants or name in producer:
                    consumers.setdefault(name, []).append((idx, -1))
    inits = {t.name for t in graph.initializer}
    return _Graph(
        nodes=nodes,
        producer=producer,
        consumers=consumers,
        constants=constants,
        inputs={v.name for v in graph.input if v.name not in inits},
        outputs={v.name for v in graph.output},
        subgraph_nodes=subgraph_nodes,
    )


def _node_label(g: _Graph, idx: int) -> str:
    n = g.nodes[idx]
    return n.name or f"<{n.op_type} #{idx}>"


def _role(op_type: str, i: int) -> str:
    """What input `i` of an `op_type` node is: data (a weight), qparam, quantized, or meta."""
    if op_type in QDQ_OPS:
        return "qparam" if i in (1, 2) else "quantized"
    if i in META_INPUTS.get(op_type, ()):
        return "meta"
    return "data"


def _array(t: Any) -> np.ndarray | None:
    """Values of a TensorProto; None when they live in an external file that was not loaded."""
    import onnx
    from onnx import numpy_helper

    if t.data_location == onnx.TensorProto.EXTERNAL:
        return None  # to_array would read a path relative to the working directory
    try:
        return numpy_helper.to_array(t)
    except Exception:  # a malformed tensor in an untrusted file: reported as unreadable, never a crash
        return None


# --- element statistics -------------------------------------------------------------------


@dataclass(frozen=True)
class _Stats:
    total: int
    zeros: int
    nan: int
    inf: int
    over: int  # finite, |x| > max
    under: int  # 0 < |x| <= zero_limit
    subnormal: int  # zero_limit < |x| < smallest_normal
    max_abs: float  # largest finite |x|


def _stats(arr: np.ndarray, rng: FloatRange | None) -> _Stats:
    """Element counts by range, on the magnitude bits: integer compares, one pass each, no float temporaries."""
    flat = np.ascontiguousarray(arr).reshape(-1)
    if flat.size == 0:
        return _Stats(0, 0, 0, 0, 0, 0, 0, 0.0)
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
    return _Stats(int(flat.size), zeros, nan, inf, over, under, subnormal, max_abs)


# --- rules --------------------------------------------------------------------------------

Found = list[tuple[int, LintFinding]]  # (graph position, finding)


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


def _constant_findings(
    g: _Graph, name: str, arr: np.ndarray, stored: str, narrow_key: str | None, target: str
) -> Found:
    """One constant: one finding per problem (not per consumer), placed at its first consumer in graph order."""
    uses = [
        (n, i) for n, i in g.consumers.get(name, []) if i < 0 or _role(g.nodes[n].op_type, i) in ("data", "quantized")
    ]
    data_uses = [(n, i) for n, i in uses if i < 0 or _role(g.nodes[n].op_type, i) == "data"]
    key, converted, fallback = _range_key(narrow_key, bool(data_uses), target)
    rng = RANGES[key] if key else None
    s = _stats(arr, rng)
    pos = min(n for n, _ in (data_uses or uses))
    label, op = _node_label(g, pos), g.nodes[pos].op_type
    base: dict[str, Any] = {"total": s.total, "consumers": sorted({_node_label(g, n) for n, _ in uses})}
    if rng is not None:
        base.update({"target": key, "limit": rng.max})
        if fallback:
            base["fallback_for"] = target
    found: Found = []

    def add(kind: str, severity: str, count: int, message: str, **extra: Any) -> None:
        found.append((pos, LintFinding(kind, severity, label, op, name, message, count, {**base, **extra})))

    if s.nan or s.inf:
        add(
            "nonfinite_initializer",
            "high",
            s.nan + s.inf,
            f"{stored} constant '{name}' holds {s.nan} NaN and {s.inf} inf among {s.total} values; every output they reach is corrupted.",
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
            f"{s.over} of {s.total} values of '{name}' exceed the {rng.name} maximum {rng.max:g} (largest |x| = {s.max_abs:.4g}); "
            f"converted to {rng.name}{when} they become inf or are clamped to ±{rng.max:g}.",
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
            f"{s.under} of {s.total} values of '{name}'{which} are at or below {rng.zero_limit:.3g}, too small for {rng.name}{when}: "
            f"a cast makes them 0{clamp}.",
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


def _initializer_findings(g: _Graph, target: str) -> tuple[Found, list[str]]:
    """Range of every float constant that TensorRT would store in the target type."""
    import onnx

    T = onnx.TensorProto
    stored_name = {T.FLOAT: "FP32", T.DOUBLE: "FP64", T.FLOAT16: "FP16", T.BFLOAT16: "BF16"}
    narrow = {T.FLOAT16: "fp16", T.BFLOAT16: "bf16"}
    found: Found = []
    unread: list[str] = []
    for name, t in g.constants.items():
        if t.data_type not in stored_name:
            continue  # integers, strings, float8 (already-quantised data behind a DequantizeLinear)
        if not any(
            i < 0 or _role(g.nodes[n].op_type, i) in ("data", "quantized") for n, i in g.consumers.get(name, [])
        ):
            continue  # unused, Q/DQ scales (checked apart), or shape-like inputs
        arr = _array(t)
        if arr is None:
            unread.append(name)
            continue
        found += _constant_findings(g, name, arr, stored_name[t.data_type], narrow.get(t.data_type), target)
    return found, unread


def _qdq_param_findings(g: _Graph) -> tuple[Found, list[str]]:
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
            arr = _array(g.constants[name])
            if arr is None:
                unread.append(name)
                continue
            v = np.asarray(arr).astype(np.float64).reshape(-1)
            users = sorted({_node_label(g, n) for n, j in g.consumers.get(name, []) if j == i})
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
                        f"{node.op_type} '{_node_label(g, idx)}' uses scale '{name}' with {bad} of {v.size} values not finite and > 0 "
                        f"({zero} zero, {negative} negative, {nonfinite} inf/NaN); TensorRT rejects it or produces inf/NaN."
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
                        f"{node.op_type} '{_node_label(g, idx)}' uses zero point '{name}' with {bad} of {v.size} values not 0; "
                        "TensorRT supports only symmetric quantisation and refuses to build it."
                    ),
                )
                detail = {"total": int(v.size), "users": users}
            found.append(
                (idx, LintFinding(kind, "high", _node_label(g, idx), node.op_type, name, message, bad, detail))
            )
    return found, unread


def _from_dequantize(g: _Graph, name: str) -> bool:
    for _ in range(16):  # a bounded walk: a malformed cyclic graph cannot hang the lint
        idx = g.producer.get(name)
        if idx is None:
            return False
        node = g.nodes[idx]
        if node.op_type == "DequantizeLinear":
            return True
        if node.op_type not in PASS_THROUGH_OPS or not node.input:
            return False
        name = node.input[0]
    return False


def _coverage_findings(g: _Graph, target: str) -> Found:
    """Compute layers whose data or weight input lacks Q/DQ run in FP16/FP32, not the quantised type."""
    found: Found = []
    q = target.upper()
    for idx, node in enumerate(g.nodes):
        if node.op_type not in COMPUTE_OPS or len(node.input) < 2:
            continue
        labels = {
            0: "data input (input 0)",
            1: "weight (input 1)" if node.input[1] in g.constants else "second operand (input 1)",
        }
        missing = [i for i in (0, 1) if node.input[i] and not _from_dequantize(g, node.input[i])]
        if not missing:
            continue
        label = _node_label(g, idx)
        if len(missing) == 2:
            message = f"{node.op_type} '{label}' has no Q/DQ on its {labels[0]} or its {labels[1]}; TensorRT runs it in FP16/FP32, not {q}."
        else:
            has, lacks = labels[1 - missing[0]], labels[missing[0]]
            message = (
                f"{node.op_type} '{label}' has Q/DQ on its {has} but not on its {lacks}; "
                f"TensorRT cannot fuse it into an {q} kernel and runs it in higher precision."
            )
        detail = {"missing": [labels[i] for i in missing], "inputs": [node.input[0], node.input[1]], "target": target}
        found.append(
            (
                idx,
                LintFinding("qdq_uncovered", "medium", label, node.op_type, node.input[missing[0]], message, 1, detail),
            )
        )
    return found


@dataclass(frozen=True)
class _QParams:
    scale: np.ndarray  # float64, flat: one value, or one per channel of `axis`
    zero_point: np.ndarray  # float64, flat, 1 or scale.size values
    elem_type: int  # storage type of the quantised values
    axis: int
    blocked: bool  # opset 21 block quantisation: scales do not broadcast per axis


def _q_params(g: _Graph, qnode: Any) -> _QParams | None:
    """Constant scale/zero point of a QuantizeLinear; None when they are computed or unreadable."""
    import onnx

    scale_t = g.constants.get(qnode.input[1]) if len(qnode.input) > 1 else None
    scale = _array(scale_t) if scale_t is not None else None
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
        zp_arr = _array(zp_t) if zp_t is not None else None
        if zp_arr is None:
            return None
        elem, zp = zp_t.data_type, np.asarray(zp_arr)
    s = np.asarray(scale).astype(np.float64).reshape(-1)
    z = zp.astype(np.float64).reshape(-1)
    if s.size == 0 or z.size not in (1, s.size):
        return None
    return _QParams(s, z, elem, axis, blocked)


def _q_limit(g: _Graph, qnode: Any) -> float | None:
    """Largest |x| a QuantizeLinear represents without clipping; None when its scale is not a constant."""
    qp = _q_params(g, qnode)
    rng = _quant_range(qp.elem_type) if qp is not None else None
    if qp is None or rng is None:
        return None
    lim = np.maximum(rng[1] - qp.zero_point, qp.zero_point - rng[0]) * np.abs(qp.scale)
    return float(lim.max())


def _quantized_weight_findings(g: _Graph) -> Found:
    """Float weights quantised by a QuantizeLinear: values its scale clips, and (FP8) values that become 0."""
    import onnx

    found: Found = []
    fp8_e4m3 = _types("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ")
    floats = (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)
    for idx, node in enumerate(g.nodes):
        if node.op_type != "QuantizeLinear" or not node.input or node.input[0] not in g.constants:
            continue
        t = g.constants[node.input[0]]
        qp = _q_params(g, node)
        rng = _quant_range(qp.elem_type) if qp is not None else None
        if t.data_type not in floats or qp is None or rng is None or qp.blocked:
            continue
        w = _array(t)
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
        is_float = qp.elem_type in _fp8_types()
        margin = 0.0 if is_float else 0.5  # integers: round-to-nearest keeps up to half a step past the end
        clipped = int(np.count_nonzero((q > rng[1] - z + margin) | (q < rng[0] - z - margin)))
        label, total = _node_label(g, idx), int(w.size)
        base = {"total": total, "quantize_node": label, "target": onnx.TensorProto.DataType.Name(qp.elem_type).lower()}
        if clipped:
            msg = (
                f"{clipped} of {total} values of weight '{t.name}' fall outside the range of QuantizeLinear '{label}' "
                f"(|w| / scale beyond {rng[1]:g}) and are clipped."
            )
            found.append(
                (idx, LintFinding("weight_saturation", "medium", label, node.op_type, t.name, msg, clipped, base))
            )
        if qp.elem_type in fp8_e4m3:
            fp8 = RANGES["fp8"]
            a = np.abs(q)
            zero = int(np.count_nonzero((a <= fp8.zero_limit) & (w != 0)))
            if zero:
                share = zero / total
                msg = (
                    f"{zero} of {total} values ({share:.2%}) of weight '{t.name}' are nonzero but have |w| / scale at or below "
                    f"{fp8.zero_limit:.3g} for QuantizeLinear '{label}' and become 0 in {fp8.name}."
                )
                sev = "medium" if share >= SMALL_SHARE else "info"
                found.append(
                    (
                        idx,
                        LintFinding(
                            "weight_underflow", sev, label, node.op_type, t.name, msg, zero, {**base, "share": share}
                        ),
                    )
                )
    return found


def _activation_findings(g: _Graph, target: str, activation_max: Mapping[str, float]) -> Found:
    """Reference |activation| maxima against the range the tensor gets in the engine."""
    found: Found = []
    unknown_names: list[str] = []
    for name, value in activation_max.items():
        if name not in g.producer and name not in g.inputs:
            unknown_names.append(name)
            continue
        v = abs(float(value))
        pos = g.producer.get(name, -1)
        label = _node_label(g, pos) if pos >= 0 else None
        op = g.nodes[pos].op_type if pos >= 0 else None
        where = f"'{name}' (output of {op} '{label}')" if pos >= 0 else f"graph input '{name}'"
        uses = g.consumers.get(name, [])
        checks: list[tuple[str, bool]] = []  # (range key, fallback)
        if target in ("fp16", "bf16"):
            checks.append((target, False))
        elif target in ("int8", "fp8"):
            for n, i in uses:
                qn = g.nodes[n]
                if qn.op_type != "QuantizeLinear" or i != 0:
                    continue
                lim = _q_limit(g, qn)
                if lim is None or not lim > 0 or not v > lim:
                    continue
                ratio = v / lim if math.isfinite(v) else math.inf
                sev = "medium" if ratio > SATURATION_MEDIUM else "info"
                msg = (
                    f"{where} reaches |x| = {v:.4g} on the FP32 reference but QuantizeLinear '{_node_label(g, n)}' "
                    f"represents at most {lim:.4g}; larger values are clipped ({ratio:.3g}x the range)."
                )
                detail = {
                    "max_abs": v,
                    "limit": lim,
                    "ratio": ratio,
                    "quantize_node": _node_label(g, n),
                    "target": target,
                }
                found.append((pos, LintFinding("activation_saturation", sev, label, op, name, msg, 1, detail)))
                break
            if name in g.outputs or not uses or any(g.nodes[n].op_type != "QuantizeLinear" or i != 0 for n, i in uses):
                checks.append(("fp16", True))
        for key, fallback in checks:
            rng = RANGES[key]
            when = f" if FP16 is enabled next to {target.upper()}" if fallback else ""
            detail = {"max_abs": v, "target": key, "limit": rng.max}
            if fallback:
                detail["fallback_for"] = target
            if not math.isfinite(v):
                msg = f"{where} is already inf/NaN on the FP32 reference; it stays non-finite in {rng.name}."
                found.append((pos, LintFinding("activation_overflow", "high", label, op, name, msg, 1, detail)))
            elif v > rng.max:
                msg = f"{where} reaches |x| = {v:.4g} on the FP32 reference, above the {rng.name} maximum {rng.max:g}; it overflows to inf{when}."
                found.append((pos, LintFinding("activation_overflow", "high", label, op, name, msg, 1, detail)))
            elif v > CLOSE_TO_MAX * rng.max:
                msg = (
                    f"{where} reaches |x| = {v:.4g} on the FP32 reference, {v / rng.max:.0%} of the {rng.name} maximum {rng.max:g}; "
                    f"other inputs may overflow it{when}."
                )
                found.append((pos, LintFinding("activation_close_to_range", "medium", label, op, name, msg, 1, detail)))
    if unknown_names:
        msg = f"{len(unknown_names)} tensor(s) in activation_max are not activations of this graph and were not checked (e.g. '{unknown_names[0]}')."
        found.append(
            (
                len(g.nodes),
                LintFinding("activation_unknown", "info", None, None, None, msg, 1, {"names": unknown_names}),
            )
        )
    return found


def _structure_findings(g: _Graph, unread: list[str]) -> Found:
    """What the lint could not see, said once each."""
    found: Found = []
    if g.subgraph_nodes:
        first = min(g.subgraph_nodes)
        holders = [_node_label(g, i) for i in sorted(g.subgraph_nodes)]
        total = sum(g.subgraph_nodes.values())
        msg = (
            f"{len(holders)} control-flow node(s) ({g.nodes[first].op_type} '{holders[0]}'"
            f"{' and others' if len(holders) > 1 else ''}) hold {total} subgraph node(s) that the lint does not inspect."
        )
        detail = {"nodes": holders, "subgraph_nodes": total}
        found.append(
            (first, LintFinding("subgraph_skipped", "info", holders[0], g.nodes[first].op_type, None, msg, 1, detail))
        )
    if unread:
        names = sorted(set(unread))
        msg = f"{len(names)} constant(s) have no data here (external data not loaded, or unreadable), e.g. '{names[0]}'; their values were not checked."
        found.append(
            (
                len(g.nodes),
                LintFinding("external_data_not_loaded", "info", None, None, None, msg, 1, {"tensors": names}),
            )
        )
    return found


def lint_candidate(
    model: ModelLike,
    *,
    target: str | None = None,
    activation_max: Mapping[str, float] | None = None,
) -> list[LintFinding]:
    """Precision findings of `model` (an onnx.ModelProto or a path) built for `target` (auto-detected when None).

    `activation_max`: tensor name -> largest |x| seen when running the FP32 reference.
    Only the main graph is inspected; If/Loop/Scan bodies are reported once as skipped.
    """
    m = _as_model(model, weights=True)
    if target is None:
        target = target_precision(m)
    elif target not in TARGETS:
        raise UsageError(unknown("lint target", target, list(TARGETS)))
    g = _index(m.graph)
    found, unread = _initializer_findings(g, target)
    qdq, unread_q = _qdq_param_findings(g)
    found += qdq
    found += _quantized_weight_findings(g)
    if target in ("int8", "fp8"):
        found += _coverage_findings(g, target)
    if activation_max:
        found += _activation_findings(g, target, activation_max)
    found += _structure_findings(g, unread + unread_q)
    found.sort(key=lambda pf: (SEVERITY_RANK[pf[1].severity], pf[0], pf[1].kind, pf[1].tensor or ""))
    return [f for _, f in found]
