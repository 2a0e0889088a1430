"""The values of constant inputs, as two exports or a lowered graph hold them, and whether two are equal up to
the precision they were stored in.

A weight reaches a node directly (an initializer, a Constant node) or through nodes that only restate it:
Identity (the TorchScript exporter's shared weights), Cast (FP16 converters), DequantizeLinear (INT8 QDQ
weights), Transpose and the reshaping ops. Each is evaluated here in numpy, with the error its storage allows:
half an ULP of its float type, half a quantisation step of a dequantised weight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from trtverify.graph.onnxgraph import GraphIndex

# relative rounding error of a value stored in each ONNX float type (half an ULP)
_EPS = {1: 2.0**-24, 10: 2.0**-11, 16: 2.0**-8, 11: 2.0**-53}
_SUBNORMAL = {10: 2.0**-25, 16: 2.0**-134}  # absolute rounding error near zero (FP16's subnormal step / 2)
MAX_DEPTH = 8
# relative slack between two float32 computations of one constant by two exporters (a BatchNormalization folded
# into a Conv by each): far below what tells two different weights apart
SLACK = 1e-5


@dataclass(frozen=True)
class Const:
    """A constant's values and the absolute error its storage allows at each position."""

    values: np.ndarray
    rel: float = 0.0  # relative error of each value
    abs: float = 0.0  # absolute error of each value (a quantisation step / 2, a subnormal step / 2)

    @property
    def is_float(self) -> bool:
        return self.values.dtype.kind == "f"

    def squeezed(self) -> tuple[int, ...]:
        return tuple(d for d in self.values.shape if d != 1)

    def distinctive(self) -> bool:
        """Values that tell one weight from another (not one value repeated: zeros, ones, a scalar)."""
        v = self.values
        return self.is_float and v.size >= 2 and bool(np.ptp(v) > 0)


def _attr(node: Any, name: str, default: Any = None) -> Any:
    import onnx

    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


class Constants:
    """The constant values of one graph, evaluated on first use and kept."""

    def __init__(self, g: GraphIndex):
        self.g = g
        self._cache: dict[str, Const | None] = {}

    def get(self, tensor: str) -> Const | None:
        if tensor not in self._cache:
            self._cache[tensor] = self._eval(tensor, 0)
        return self._cache[tensor]

    def _eval(self, tensor: str, depth: int) -> Const | None:
        g = self.g
        if tensor in g.constants:
            t = g.constants[tensor]
            values = g.values_of(t)
            if values is None:
                return None
            arr = np.asarray(values)
            return Const(arr, _EPS.get(t.data_type, 0.0), _SUBNORMAL.get(t.data_type, 0.0))
        p = g.producers.get(tensor)
        if p is None or depth > MAX_DEPTH:
            return None
        node = g.nodes[p.index]
        op = node.op_type
        try:
            return self._apply(node, op, depth)
        except (ValueError, IndexError, TypeError):  # an unusual form (block quantisation, ...): not evaluated
            return None

    def _input(self, node: Any, i: int, depth: int) -> Const | None:
        if i >= len(node.input) or not node.input[i]:
            return None
        name = node.input[i]
        if name not in self._cache:
            self._cache[name] = self._eval(name, depth + 1)
        return self._cache[name]

    def _apply(self, node: Any, op: str, depth: int) -> Const | None:
        x = self._input(node, 0, depth)
        if x is None:
            return None
        if op == "Identity":
            return x
        if op == "Cast":
            import onnx

            to = int(_attr(node, "to", 0))
            if to in _EPS:
                dtype = onnx.helper.tensor_dtype_to_np_dtype(to) if to != 16 else np.dtype(np.float32)
                return Const(x.values.astype(dtype), x.rel + _EPS[to], x.abs + _SUBNORMAL.get(to, 0.0))
            if to and x.values.dtype.kind in "iub":
                return Const(x.values.astype(onnx.helper.tensor_dtype_to_np_dtype(to)))
            return None
        if op == "QuantizeLinear":  # a weight quantised as an activation (a shared weight behind an Identity)
            return self._quantize(node, x, depth)
        if op == "DequantizeLinear":
            scale = self._input(node, 1, depth)
            if scale is None or _attr(node, "block_size", 0):
                return None
            zp = self._input(node, 2, depth)
            s = scale.values.astype(np.float64)
            z = zp.values.astype(np.float64) if zp is not None else np.zeros(1)
            q = x.values.astype(np.float64)
            if s.size > 1:  # per channel along `axis`
                shape = [1] * q.ndim
                shape[int(_attr(node, "axis", 1)) % q.ndim] = s.size
                s = s.reshape(shape)
                z = z.reshape(shape) if z.size > 1 else z
            q = q - z
            # half a step, plus what the quantised value already carried (a weight quantised twice)
            return Const((q * s).astype(np.float32), 2.0**-24 + x.rel, float(np.max(np.abs(s))) / 2 + x.abs)
        if op == "Transpose":
            perm = _attr(node, "perm")
            return Const(np.transpose(x.values, perm), x.rel, x.abs)
        if op in ("Reshape", "Flatten", "Squeeze", "Unsqueeze"):
            shape = self._shape_of(node, op, x.values, depth)
            return Const(x.values.reshape(shape), x.rel, x.abs) if shape is not None else None
        return None

    def _quantize(self, node: Any, x: Const, depth: int) -> Const | None:
        scale = self._input(node, 1, depth)
        zp = self._input(node, 2, depth)
        if scale is None or _attr(node, "block_size", 0) or not x.is_float:
            return None
        dtype = zp.values.dtype if zp is not None else np.dtype(np.uint8)
        if dtype.kind not in "iu":
            return None  # FP8 and other float quantisation: not evaluated here
        s, z = scale.values.astype(np.float64), zp.values.astype(np.float64) if zp is not None else np.zeros(1)
        v = x.values.astype(np.float64)
        if s.size > 1:
            shape = [1] * v.ndim
            shape[int(_attr(node, "axis", 1)) % v.ndim] = s.size
            s, z = s.reshape(shape), z.reshape(shape) if z.size > 1 else z
        info = np.iinfo(dtype)  # the error `x` carried goes with it, for the DequantizeLinear to add its own
        return Const(np.clip(np.rint(v / s) + z, info.min, info.max).astype(dtype), x.rel, x.abs)

    def _shape_of(self, node: Any, op: str, arr: np.ndarray, depth: int) -> tuple[int, ...] | None:
        if op == "Flatten":
            axis = int(_attr(node, "axis", 1)) % (arr.ndim + 1) if arr.ndim else 0
            return (int(np.prod(arr.shape[:axis])), int(np.prod(arr.shape[axis:])))
        if op == "Reshape":
            s = self._input(node, 1, depth)
            if s is None:
                return None
            dims = [int(d) for d in s.values.reshape(-1)]
            dims = [arr.shape[i] if d == 0 and i < arr.ndim else d for i, d in enumerate(dims)]
            return tuple(np.reshape(arr, dims).shape)
        axes_in = self._input(node, 1, depth)
        axes = axes_in.values.reshape(-1).tolist() if axes_in is not None else _attr(node, "axes")
        if op == "Squeeze":
            if axes is None:
                return tuple(d for d in arr.shape if d != 1)
            drop = {int(a) % arr.ndim for a in axes}
            return tuple(d for i, d in enumerate(arr.shape) if i not in drop)
        if axes is None:
            return None
        out = list(arr.shape)
        rank = arr.ndim + len(axes)
        for a in sorted(int(a) % rank for a in axes):
            out.insert(a, 1)
        return tuple(out)


def equal(a: Const, b: Const) -> bool:
    """Whether two constants hold one value up to the precision each was stored in (shapes compared without
    their 1s: a bias [C] and [C, 1, 1] hold the same values)."""
    if a.squeezed() != b.squeezed():
        return False
    x, y = a.values.reshape(-1), b.values.reshape(-1)
    if not (a.is_float and b.is_float):
        return x.dtype.kind in "iub" and y.dtype.kind in "iub" and bool(np.array_equal(x, y))
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    if not (np.isfinite(x64).all() and np.isfinite(y64).all()):
        return bool(np.array_equal(x64, y64, equal_nan=True))
    size = np.maximum(np.abs(x64), np.abs(y64))
    scale = float(size.max()) if size.size else 0.0
    allowed = (a.rel + b.rel) * size + a.abs + b.abs + SLACK * scale
    return bool(np.all(np.abs(x64 - y64) <= allowed))


def zeros(c: Const | None) -> bool:
    return c is not None and c.is_float and not np.any(c.values)
