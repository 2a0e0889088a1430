"""The values of constant inputs, as two exports or a lowered graph hold them, and whether two are equal up to
the precision they were stored in.

A weight reaches a node directly (an initializer, a Constant node) or through nodes that only restate it:
Identity (the TorchScript exporter's shared weights), Cast (FP16 converters), DequantizeLinear (INT8 QDQ
weights), Transpose and the reshaping ops. Each is evaluated here in numpy, with the error its storage allows:
half an ULP of its float type, half a quantisation step of a dequantised weight.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtverify.graph.onnxgraph import GraphIndex

# relative rounding error of a value stored in each ONNX float type (half an ULP)
_EPS = {1: 2.0**-24, 10: 2.0**-11, 16: 2.0**-8, 11: 2.0**-53}
_SUBNORMAL = {10: 2.0**-25, 16: 2.0**-134}  # absolute rounding error near zero (FP16's subnormal step / 2)
MAX_DEPTH = 64  # nodes between a constant and what reads it (shape arithmetic runs deep)
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
    """The constant values of one graph, evaluated on first use and kept; with the shapes of its tensors (`shapes`,
    as a run gave them), its shape arithmetic too (a Reshape's target, an attention's scale computed from Shape)."""

    def __init__(self, g: GraphIndex, shapes: Mapping[str, tuple[int, ...]] | None = None):
        self.g = g
        self.shapes: Mapping[str, tuple[int, ...]] = shapes or {}
        self._cache: dict[str, Const | None] = {}

    def with_shapes(self, shapes: Mapping[str, tuple[int, ...]]) -> None:
        """Evaluate from these shapes on (what was evaluated without them is forgotten)."""
        self.shapes = shapes
        self._cache.clear()

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
            with np.errstate(all="raise"):
                return self._apply(node, op, depth)
        except (ValueError, IndexError, TypeError, ArithmeticError):  # an unusual form, a division by 0: unknown
            return None

    def _input(self, node: Any, i: int, depth: int) -> Const | None:
        if i >= len(node.input) or not node.input[i]:
            return None
        name = node.input[i]
        if name not in self._cache:
            self._cache[name] = self._eval(name, depth + 1)
        return self._cache[name]

    def _apply(self, node: Any, op: str, depth: int) -> Const | None:
        if op in ("Shape", "Size") and node.input and node.input[0] in self.shapes:
            dims = np.array(self.shapes[node.input[0]], dtype=np.int64)
            if op == "Size":
                return Const(np.array(np.prod(dims), dtype=np.int64))
            start, end = int(_attr(node, "start", 0)), _attr(node, "end")
            return Const(dims[start : None if end is None else int(end)])
        if op == "Constant":
            return _constant(node)
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
        return self._arithmetic(node, op, x, depth)

    def _arithmetic(self, node: Any, op: str, x: Const, depth: int) -> Const | None:
        """The shape arithmetic exporters write (small tensors only): what a run would compute."""
        ins = [x] + [self._input(node, i, depth) for i in range(1, len(node.input))]
        if any(c is None for c in ins) or any(c.values.size > SMALL for c in ins if c is not None):
            return None
        v = [c.values for c in ins if c is not None]
        rel = max(c.rel for c in ins if c is not None) * 2
        if op in _UNARY:
            out = _UNARY[op](v[0])
        elif op in _BINARY and len(v) == 2:
            if op == "Div" and v[0].dtype.kind in "iu" and v[1].dtype.kind in "iu":
                out = np.trunc(v[0] / v[1]).astype(np.result_type(v[0], v[1]))  # ONNX's integer Div
            else:
                out = _BINARY[op](v[0], v[1])
        elif op == "Mod" and len(v) == 2:
            out = (np.fmod if int(_attr(node, "fmod", 0)) else np.mod)(v[0], v[1])
        elif op == "Gather":
            out = np.take(v[0], v[1].astype(np.int64), axis=int(_attr(node, "axis", 0)))
        elif op == "Concat":
            out = np.concatenate([a.reshape(-1) if a.ndim == 0 else a for a in v], axis=int(_attr(node, "axis", 0)))
        elif op == "Slice" and len(v) >= 3:
            axes = v[3].tolist() if len(v) > 3 else list(range(len(v[1])))
            steps = v[4].tolist() if len(v) > 4 else [1] * len(axes)
            index = [slice(None)] * v[0].ndim
            for a, b, e, st in zip(axes, v[1].tolist(), v[2].tolist(), steps):
                index[int(a)] = slice(int(b), int(e), int(st))
            out = v[0][tuple(index)]
        elif op == "Where" and len(v) == 3:
            out = np.where(v[0], v[1], v[2])
        elif op == "ConstantOfShape":
            fill = _attr(node, "value")
            from onnx import numpy_helper

            value = numpy_helper.to_array(fill) if fill is not None else np.zeros(1, np.float32)
            out = np.full(v[0].astype(np.int64).tolist(), value.reshape(-1)[0], dtype=value.dtype)
        elif op == "Range" and len(v) == 3:
            out = np.arange(v[0].item(), v[1].item(), v[2].item(), dtype=v[0].dtype)
        else:
            return None
        out = np.asarray(out)
        return Const(out, rel if out.dtype.kind == "f" else 0.0) if out.size <= SMALL else None

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


SMALL = 1 << 16  # shape arithmetic: tensors of at most this many values
_UNARY = {"Sqrt": np.sqrt, "Neg": np.negative, "Reciprocal": np.reciprocal, "Abs": np.abs, "Floor": np.floor,
          "Ceil": np.ceil, "Not": np.logical_not}  # fmt: skip
_BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power,
           "Equal": np.equal, "Less": np.less, "Greater": np.greater, "Max": np.maximum, "Min": np.minimum,
           "And": np.logical_and, "Or": np.logical_or}  # fmt: skip


def _constant(node: Any) -> Const | None:
    """A Constant node's value, of whichever attribute holds it."""
    from onnx import numpy_helper

    for a in node.attribute:
        if a.name == "value":
            return Const(numpy_helper.to_array(a.t), _EPS.get(a.t.data_type, 0.0))
        if a.name == "value_int":
            return Const(np.array(a.i, dtype=np.int64))
        if a.name == "value_ints":
            return Const(np.array(list(a.ints), dtype=np.int64))
        if a.name == "value_float":
            return Const(np.array(a.f, dtype=np.float32), _EPS[1])
        if a.name == "value_floats":
            return Const(np.array(list(a.floats), dtype=np.float32), _EPS[1])
    return None


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
