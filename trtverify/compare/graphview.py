"""One ONNX graph as structural pairing sees it: the values it computes, looked at through what lowering
inserts, and each node's operation and parameters normalised across exporters and opsets.

- A Cast between float types, a QuantizeLinear/DequantizeLinear or an Identity reading a value passes it on
  (FP16 converters, quantisers and exporters insert them): the value it passes on is its *root*, and a
  node reading `Cast(x)` reads `x` here.
- A node's *family* is its operation: fused and quantised forms count as the plain op (semantic.family);
  Reshape, Flatten, Squeeze and Unsqueeze are one reshape (the output is the input's values in order, its
  shape alone tells them apart); a global pool is the reduction it is.
- A Q/DQ pair whose zero point is the lowest quantised value clamps at zero: after a node whose output can be
  negative it *is* a Relu (ONNX Runtime's quantiser folds a Relu after a Conv or an Add into it), and is seen as
  one here; after a non-negative value (a Relu, a Softmax, a pool of them) it changes nothing and passes it on.
- Its *parameters* are its attributes with ONNX's defaults filled in, negative axes normalised by the rank,
  and the inputs that other opsets take as attributes (ReduceMean's and Squeeze's axes, Clip's bounds) read in.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtverify.compare.constants import Const, Constants
from trtverify.graph.onnxgraph import CAST_OPS, QDQ_OPS, GraphIndex

RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
# a global pool is the reduction over every spatial axis, kept (the output's shape says which axes)
POOLS = {"GlobalAveragePool": "ReduceMean", "GlobalMaxPool": "ReduceMax"}
FLOAT_TYPES = frozenset({1, 10, 11, 16})  # float, float16, double, bfloat16
# inputs that older opsets held as attributes (both forms appear across exporters' opsets)
ATTR_INPUTS = {("Squeeze", 1): "axes", ("Unsqueeze", 1): "axes", ("Clip", 1): "min", ("Clip", 2): "max"}
UNKNOWN = object()  # a parameter computed at run time that no run observed
# ops whose output is never negative, and ops whose output is non-negative where their data inputs are
NON_NEGATIVE = frozenset({"Relu", "Sigmoid", "Softmax", "Abs", "Exp", "Sqrt", "HardSigmoid", "Softplus", "Shape"})
KEEPS_SIGN = frozenset({"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax",
                        "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Resize", "Upsample",
                        "Slice", "Gather", "Split", "Identity", "Cast", "QuantizeLinear", "DequantizeLinear", "Max",
                        "Min", "Tile", "Expand", "DepthToSpace", "SpaceToDepth", "Pad"})  # fmt: skip
QMIN = {2: 0, 3: -128, 4: 0, 5: -32768}  # uint8, int8, uint16, int16
CLAMP = "Relu"  # what a clamping Q/DQ pair is seen as


def family(op_type: str) -> str:
    from trtverify.compare.semantic import family as semantic_family

    return "Reshape" if op_type in RESHAPES else POOLS.get(op_type) or semantic_family(op_type)


def passes_on(node: Any) -> bool:
    """A node that passes its first input on, quantised or cast (what converters insert)."""
    if node.op_type in QDQ_OPS or node.op_type == "Identity":
        return node.op_type != "DynamicQuantizeLinear" and bool(node.input)
    if node.op_type in CAST_OPS and node.input:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        return node.op_type == "CastLike" or to in FLOAT_TYPES
    return False


def moved(op_type: str, pos: int) -> str | None:
    """The attribute name of an input that older opsets took as an attribute (axes, Clip's bounds)."""
    if pos == 1 and op_type.startswith("Reduce"):
        return "axes"
    return ATTR_INPUTS.get((op_type, pos))


@functools.lru_cache(maxsize=512)
def _defaults(op_type: str, domain: str) -> dict[str, Any]:
    import onnx

    try:
        schema = onnx.defs.get_schema(op_type, domain)
    except Exception:  # noqa: BLE001 - a custom op: no defaults known
        return {}
    out = {}
    for name, a in schema.attributes.items():
        if a.default_value is not None and a.default_value.type:
            out[name] = onnx.helper.get_attribute_value(a.default_value)
    return out


def _normal(name: str, value: Any, rank: int | None) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if name in ("axis", "axes") and rank is not None:
        if isinstance(value, int):
            return value % rank if -rank <= value < rank else value
        if isinstance(value, list):
            return sorted(v % rank if -rank <= v < rank else v for v in value)
    if isinstance(value, list):
        return [round(v, 6) if isinstance(v, float) else v for v in value]
    if hasattr(value, "SerializeToString"):
        return value.SerializeToString()
    return round(value, 6) if isinstance(value, float) else value


def same_value(a: Any, b: Any) -> bool:
    """Two parameters equal (floats up to FP16's rounding: a Clip bound stored in FP16)."""
    if a is UNKNOWN or b is UNKNOWN:
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, float) or isinstance(b, float):
        try:
            return a == b or bool(np.isclose(float(a), float(b), rtol=1e-3, atol=0.0))
        except (TypeError, ValueError):
            return False
    return bool(a == b)


@dataclass
class View:
    """One graph as the matcher sees it: lowering's pass-through nodes looked through."""

    g: GraphIndex
    live: set[str]  # tensors derived from the graph inputs
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    observed: dict[str, Any] = field(default_factory=dict)  # shape arithmetic's values, as a run computed them
    consts: Constants = field(init=False)
    root: dict[str, str] = field(default_factory=dict)  # tensor -> the value it passes on (itself if computed)
    consumers: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    core: list[int] = field(default_factory=list)  # nodes computing a live value (not passing one on)
    clamps: dict[int, str] = field(default_factory=dict)  # DequantizeLinear of a clamping Q/DQ pair -> what it reads
    _params: dict[int, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.consts = Constants(self.g, self.shapes)
        signless: set[str] = set()  # values known never to be negative
        for idx, node in enumerate(self.g.nodes):
            outs = [o for o in node.output if o]
            if not any(o in self.live for o in outs):
                continue
            data = [i for i in node.input if i in self.live]
            if node.op_type in NON_NEGATIVE or (node.op_type in KEEPS_SIGN and data and set(data) <= signless):
                signless.update(outs)
            clamped = self._clamped(node)
            if clamped is not None and clamped not in signless:
                self.clamps[idx] = clamped  # a Relu folded into the Q/DQ pair: the clamp is its own value
                signless.update(outs)
            if idx not in self.clamps and passes_on(node) and node.input[0] in self.live:
                self.root[outs[0]] = self.root.get(node.input[0], node.input[0])
            else:
                self.core.append(idx)
                for o in outs:
                    self.root[o] = o
        for idx in self.core:
            for pos, i in enumerate(self.ins(idx)):
                if i in self.live:
                    self.consumers[self.root.get(i, i)].append((idx, pos))

    def _clamped(self, node: Any) -> str | None:
        """What a DequantizeLinear clamps at zero: the input of its QuantizeLinear, where that one's zero point is
        the lowest quantised value (absent: uint8's 0)."""
        if node.op_type != "DequantizeLinear" or not node.input or node.input[0] not in self.g.producers:
            return None
        q = self.g.nodes[self.g.producers[node.input[0]].index]
        if q.op_type != "QuantizeLinear" or not q.input or q.input[0] not in self.live:
            return None
        zp_name = q.input[2] if len(q.input) > 2 else ""
        if not zp_name:
            return q.input[0]  # uint8, zero point 0
        t = self.g.constants.get(zp_name)
        zp = self.consts.get(zp_name)
        if t is None or zp is None or t.data_type not in QMIN:
            return None
        return q.input[0] if bool(np.all(zp.values == QMIN[t.data_type])) else None

    def op(self, idx: int) -> str:
        return CLAMP if idx in self.clamps else self.g.nodes[idx].op_type

    def ins(self, idx: int) -> list[str]:
        return [self.clamps[idx]] if idx in self.clamps else list(self.g.nodes[idx].input)

    def outs(self, idx: int) -> list[str]:
        return list(self.g.nodes[idx].output)

    def of(self, tensor: str) -> str:
        return self.root.get(tensor, tensor)

    def set_shapes(self, shapes: dict[str, tuple[int, ...]]) -> None:
        """The tensors' shapes, once a run gave them: the shape arithmetic evaluates from them."""
        self.shapes = shapes
        self.consts.with_shapes(shapes)
        self._params.clear()

    def kind(self, tensor: str) -> str:
        """'live' (a value from the inputs), 'const' (its value known), 'param' (shape arithmetic no run
        observed: equal to anything but a live value) or '' (absent)."""
        if not tensor:
            return ""
        if tensor in self.live:
            return "live"
        return "const" if self.value(tensor) is not None else "param"

    def value(self, tensor: str) -> Const | None:
        c = self.consts.get(tensor)
        if c is None and tensor in self.observed:
            v = np.asarray(self.observed[tensor])
            c = Const(v, {np.dtype(np.float32): 2.0**-24, np.dtype(np.float16): 2.0**-11}.get(v.dtype, 0.0))
        return c

    def unknown_inputs(self) -> list[str]:
        """Inputs of the computing nodes that are neither values from the inputs nor constants evaluated here
        (shape arithmetic whose shapes are not known yet, or of ops not evaluated here: a run says what they
        hold)."""
        out = []
        for idx in self.core:
            for t in self.ins(idx):
                if t and t not in self.live and self.consts.get(t) is None:
                    out.append(t)
        return list(dict.fromkeys(out))

    def producer(self, tensor: str) -> int | None:
        p = self.g.producers.get(tensor)
        return p.index if p is not None else None

    def shape(self, tensor: str) -> tuple[int, ...] | None:
        return self.shapes.get(tensor)

    def rank(self, idx: int) -> int | None:
        for t in self.ins(idx)[:1] + self.outs(idx)[:1]:
            s = self.shapes.get(t)
            if s is not None:
                return len(s)
        return None

    def params(self, idx: int, defaults: bool) -> dict[str, Any]:
        """A node's attributes, normalised, with the inputs other opsets take as attributes read in; with
        `defaults`, ONNX's default for every attribute it leaves out."""
        if idx in self.clamps:
            return {}
        if idx not in self._params:
            import onnx

            node = self.g.nodes[idx]
            rank = self.rank(idx)
            out = {a.name: _normal(a.name, onnx.helper.get_attribute_value(a), rank) for a in node.attribute}
            for pos, t in enumerate(node.input):
                name = moved(node.op_type, pos)
                if name and t:
                    c = self.value(t)
                    values = c.values.reshape(-1).tolist() if c is not None else None
                    if values is not None and name != "axes":
                        values = values[0] if len(values) == 1 else values
                    out[name] = UNKNOWN if values is None else _normal(name, values, rank)
            self._params[idx] = out
        out = self._params[idx]
        if not defaults:
            return out
        node = self.g.nodes[idx]
        rank = self.rank(idx)
        return {**{k: _normal(k, v, rank) for k, v in _defaults(node.op_type, node.domain).items()}, **out}
