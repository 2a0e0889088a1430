"""Lint against the reference: every float constant of the candidate beside its counterpart in the FP32 model.

Converters clip what does not fit the narrow type: `onnxruntime.transformers.float16` turns a
BatchNormalization running variance of 1e8 into 65504, and values below 5.96e-8 into 5.96e-8.
The candidate's own values are then all in range, so a lint of the candidate alone finds
nothing; only the reference shows what changed. BatchNormalization statistics above 65504 are
common in real exports (rarely active channels).

A candidate constant is matched with the reference's by name, or, where a converter renamed it,
by the consuming node (same node name; unnamed nodes by their output names) and input slot,
looking through Casts the converter put between them. Per constant, one high finding per kind:
- `constant_saturated`: beyond the type's largest value in the reference, at ±max or ±inf now;
- `constant_flushed`: non-zero in the reference, zero now;
- `constant_changed`: off by more than the type's rounding (half an ulp, or half the smallest
  subnormal near zero) and by more than the rounding of the constant's largest value (so tiny
  weights clamped beside large ones, which the underflow lint reports, are not repeated here).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtverify.graph.onnxgraph import CAST_OPS, QDQ_OPS, GraphIndex
from trtverify.lint.findings import Found, at
from trtverify.lint.ranges import RANGES
from trtverify.util import halfcast


@dataclass(frozen=True)
class Rounding:
    name: str
    unit: float  # relative rounding error (half an ulp)
    tiny: float  # the smallest subnormal: rounding near zero is off by half of it at most
    max: float


def _roundings() -> dict[int, Rounding]:
    import onnx

    T = onnx.TensorProto
    fp16, bf16 = RANGES["fp16"], RANGES["bf16"]
    return {
        T.FLOAT16: Rounding("float16", 2.0**-11, fp16.smallest_subnormal, fp16.max),
        T.BFLOAT16: Rounding("bfloat16", 2.0**-8, bf16.smallest_subnormal, bf16.max),
        T.FLOAT: Rounding("float32", 2.0**-24, 2.0**-149, float(np.finfo(np.float32).max)),
    }


@dataclass
class Matched:
    """How many candidate float constants were compared, and which had no reference counterpart."""

    compared: int = 0
    unmatched: list[str] = field(default_factory=list)


def _node_key(g: GraphIndex, index: int) -> str:
    node = g.nodes[index]
    return node.name or "outputs:" + ",".join(node.output)


def _source_constant(g: GraphIndex, tensor: str) -> str | None:
    """The constant behind `tensor`, through any Casts."""
    for _ in range(4):
        if tensor in g.constants:
            return tensor
        p = g.producers.get(tensor)
        if p is None or p.op_type not in CAST_OPS:
            return None
        tensor = g.nodes[p.index].input[0]
    return None


def _counterparts(ref: GraphIndex, cand: GraphIndex) -> dict[str, str]:
    """Candidate constant -> reference constant: by name, else by consumer and input slot."""
    out = {name: name for name in cand.constants if name in ref.constants}
    ref_nodes = {_node_key(ref, i): i for i in range(len(ref.nodes))}
    for ci, node in enumerate(cand.nodes):
        ri = ref_nodes.get(_node_key(cand, ci))
        if ri is None or ref.nodes[ri].op_type != node.op_type:
            continue
        for slot, name in enumerate(node.input):
            const = _source_constant(cand, name) if name else None
            if const is None or const in out or slot >= len(ref.nodes[ri].input):
                continue
            ref_const = _source_constant(ref, ref.nodes[ri].input[slot])
            if ref_const is not None:
                out[const] = ref_const
    return out


def same_as_reference(ref: GraphIndex, cand: GraphIndex, names: Iterable[str]) -> set[str]:
    """Those of the candidate constants `names` whose reference counterpart holds the same values (NaN and inf
    included): the reference's own, not something the conversion made (a mask's -inf fill kept in FP32)."""
    pairs = _counterparts(ref, cand)
    out = set()
    for name in names:
        ref_name = pairs.get(name)
        if ref_name is None or name not in cand.constants:
            continue
        c, r = cand.values_of(cand.constants[name]), ref.values_of(ref.constants[ref_name])
        if c is not None and r is not None and c.shape == r.shape and c.dtype == r.dtype:
            if np.array_equal(c, r, equal_nan=c.dtype.kind == "f"):
                out.add(name)
    return out


def _quantization_only(g: GraphIndex, name: str) -> bool:
    """Read only as a Q/DQ scale or zero point (or quantised data): a quantisation parameter, not a weight."""
    uses = g.consumers.get(name, [])
    return bool(uses) and all(g.nodes[i].op_type in QDQ_OPS for i, _ in uses if i >= 0)


def _summary(values: np.ndarray) -> dict[str, float]:
    return {"min": float(values.min()), "max": float(values.max())}


# a reference constant this large is a fill at float32's extreme (finfo(float32).min, a mask's), not a weight
FILL = float(np.finfo(np.float32).max) / 2

# values compared at a time: the float64 comparison's temporaries stay near 30 MB whatever the weight's size; the
# fast path's are 2-byte or 4-byte, and it takes bigger blocks
BLOCK = 1 << 19
FAST_BLOCK = 1 << 22


# at most this many values a weight are set aside for the full comparison by the fast path; more, and the weight
# is compared whole, block by block (the set-aside copies never outgrow a block's temporaries)
SUSPECTS = BLOCK


def _nonzero(x: np.ndarray) -> int:
    """np.count_nonzero(x) for a float array (±0 are zeros), counted on its bits: numpy has no vector path
    for float16 (2.8 ns a value against 0.05)."""
    u = x.view(np.dtype(f"u{x.dtype.itemsize}"))
    return int(np.count_nonzero(u)) - int(np.count_nonzero(u == np.array(1 << (8 * x.dtype.itemsize - 1), u.dtype)))


def _suspects(c: np.ndarray, r: np.ndarray, rounding: Rounding) -> tuple[np.ndarray, np.ndarray, float] | None:
    """The values `_classify` could report, and the reference's largest |value|; None where the fast path cannot
    tell (a NaN, an inf or a value beyond the candidate's type in the reference, an unusual type pair, too many
    suspects). A value is no suspect when the candidate's is the reference's rounded to the candidate's type
    (bit for bit) and not a rounding to zero: `_classify` reports none of those. Most weights are plain
    conversions with a few tiny values clamped by the converter; deciding in the narrow type leaves only those
    few to the float64 comparison."""
    if c.dtype.kind != "f" or c.dtype.itemsize > r.dtype.itemsize or c.dtype == np.float64:
        return None
    cf, rf = c.reshape(-1), r.reshape(-1)
    bits = np.dtype(f"u{c.dtype.itemsize}")
    finite_max = float(np.finfo(c.dtype).max)
    rmax = 0.0
    kept: list[tuple[np.ndarray, np.ndarray]] = []
    count = 0
    with np.errstate(over="ignore", invalid="ignore"):
        for s in range(0, cf.size, FAST_BLOCK):
            cb, rb = cf[s : s + FAST_BLOCK], rf[s : s + FAST_BLOCK]
            top = max(float(rb.max()), -float(rb.min()))  # NaN anywhere: NaN, and the test below fails
            if not top <= finite_max:
                return None  # a value beyond the type (rounds to inf) or a NaN: the full comparison
            rmax = max(rmax, top)
            rounded = halfcast.cast(rb, c.dtype)
            if np.array_equal(cb.view(bits), rounded.view(bits)):
                if _nonzero(cb) == _nonzero(rb):
                    continue  # plainly rounded, nothing rounded to zero
                odd = (cb == 0) & (rb != 0)
            else:
                odd = (cb.view(bits) != rounded.view(bits)) | ((cb == 0) & (rb != 0))
            where = np.flatnonzero(odd)
            count += where.size
            if count > SUSPECTS:
                return None
            kept.append((cb[where], rb[where]))
    if not kept:
        return np.empty(0, c.dtype), np.empty(0, r.dtype), rmax
    return np.concatenate([k[0] for k in kept]), np.concatenate([k[1] for k in kept]), rmax


_Counted = tuple[int, dict[str, float], dict[str, float], float]


def _classify(c: np.ndarray, r: np.ndarray, rounding: Rounding, rmax: float | None = None) -> dict[str, _Counted]:
    """Per kind: (values, reference min/max, candidate min/max, reference |max|), block by block in float64.
    `rmax`: the reference's largest finite |value| where `c` and `r` are a part of the constant (its suspects)."""
    finite_any = rmax is not None
    if rmax is None:
        rmax = 0.0
        for s in range(0, r.size, BLOCK):
            rb = r[s : s + BLOCK].astype(np.float64)
            fin = np.isfinite(rb)
            if fin.any():
                finite_any = True
                rmax = max(rmax, float(np.abs(rb[fin]).max()))
    # a change matters when it exceeds the rounding of the constant's largest value: clamping a 1e-10
    # weight to 6e-8 beside weights of 0.5 does not (the underflow lint reports those), a x1.05 does
    scale = rounding.unit * rmax if finite_any else 0.0
    acc: dict[str, list] = {k: [0, [], [], 0.0] for k in ("constant_saturated", "constant_flushed", "constant_changed")}
    for s in range(0, r.size, BLOCK):
        c64, r64 = c[s : s + BLOCK].astype(np.float64), r[s : s + BLOCK].astype(np.float64)
        # a fill at the float32 extreme (a mask's finfo.min) saturated to the narrow type's extreme keeps its meaning
        # (as large as the type goes: a Softmax makes it an exact zero either way): the conversion meant that
        finite = np.isfinite(r64) & ~((np.abs(r64) >= FILL) & (np.abs(c64) >= rounding.max) & (c64 * r64 > 0))
        saturated = finite & (np.abs(r64) > rounding.max) & (np.abs(c64) >= rounding.max)
        flushed = finite & (r64 != 0) & (c64 == 0) & ~saturated & (np.abs(r64) > scale)
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.abs(c64 - r64)
            beyond = (diff > rounding.unit * np.abs(r64) + rounding.tiny / 2) & (diff > scale)
        changed = finite & ~saturated & ~flushed & beyond
        for kind, mask in (
            ("constant_saturated", saturated),
            ("constant_flushed", flushed),
            ("constant_changed", changed),
        ):
            n = int(np.count_nonzero(mask))
            if n:
                a = acc[kind]
                a[0] += n
                a[1].append(_summary(r64[mask]))
                a[2].append(_summary(c64[mask]))
                a[3] = max(a[3], float(np.abs(r64[mask]).max()))
    return {kind: (n, _merged(was), _merged(now), absmax) for kind, (n, was, now, absmax) in acc.items()}


def _merged(parts: list[dict[str, float]]) -> dict[str, float]:
    return {"min": min(p["min"] for p in parts), "max": max(p["max"] for p in parts)} if parts else {}


def _span(v: dict[str, float]) -> str:
    return f"{v['min']:.6g}" if v["min"] == v["max"] else f"{v['min']:.6g} .. {v['max']:.6g}"


def reference_constant_findings(ref: GraphIndex, cand: GraphIndex, matched: Matched | None = None) -> Found:
    """High findings for candidate constants saturated, flushed or changed beyond rounding against the reference."""
    roundings = _roundings()
    matched = matched if matched is not None else Matched()
    found: Found = []
    pairs = _counterparts(ref, cand)
    todo: list[tuple[str, Any, str, Rounding]] = []
    for name, tensor in cand.constants.items():
        rounding = roundings.get(tensor.data_type)
        if rounding is None or _quantization_only(cand, name):
            continue
        ref_name = pairs.get(name)
        if ref_name is None:
            matched.unmatched.append(name)
            continue
        todo.append((name, tensor, ref_name, rounding))

    def judged(item: tuple[str, Any, str, Rounding]) -> dict[str, _Counted] | None | bool:
        """False: not comparable; None: nothing to report; else the counts by kind. Each pair is read, judged
        and let go (memory-mapped: the pages leave with the arrays)."""
        name, tensor, ref_name, rounding = item
        c, r = cand.values_of(tensor), ref.values_of(ref.constants[ref_name])
        if c is None or r is None or c.shape != r.shape or r.dtype.kind != "f":
            return False
        suspects = _suspects(c, r, rounding)
        if suspects is None:
            return _classify(c.reshape(-1), r.reshape(-1), rounding)
        cs, rs, rmax = suspects
        if not cs.size:
            return None  # each value is the reference's rounded to the candidate's type: nothing to report
        counts = _classify(cs, rs, rounding, rmax)
        return counts if any(n for n, *_ in counts.values()) else None

    # numpy lets go of the GIL on big arrays: two weights at a time keep both cores busy
    big = sum(int(np.prod(t.dims)) for _, t, _, _ in todo if t.dims) > FAST_BLOCK
    with ThreadPoolExecutor(max_workers=min(2, os.cpu_count() or 1) if big else 1) as pool:
        results = list(pool.map(judged, todo))
    for (name, tensor, ref_name, rounding), masks in zip(todo, results):
        if masks is False:
            continue
        matched.compared += 1
        if masks is None or masks is True:
            continue
        size = int(np.prod(tensor.dims)) if tensor.dims else 1
        uses = sorted(cand.consumers.get(name, []))
        users = [cand.label(i) for i, _ in uses if i >= 0]
        first = uses[0][0] if uses else len(cand.nodes)
        node = cand.label(first) if uses else None
        op = cand.nodes[first].op_type if uses else None
        for kind, verb in (
            ("constant_saturated", "saturated to"),
            ("constant_flushed", "flushed to"),
            ("constant_changed", "changed to"),
        ):
            n, was, now, absmax = masks[kind]
            if not n:
                continue
            shown, became = _span(was), _span(now)
            known_as = f" ('{ref_name}')" if ref_name != name else ""
            message = (
                f"'{name}' of {op} '{node}' is {shown} in the reference{known_as} and {verb} {became} in "
                f"{rounding.name} ({n} of {size} values); keep this node in FP32"
                + (" or fold the BatchNormalization before converting" if op == "BatchNormalization" else "")
            )
            detail = {
                "reference": ref_name,
                "reference_min": was["min"],
                "reference_max": was["max"],
                "reference_absmax": absmax,
                "became": now,
                "dtype": rounding.name,
                "consumers": users,
            }
            found.append(at(first, kind, "high", message, node=node, op_type=op, tensor=name, count=n, detail=detail))
    return found
