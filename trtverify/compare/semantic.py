"""Semantic pairing: a candidate tensor is compared with the reference's only where it holds the same value.

Quantizers and converters rewrite graphs but keep tensor names, so a name alone can pair two
different values. Real rewrites, and what is compared for each:

- **inserted Q/DQ or casts** (every quantizer, FP16 converters with `keep_io_types`): the
  candidate's tensor comes out of a QuantizeLinear/DequantizeLinear pair or a Cast after the
  node the reference has: compared as is (it is that node's value, quantised or cast);
- **an activation folded into Q/DQ** (ONNX Runtime's `quantize_static` drops a Relu or Clip
  after a Conv and lets the Conv write the Relu's output name; the zero point of the
  QuantizeLinear that follows does the clamp): the candidate tensor of that name is the
  *unclamped* Conv output, so the reference's Relu output is compared with that Q/DQ pair's
  DequantizeLinear output, the value the candidate really computes for it;
- **folding** (BatchNormalization, Add/Mul by a constant folded into a Conv/Gemm/MatMul): the
  folded node's output name is written by the candidate's Conv: compared as is; the
  reference's tensors inside the folded chain have no candidate value;
- **renamed outputs**: a reference tensor the candidate lacks, whose node the candidate has
  (same name and op type) writing the same output slot under another name: paired with it.

- **graph outputs** are the contract: an output both graphs declare under one name is always
  compared, whatever the candidate computes inside (ModelOpt rewrites `Softmax(axis=2)` as
  Flatten -> Softmax -> Reshape and keeps the output's name).

Any other candidate tensor that has a reference name but another producer and none of these
explanations is *rewritten*: its row says so and it is left out of every check, the first
divergence and the root causes. For TensorRT candidates the graph is the ONNX file the engine is
built from (TensorRT marks ONNX tensor names); without any graph, names pair as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from trtverify.compare.pairing import Pairing
from trtverify.graph.onnxgraph import CAST_OPS, QDQ_OPS, GraphIndex, Producer

How = Literal["rename", "inserted", "folded", "renamed_output", "output", "structure"]

# clamps a QuantizeLinear can do with its zero point and scale (what ONNX Runtime's quantizer removes)
CLAMPS = frozenset({"Relu", "Clip"})
# nodes folded into the weights of the node before them
LINEAR_FOLDS = frozenset({"BatchNormalization", "Add", "Sub", "Mul", "Div", "Identity"})
# nodes that pass a value on (quantised or cast) without computing a new one
PASS_THROUGH = QDQ_OPS | CAST_OPS | {"Identity"}
# fused or quantised forms of a reference op (ONNX Runtime's optimised and QOperator graphs)
FAMILY = {
    "FusedConv": "Conv",
    "QLinearConv": "Conv",
    "ConvInteger": "Conv",
    "FusedGemm": "Gemm",
    "QGemm": "Gemm",
    "FusedMatMul": "MatMul",
    "QLinearMatMul": "MatMul",
    "MatMulInteger": "MatMul",
    "QLinearAdd": "Add",
    "QLinearMul": "Mul",
}
MAX_FOLD = 4  # nodes one fold may span (Conv + BatchNormalization + Add + Relu)


@dataclass(frozen=True)
class Match:
    """One reference tensor and the candidate tensor holding its value, with why they pair."""

    reference: str
    candidate: str
    how: How | None = None  # None: same name, same producer
    why: str | None = None
    candidate_node: str | None = None  # the candidate node computing it, where the reference names another
    candidate_op_type: str | None = None


@dataclass
class Resolved:
    """What the names paired into, after the rewrites were recognised."""

    pairing: Pairing  # pairs rewritten to the semantically equal candidate tensors
    matches: dict[str, Match]  # reference tensor -> its match
    rewritten: dict[str, str] = field(default_factory=dict)  # reference tensor -> why it is not comparable
    folded_away: dict[str, str] = field(default_factory=dict)  # reference tensor -> the fold that removed it
    distinct: set[str] = field(default_factory=set)  # candidate tensors named like a reference tensor, another value


def family(op_type: str) -> str:
    return FAMILY.get(op_type, op_type)


def _through(cand: GraphIndex, tensor: str) -> tuple[Producer | None, list[str]]:
    """The node computing `tensor` behind any Q/DQ, Cast or Identity, and the op types passed on the way."""
    p = cand.producers.get(tensor)
    passed: list[str] = []
    while p is not None and p.op_type in PASS_THROUGH and len(passed) < 8:
        node = cand.nodes[p.index]
        src = node.input[0] if node.input else ""
        nxt = cand.producers.get(src)
        if nxt is None:
            break
        passed.append(p.op_type)
        p = nxt
    return p, passed


def _data_input(g: GraphIndex, index: int) -> str | None:
    """The one input of a node that is not a constant, or None when there are several or none."""
    live = [i for i in g.nodes[index].input if i and i not in g.constants]
    return live[0] if len(live) == 1 else None


def _fold_chain(ref: GraphIndex, start: Producer, target: str) -> list[Producer] | None:
    """Reference nodes from `start` back to (not including) a node of family `target`, when every one of
    them can be folded into it; None when the chain does not end at such a node."""
    chain: list[Producer] = []
    p: Producer | None = start
    while p is not None and len(chain) < MAX_FOLD:
        if p.op_type not in CLAMPS and p.op_type not in LINEAR_FOLDS:
            return None
        chain.append(p)
        data = _data_input(ref, p.index)
        p = ref.producers.get(data) if data else None
        if p is not None and family(p.op_type) == target:
            return chain
    return None


def _fused_activation(cand: GraphIndex, p: Producer) -> bool:
    node = cand.nodes[p.index]
    return any(a.name in ("activation", "fused_activation") for a in node.attribute)


def _dequantized(cand: GraphIndex, tensor: str) -> str | None:
    """The DequantizeLinear output of the QuantizeLinear -> DequantizeLinear pair reading `tensor`."""
    for qi, pos in cand.consumers.get(tensor, []):
        if pos != 0 or cand.nodes[qi].op_type != "QuantizeLinear":
            continue
        for q_out in cand.nodes[qi].output[:1]:
            for di, dpos in cand.consumers.get(q_out, []):
                if dpos == 0 and cand.nodes[di].op_type == "DequantizeLinear" and cand.nodes[di].output:
                    return cand.nodes[di].output[0]
    return None


def _names(chain: list[Producer]) -> str:
    return ", ".join(f"{p.op_type} '{p.node}'" for p in chain)


def _pair(
    r: str, c: str, ref: GraphIndex, cand: GraphIndex, exposed: set[str], used: set[str], out: Resolved
) -> Match | None:
    """The match of a name pair (r, c), or None when the candidate rewrote r beyond recognition."""
    rp = ref.producers.get(r)
    cp = cand.producers.get(c)
    if rp is not None and cp is not None and rp.op_type in PASS_THROUGH and cp.op_type == rp.op_type:
        return Match(r, c)  # the model's own Cast (Identity, Q/DQ), which the reference computes too: not inserted
    core, passed = _through(cand, c)
    if rp is None or core is None:
        return Match(r, c)  # graph inputs
    if family(core.op_type) == family(rp.op_type):
        if not passed:
            return Match(r, c)
        steps = " -> ".join(reversed(passed))
        return Match(r, c, "inserted", f"the candidate's {core.op_type} output after the {steps} it inserted")
    chain = _fold_chain(ref, rp, family(core.op_type))
    where = {"candidate_node": core.node, "candidate_op_type": core.op_type}
    if chain is None:
        out.distinct.add(c)
        out.rewritten[r] = (
            f"rewritten: the candidate computes '{c}' with {core.op_type} '{core.node}', the reference with "
            f"{rp.op_type} '{rp.node}'; no equivalent value to compare"
        )
        return None
    for p in chain[1:]:  # the reference's tensors inside the fold have no candidate value
        for o in ref.nodes[p.index].output:
            if o and o not in exposed:
                out.folded_away[o] = f"folded into the candidate's {core.op_type} '{core.node}'"
    data = _data_input(ref, chain[-1].index)
    if data and data not in exposed:
        out.folded_away[data] = f"folded into the candidate's {core.op_type} '{core.node}'"
    clamps = [p for p in chain if p.op_type in CLAMPS]
    if clamps and "QuantizeLinear" not in passed and not _fused_activation(cand, core):
        dq = _dequantized(cand, c)
        if dq is None or dq in used or dq not in exposed:
            out.distinct.add(c)
            where_clamped = (
                "no Q/DQ pair after it does the clamp"
                if dq is None
                else f"the DequantizeLinear output '{dq}' that does the clamp is not exposed by the candidate"
            )
            out.rewritten[r] = (
                f"rewritten: {_names(clamps)} folded into {core.op_type} '{core.node}', whose output '{c}' is not "
                f"clamped, and {where_clamped}; no equivalent value to compare"
            )
            return None
        out.distinct.add(c)
        why = (
            f"{_names(chain)} folded into {core.op_type} '{core.node}'; the clamp happens in the Q/DQ pair after it, "
            f"so its DequantizeLinear output '{dq}' is compared (the tensor named '{c}' is unclamped)"
        )
        return Match(r, dq, "folded", why, **where)
    return Match(r, c, "folded", f"{_names(chain)} folded into {core.op_type} '{core.node}'", **where)


def _renamed(r: str, ref: GraphIndex, cand: GraphIndex, by_name: dict[str, int], free: set[str]) -> Match | None:
    """A reference tensor the candidate lacks, written by the same node under another name."""
    rp = ref.producers.get(r)
    if rp is None or not ref.nodes[rp.index].name:
        return None
    ci = by_name.get(ref.nodes[rp.index].name)
    if ci is None or family(cand.nodes[ci].op_type) != family(rp.op_type):
        return None
    slot = list(ref.nodes[rp.index].output).index(r)
    outs = cand.nodes[ci].output
    if slot >= len(outs) or outs[slot] not in free:
        return None
    return Match(r, outs[slot], "renamed_output", f"the candidate's '{rp.node}' writes it as '{outs[slot]}'")


def resolve(
    pairing: Pairing, ref: GraphIndex, cand: GraphIndex | None, explicit: Mapping[str, str] | None = None
) -> Resolved:
    """Rewrite name pairs to semantically equal ones (see the module docstring); `explicit`: the user's renames,
    which are trusted as given."""
    if cand is None:
        matches = {r: Match(r, c, "rename" if explicit and r in explicit else None) for r, c in pairing.pairs}
        return Resolved(pairing, matches)
    explicit = dict(explicit or {})
    out = Resolved(pairing, {})
    exposed = {c for _, c in pairing.pairs} | set(pairing.candidate_only)
    used = {c for _, c in pairing.pairs}
    for r, c in pairing.pairs:
        m = (
            Match(r, c, "rename", "renamed in the suite")
            if r in explicit
            else _pair(r, c, ref, cand, exposed, used, out)
        )
        if m is None and r in ref.outputs and c in cand.outputs:
            out.rewritten.pop(r, None)
            out.distinct.discard(c)
            m = Match(r, c, "output", "a graph output: compared whatever the candidate computes inside")
        if m is not None:
            used.add(m.candidate)
            out.matches[r] = m
    by_name = {n.name: i for i, n in enumerate(cand.nodes) if n.name}
    free = set(pairing.candidate_only) - used
    still_missing = []
    for r in pairing.reference_only:
        m = None if r in out.folded_away else _renamed(r, ref, cand, by_name, free)
        if m is None:
            still_missing.append(r)
            continue
        free.discard(m.candidate)
        used.add(m.candidate)
        out.matches[r] = m
    order = {t: i for i, t in enumerate([r for r, _ in pairing.pairs] + pairing.reference_only)}
    pairs = sorted(((m.reference, m.candidate) for m in out.matches.values()), key=lambda rc: order[rc[0]])
    out.pairing = replace(
        pairing,
        pairs=pairs,
        reference_only=still_missing,
        candidate_only=[c for c in pairing.candidate_only if c not in used],
    )
    return out
