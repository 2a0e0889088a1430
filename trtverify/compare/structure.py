"""Structural pairing: the tensors of two exports of one model that hold the same value, found by what computes
them, where their names differ (a TorchScript export against a dynamo export of the same module).

Two nodes are *equivalent* when they do the same operation (same op type, or fused/quantised forms of one:
`semantic.family`; Reshape, Flatten, Squeeze and Unsqueeze are one layout-preserving reshape, equal where
their outputs' shapes are), with the same attributes (ONNX defaults filled in, negative axes normalised),
on equivalent inputs: each data input already paired with the other's, each constant input equal up to the
precision it is stored in (a candidate's FP16 weight or INT8 dequantised weight against the reference's FP32
one: `constants.equal`), and their outputs of equal shapes. Lowering is looked through: the Cast, Q/DQ
and Identity nodes converters insert pass a value on, so a node reading `Cast(x)` reads `x` here.

Pairs grow from seeds, the graph inputs and the pairs names already made, and from *anchors*, nodes whose
weights are distinctive (not zeros or ones) and equal on both sides, one node on each side:

- forward: the consumers of a paired tensor that are equivalent on both sides pair their outputs;
- backward: where two paired outputs come from equivalent nodes, their unpaired data inputs pair too
  (when their producers are equivalent as well);
- a clamp (Relu, Clip) a quantiser folded into the Q/DQ pair after a node pairs with that pair's
  DequantizeLinear output.

Every rule pairs only where exactly one node on each side fits: where exporters decompose differently (a
LayerNorm, an attention or a GELU as different node sets) the tensors inside stay unpaired, and pairing
resumes after them at the next anchor. A wrong pair would be worse than none: no value is ever compared to
choose a pair.
"""

from __future__ import annotations

import functools
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtverify.compare.constants import Const, Constants, equal, zeros
from trtverify.graph.onnxgraph import CAST_OPS, QDQ_OPS, GraphIndex

RESHAPES = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze"})
COMMUTATIVE = frozenset({"Add", "Mul", "Sum", "Max", "Min", "Mean", "And", "Or", "Xor", "Equal"})
CLAMPS = frozenset({"Relu", "Clip"})
FLOAT_TYPES = frozenset({1, 10, 11, 16})  # float, float16, double, bfloat16
# optional inputs whose absence means zeros: a bias
BIAS_SLOTS = frozenset({("Conv", 2), ("ConvTranspose", 2), ("Gemm", 2)})
# inputs that older opsets held as attributes (both forms appear across exporters' opsets)
ATTR_INPUTS = {("Squeeze", 1): "axes", ("Unsqueeze", 1): "axes", ("Clip", 1): "min", ("Clip", 2): "max"}
REDUCES = ("Reduce",)
MAX_ROUNDS = 6


# a global pool is the reduction over every spatial axis, kept (the output's shape says which axes)
POOLS = {"GlobalAveragePool": "ReduceMean", "GlobalMaxPool": "ReduceMax"}


def family(op_type: str) -> str:
    from trtverify.compare.semantic import family as semantic_family

    return "Reshape" if op_type in RESHAPES else POOLS.get(op_type) or semantic_family(op_type)


@dataclass(frozen=True)
class Found:
    """A pair structure made: reference tensor, candidate tensor, and why."""

    reference: str
    candidate: str
    why: str
    candidate_node: str
    candidate_op_type: str


@dataclass
class View:
    """One graph as the matcher sees it: lowering's pass-through nodes looked through."""

    g: GraphIndex
    live: set[str]  # tensors derived from the graph inputs
    shapes: Mapping[str, tuple[int, ...]]
    observed: Mapping[str, Any] = field(default_factory=dict)  # shape arithmetic's values, as a run computed them
    consts: Constants = field(init=False)
    root: dict[str, str] = field(default_factory=dict)  # tensor -> the value it passes on (itself if computed)
    consumers: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    core: list[int] = field(default_factory=list)  # nodes computing a live value (not passing one on)

    def __post_init__(self) -> None:
        self.consts = Constants(self.g)
        passing: set[int] = set()
        for idx, node in enumerate(self.g.nodes):
            outs = [o for o in node.output if o]
            if not any(o in self.live for o in outs):
                continue
            if passes_on(node) and node.input[0] in self.live:
                passing.add(idx)
                self.root[outs[0]] = self.root.get(node.input[0], node.input[0])
            else:
                self.core.append(idx)
                for o in outs:
                    self.root[o] = o
        for idx in self.core:
            for pos, i in enumerate(self.g.nodes[idx].input):
                if i in self.live:
                    self.consumers[self.root.get(i, i)].append((idx, pos))

    def reroot(self, tensor: str) -> None:
        """Make a pass-through's output a value of its own (a DequantizeLinear that does a clamp)."""
        old = self.of(tensor)
        if old == tensor:
            return
        self.root[tensor] = tensor
        moved = [(i, p) for i, p in self.consumers.get(old, []) if tensor in self.g.nodes[i].input]
        self.consumers[tensor] = moved
        self.consumers[old] = [x for x in self.consumers.get(old, []) if x not in moved]

    def of(self, tensor: str) -> str:
        return self.root.get(tensor, tensor)

    def kind(self, tensor: str) -> str:
        """'live' (a value from the inputs), 'const' (evaluable), 'param' (shape arithmetic or an unreadable
        constant: equal to anything of its kind) or '' (absent)."""
        if not tensor:
            return ""
        if tensor in self.live:
            return "live"
        return "const" if self.value(tensor) is not None else "param"

    def value(self, tensor: str) -> Const | None:
        c = self.consts.get(tensor)
        if c is None and tensor in self.observed:
            v = np.asarray(self.observed[tensor])
            c = Const(v, 2.0**-24 if v.dtype == np.float32 else 2.0**-11 if v.dtype == np.float16 else 0.0)
        return c

    def params(self) -> list[str]:
        """Inputs of the computing nodes that are neither values from the inputs nor constants evaluated here
        (shape arithmetic: a run says what they hold)."""
        out = []
        for idx in self.core:
            for t in self.g.nodes[idx].input:
                if t and t not in self.live and self.consts.get(t) is None:
                    out.append(t)
        return list(dict.fromkeys(out))

    def producer(self, tensor: str) -> int | None:
        p = self.g.producers.get(tensor)
        return p.index if p is not None else None

    def shape(self, tensor: str) -> tuple[int, ...] | None:
        return self.shapes.get(tensor)

    def rank(self, idx: int) -> int | None:
        node = self.g.nodes[idx]
        for t in list(node.input[:1]) + list(node.output[:1]):
            s = self.shapes.get(t)
            if s is not None:
                return len(s)
        return None


def passes_on(node: Any) -> bool:
    """A node that passes its first input on, quantised or cast (what converters insert)."""
    if node.op_type in QDQ_OPS or node.op_type == "Identity":
        return node.op_type != "DynamicQuantizeLinear" and bool(node.input)
    if node.op_type in CAST_OPS and node.input:
        to = next((a.i for a in node.attribute if a.name == "to"), None)
        return node.op_type == "CastLike" or to in FLOAT_TYPES
    return False


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
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, list):
        return [round(v, 6) if isinstance(v, float) else v for v in value]
    if hasattr(value, "SerializeToString"):
        return value.SerializeToString()
    return value


UNKNOWN = object()  # a parameter computed at run time that no run observed


def _moved(op_type: str, pos: int) -> str | None:
    """The attribute name of an input that older opsets took as an attribute (axes, Clip's bounds)."""
    if pos == 1 and op_type.startswith(REDUCES):
        return "axes"
    return ATTR_INPUTS.get((op_type, pos))


def _params(view: View, idx: int) -> dict[str, Any]:
    """A node's attributes, normalised, with the inputs that other opsets take as attributes read into them."""
    import onnx

    node = view.g.nodes[idx]
    rank = view.rank(idx)
    out = {a.name: _normal(a.name, onnx.helper.get_attribute_value(a), rank) for a in node.attribute}
    for pos, t in enumerate(node.input):
        name = _moved(node.op_type, pos)
        if name and t:
            c = view.value(t)
            values = c.values.reshape(-1).tolist() if c is not None else None
            if values is not None and name != "axes":
                values = values[0] if len(values) == 1 else values
            out[name] = UNKNOWN if values is None else _normal(name, values, rank)
    return out


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return bool(np.isclose(float(a), float(b), rtol=1e-3, atol=0.0) or a == b)
        except (TypeError, ValueError):
            return False
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return all(_same_value(x, y) for x, y in zip(a, b))
    return bool(a == b)


class Matcher:
    """Pairs the live tensors of a reference and a candidate graph by structure (the module docstring)."""

    def __init__(self, ref: View, cand: View, seeds: Mapping[str, str]):
        self.ref, self.cand = ref, cand
        self.pair: dict[str, str] = {}  # reference root -> candidate root
        self.image: dict[str, str] = {}  # candidate root -> reference root
        self.why: dict[str, str] = {}
        self.queue: deque[str] = deque()
        for r, c in seeds.items():
            ri, ci = ref.producer(r), cand.producer(cand.of(c))
            if cand.of(c) != c and ri is not None and ci is not None:
                if family(ref.g.nodes[ri].op_type) != family(cand.g.nodes[ci].op_type):
                    cand.reroot(c)  # a Q/DQ pair that does a folded Relu's clamp: not a pass-through here
            self._add(ref.of(r), cand.of(c), "")

    # -- pairs -----------------------------------------------------------------------------------
    def _add(self, r: str, c: str, why: str) -> bool:
        if r in self.pair or c in self.image or r not in self.ref.live or c not in self.cand.live:
            return False
        self.pair[r], self.image[c] = c, r
        if why:
            self.why[r] = why
        self.queue.append(r)
        return True

    def _pair_outputs(self, ri: int, ci: int, why: str) -> bool:
        rn, cn = self.ref.g.nodes[ri], self.cand.g.nodes[ci]
        added = False
        for ro, co in zip(rn.output, cn.output):
            if ro and co and ro in self.ref.live and co in self.cand.live:
                added |= self._add(ro, co, why)
        return added

    # -- equivalence -----------------------------------------------------------------------------
    def same_op(self, ri: int, ci: int) -> bool:
        rn, cn = self.ref.g.nodes[ri], self.cand.g.nodes[ci]
        if family(rn.op_type) != family(cn.op_type):
            return False
        if len([o for o in rn.output if o]) != len([o for o in cn.output if o]):
            return False
        for ro, co in zip(rn.output, cn.output):
            rs, cs = self.ref.shape(ro), self.cand.shape(co)
            if rs is not None and cs is not None and rs != cs:
                return False
        if rn.op_type in RESHAPES or cn.op_type in RESHAPES:
            # a layout-preserving reshape: its output is its input's values in order, whatever its parameters
            return all(self.ref.shape(o) is not None and self.cand.shape(o2) is not None
                       for o, o2 in zip(rn.output[:1], cn.output[:1]))  # fmt: skip
        return self._same_attrs(ri, ci)

    def _same_attrs(self, ri: int, ci: int) -> bool:
        rn, cn = self.ref.g.nodes[ri], self.cand.g.nodes[ci]
        ra, ca = _params(self.ref, ri), _params(self.cand, ci)
        same_type = rn.op_type == cn.op_type
        if same_type:
            rd = {k: _normal(k, v, self.ref.rank(ri)) for k, v in _defaults(rn.op_type, rn.domain).items()}
            cd = {k: _normal(k, v, self.cand.rank(ci)) for k, v in _defaults(cn.op_type, cn.domain).items()}
            ra, ca = {**rd, **ra}, {**cd, **ca}
        for k in set(ra) | set(ca):
            if k in ra and k in ca:
                if ra[k] is not UNKNOWN and ca[k] is not UNKNOWN and not _same_value(ra[k], ca[k]):
                    return False
            elif same_type:
                return False  # set on one side only, with no default to compare with
        return True

    def inputs(self, ri: int, ci: int) -> list[tuple[str, str]] | None:
        """The unpaired data inputs (reference, candidate) the two nodes would pair, when their inputs agree;
        None when they do not. Commutative ops may have their two inputs either way round (one way must fit)."""
        rin, cin = list(self.ref.g.nodes[ri].input), list(self.cand.g.nodes[ci].input)
        fits = [h for h in (self._aligned(ri, ci, rin, cin),) if h is not None]
        rop = self.ref.g.nodes[ri].op_type
        if family(rop) in COMMUTATIVE and len(rin) == 2 and len(cin) == 2:
            swapped = self._aligned(ri, ci, rin, cin[::-1])
            if swapped is not None and (not fits or fits[0] != swapped):
                fits.append(swapped)
        return fits[0] if len(fits) == 1 else None

    def _aligned(self, ri: int, ci: int, rin: list[str], cin: list[str]) -> list[tuple[str, str]] | None:
        rop = self.ref.g.nodes[ri].op_type
        holes = []
        # a reshape's parameters (target shape, axes) are judged by its output's shape: only its data is compared
        width = 1 if family(rop) == "Reshape" else max(len(rin), len(cin))
        for pos in range(width):
            r = rin[pos] if pos < len(rin) else ""
            c = cin[pos] if pos < len(cin) else ""
            if _moved(rop, pos) or _moved(self.cand.g.nodes[ci].op_type, pos):
                continue  # compared with the attributes (_params)
            rk, ck = self.ref.kind(r), self.cand.kind(c)
            if rk == "live" or ck == "live":
                if rk != ck:
                    return None
                rr, cr = self.ref.of(r), self.cand.of(c)
                if rr in self.pair:
                    if self.pair[rr] != cr:
                        return None
                elif cr in self.image:
                    return None
                else:
                    holes.append((rr, cr))
            elif rk == "const" and ck == "const":
                a, b = self.ref.value(r), self.cand.value(c)
                assert a is not None and b is not None
                if not equal(a, b):
                    return None
            elif (rk == "") != (ck == ""):
                present = self.ref.value(r) if r else self.cand.value(c)
                if (family(rop), pos) not in BIAS_SLOTS or not zeros(present):
                    return None  # an input one side lacks: equal only where absent means zeros (a bias)
            # const/param, param/param: unknown values (shape arithmetic): the output shapes decide
        return holes

    def equivalent(self, ri: int, ci: int) -> list[tuple[str, str]] | None:
        """The holes (unpaired data inputs) of an equivalent pair of nodes, None when they are not equivalent."""
        if not self.same_op(ri, ci):
            return None
        return self.inputs(ri, ci)

    def _unpaired(self, view: View, idx: int, paired: Mapping[str, str]) -> bool:
        outs = [o for o in view.g.nodes[idx].output if o in view.live]
        return bool(outs) and not any(o in paired for o in outs)

    # -- rules -----------------------------------------------------------------------------------
    def forward(self, r: str) -> None:
        """The consumers of paired tensor `r` that have exactly one equivalent consumer of its image."""
        c = self.pair[r]
        cands = [ci for ci, _ in self.cand.consumers.get(c, []) if self._unpaired(self.cand, ci, self.image)]
        for ri in dict.fromkeys(ri for ri, _ in self.ref.consumers.get(r, [])):
            if not self._unpaired(self.ref, ri, self.pair):
                continue
            fit = [(ci, h) for ci in dict.fromkeys(cands) if (h := self.equivalent(ri, ci)) is not None]
            if len(fit) != 1:
                if not fit:
                    self._folded_clamp(ri, c)
                continue
            ci, holes = fit[0]
            if holes and self._rivals(ri, ci, r):
                continue  # another reference consumer fits that node as well: ambiguous
            rn = self.ref.g.nodes[ri]
            how = "on paired inputs" if not holes else "on the paired input " + repr(r)
            self._pair_outputs(ri, ci, f"{rn.op_type} {how}")

    def _rivals(self, ri: int, ci: int, r: str) -> bool:
        others = [x for x, _ in self.ref.consumers.get(r, []) if x != ri and self._unpaired(self.ref, x, self.pair)]
        return any(self.equivalent(x, ci) is not None for x in dict.fromkeys(others))

    def _folded_clamp(self, ri: int, c: str) -> None:
        """A Relu/Clip with no equivalent consumer: a quantiser may have folded it into the Q/DQ pair after the
        node computing its input (the QuantizeLinear's zero point clamps): then it is that DequantizeLinear."""
        rn = self.ref.g.nodes[ri]
        if rn.op_type not in CLAMPS or not rn.output or rn.output[0] not in self.ref.live:
            return
        dq = _dequantized(self.cand.g, c)
        if dq is not None and dq in self.cand.live:
            shape = self.ref.shape(rn.output[0])
            if shape is not None and self.cand.shape(dq) in (None, shape):
                self.cand.reroot(dq)  # the clamped value, no longer a pass-through of `c`
                self._add(rn.output[0], dq, f"{rn.op_type} folded into the candidate's Q/DQ pair")

    def backward(self, r: str) -> None:
        """The unpaired data inputs of the two equivalent nodes computing paired tensor `r` and its image: they
        hold what the model computes at that point on both sides (the same input of the same operation), also
        where the two exporters computed them differently (a GELU as one node and as five)."""
        ri, ci = self.ref.producer(r), self.cand.producer(self.pair[r])
        if ri is None or ci is None or ri not in self._core_ref or ci not in self._core_cand:
            return
        holes = self.equivalent(ri, ci)
        op = self.ref.g.nodes[ri].op_type
        for hr, hc in holes or []:
            pr, pc = self.ref.producer(hr), self.cand.producer(hc)
            if pr is None or pc is None or pr not in self._core_ref or pc not in self._core_cand:
                continue
            rs, cs = self.ref.shape(hr), self.cand.shape(hc)
            if rs is None or rs != cs:
                continue
            slot_r = list(self.ref.g.nodes[pr].output).index(hr)
            slot_c = list(self.cand.g.nodes[pc].output).index(hc)
            if slot_r != slot_c:
                continue
            rop, cop = self.ref.g.nodes[pr].op_type, self.cand.g.nodes[pc].op_type
            if self.equivalent(pr, pc) is not None:
                self._pair_outputs(pr, pc, f"{rop} feeding the paired {op} '{r}'")
            else:
                why = f"the input of the paired {op} '{r}' (the reference computes it with {rop}, the candidate {cop})"
                self._add(hr, hc, why)

    def anchors(self) -> None:
        """Nodes with a distinctive weight equal to exactly one candidate node's, equivalent to it."""
        buckets: dict[tuple, list[tuple[int, Const]]] = defaultdict(list)
        for ci in self._core_cand:
            if self._unpaired(self.cand, ci, self.image):
                for key, const in self._weights(self.cand, ci):
                    buckets[key].append((ci, const))
        matches: dict[int, list[int]] = defaultdict(list)
        claims: dict[int, list[int]] = defaultdict(list)
        for ri in self.ref.core:
            if not self._unpaired(self.ref, ri, self.pair):
                continue
            for key, const in self._weights(self.ref, ri):
                for ci, other in buckets.get(key, []):
                    if ci not in matches[ri] and equal(const, other) and self.equivalent(ri, ci) is not None:
                        matches[ri].append(ci)
                        claims[ci].append(ri)
        for ri, cis in matches.items():
            if len(cis) == 1 and len(claims[cis[0]]) == 1:
                rn = self.ref.g.nodes[ri]
                self._pair_outputs(ri, cis[0], f"{rn.op_type} with equal weights")

    def _weights(self, view: View, idx: int) -> Iterable[tuple[tuple, Const]]:
        node = view.g.nodes[idx]
        for pos, t in enumerate(node.input):
            if t and t not in view.live:
                c = view.consts.get(t)
                if c is not None and c.distinctive():
                    yield (family(node.op_type), pos, c.squeezed()), c

    # -- driver ----------------------------------------------------------------------------------
    def run(self) -> None:
        self._core_ref, self._core_cand = set(self.ref.core), set(self.cand.core)
        for _ in range(MAX_ROUNDS):
            before = len(self.pair)
            self.anchors()
            while self.queue:
                r = self.queue.popleft()
                self.forward(r)
                self.backward(r)
            if len(self.pair) == before:
                break


def _dequantized(g: GraphIndex, tensor: str) -> str | None:
    """The DequantizeLinear output of the QuantizeLinear -> DequantizeLinear pair reading `tensor`."""
    for qi, pos in g.consumers.get(tensor, []):
        if pos != 0 or g.nodes[qi].op_type != "QuantizeLinear":
            continue
        for di, dpos in g.consumers.get(g.nodes[qi].output[0], []):
            if dpos == 0 and g.nodes[di].op_type == "DequantizeLinear" and g.nodes[di].output:
                return g.nodes[di].output[0]
    return None


def pair_by_structure(
    ref: View, cand: View, seeds: Mapping[str, str], wanted: Iterable[str], exposed: set[str]
) -> list[Found]:
    """Pairs for the reference tensors in `wanted` (the ones names left unpaired) that structure finds; each
    candidate tensor is one `exposed` by the candidate and not in `seeds` already."""
    m = Matcher(ref, cand, seeds)
    m.run()
    taken = set(seeds.values())
    out = []
    for r in wanted:
        c = m.pair.get(r) if ref.of(r) == r else None
        if c is None or c in taken or c not in exposed or r not in m.why:
            continue
        taken.add(c)
        p = cand.g.producers[c]
        out.append(Found(r, c, f"by structure: {m.why[r]} (candidate {p.op_type} '{p.node}')", p.node, p.op_type))
    return out
