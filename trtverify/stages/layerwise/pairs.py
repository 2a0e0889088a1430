"""What a layerwise verdict rests on: the pairs structure adds to those of names, how many reference tensors
were paired (the check `tensors paired`), and the renames worth suggesting for what stays unpaired.

Structural pairing (`trtverify.compare.structure`) runs only where names left reference tensors unpaired
and the candidate computes tensors names did not pair: two exports of one model by one exporter, or a
converter's output, pair by name alone and cost nothing here. It needs every tensor's shape and the values
of the shape arithmetic between them (the TorchScript exporter computes a Reshape's target or an attention's
scale from Shape nodes): the reference's shapes come from its pass, the candidate's from ONNX shape inference
with the first sample's input shapes, or where inference cannot follow that arithmetic, from one run of the
first sample taking every tensor's Shape (kilobytes); the arithmetic is then evaluated from the shapes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends.base import BackendError
from trtverify.compare.checks import CheckResult, limit_check
from trtverify.compare.graphview import View, family, passes_on
from trtverify.compare.semantic import Match, Resolved
from trtverify.compare.structure import pair_by_structure
from trtverify.config.backends import OnnxRuntimeOptions
from trtverify.config.stages import LayerwiseStage
from trtverify.graph.lightmodel import LightModel
from trtverify.graph.onnxgraph import GraphIndex
from trtverify.stages.layerwise.models import CandidateOnly, Coverage, Unmatched
from trtverify.stages.layerwise.reference import NAME, ReferencePass

SHAPE_TAP = "::trtverify_shape"


def observe(
    light: LightModel, shapes_of: Iterable[str], values_of: Iterable[str], feed: dict[str, np.ndarray], options: Any
) -> tuple[dict[str, tuple[int, ...]], dict[str, np.ndarray]]:
    """One run of `light` on `feed`: the shapes of `shapes_of` (through Shape nodes, so the tensors themselves
    never leave ONNX Runtime) and the values of `values_of` (shape arithmetic: small). ({}, {}) where the graph
    does not run here (a TensorRT plugin, a type the CPU lacks)."""
    import onnx

    from trtverify.backends.onnxruntime import OnnxRuntimeBackend

    known = set(light.info.producers) | set(light.info.inputs)
    shapes = [t for t in dict.fromkeys(shapes_of) if t in known]
    values = [t for t in dict.fromkeys(values_of) if t in known]
    if not shapes and not values:
        return {}, {}
    m = onnx.ModelProto()
    m.CopyFrom(light.model)  # a weightless graph: kilobytes
    del m.graph.output[:]
    for i, t in enumerate(shapes):
        m.graph.node.append(onnx.helper.make_node("Shape", [t], [t + SHAPE_TAP], name=f"trtverify_shape_{i}"))
    for name in [t + SHAPE_TAP for t in shapes] + values:
        vi = onnx.ValueInfoProto()
        vi.name = name
        m.graph.output.append(vi)
    try:
        with OnnxRuntimeBackend(light.runnable(m), options) as backend:
            out = backend.infer(feed)
    except BackendError:
        return {}, {}
    got = {t: tuple(int(d) for d in out[t + SHAPE_TAP]) for t in shapes if t + SHAPE_TAP in out}
    return got, {t: out[t] for t in values if t in out}


def inferred_shapes(model: Any, feed: Mapping[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """Shapes ONNX shape inference gives with the feed's input shapes (nodes put in topological order first: FP16
    converters append theirs at the end, which stops inference there). An estimate for what a run cannot tell."""
    import onnx

    from trtverify.graph.onnxgraph import topological
    from trtverify.stages.layerwise.reference import infer_with_feed

    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.value_info[:]  # a converter's declared shapes keep symbolic batch dimensions
    inits = {i.name for i in m.graph.initializer}
    nodes = topological(list(m.graph.node), {i.name for i in m.graph.input} | inits)
    copies = []
    for n in nodes:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        copies.append(c)
    del m.graph.node[:]
    m.graph.node.extend(copies)
    out = {}
    g = infer_with_feed(m, dict(feed)).graph
    for vi in [*g.value_info, *g.output, *g.input]:
        t = vi.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            out[vi.name] = tuple(int(d.dim_value) for d in t.shape.dim)
    return out


class CandidateShapes:
    """The candidate's tensor shapes, read once, when first asked for: from ONNX shape inference with the first
    sample's input shapes where it gives every one (tens of milliseconds), else from a run of the first sample
    in ONNX Runtime (`light`: the graph the backend runs; for a TensorRT candidate its ONNX file), which also
    gives the values of the shape arithmetic `params` names."""

    def __init__(self, light: LightModel | Path, graph: GraphIndex, feed: dict[str, np.ndarray], options: Any):
        self.light, self.graph, self.feed, self.options = light, graph, feed, options
        self.shapes: dict[str, tuple[int, ...]] | None = None
        self.values: dict[str, np.ndarray] = {}

    def read(self, params: Sequence[str] = ()) -> dict[str, tuple[int, ...]]:
        if self.shapes is None:
            light = self.light if isinstance(self.light, LightModel) else LightModel(self.light)
            live = self.graph.value_tensors()
            shapes = inferred_shapes(light.model, self.feed)
            if any(t not in shapes for t in live):  # shape arithmetic inference cannot follow (TorchScript's)
                observed, self.values = observe(light, live, params, self.feed, self.options)
                shapes.update(observed)
            self.shapes = shapes
        return self.shapes


def try_structure(resolved: Resolved, *args: Any) -> tuple[Resolved, str | None]:
    """`by_structure`, where a graph it cannot read (a bug here, an op in a form not foreseen) leaves the pairs of
    names as they are and says why, instead of ending the stage: pairing by structure adds to a run, it is not
    what the run is about."""
    try:
        return by_structure(resolved, *args), None
    except Exception as exc:  # noqa: BLE001 - reported in results.json and the terminal
        return resolved, f"{type(exc).__name__}: {exc}"


def by_structure(
    resolved: Resolved,
    ref: ReferencePass,
    cand: GraphIndex,
    shapes: CandidateShapes,
    feed: dict[str, np.ndarray],
    options: OnnxRuntimeOptions,
) -> Resolved:
    """`resolved` with the reference tensors names left unpaired paired by structure, where it finds them."""
    pairing = resolved.pairing
    # folded-away tensors too: a Conv whose Relu a quantiser folded into the Q/DQ after it still writes its own value,
    # under the Relu's name (`distinct`: named like a reference tensor, holding another value)
    wanted = list(pairing.reference_only)
    exposed = {*pairing.candidate_only, *(resolved.distinct - {c for _, c in pairing.pairs})}
    if not wanted or not exposed:
        return resolved
    rv = View(ref.graph, set(ref.order) | set(ref.graph.inputs), dict(ref.shape))  # shape arithmetic from shapes
    cv = View(cand, set(cand.value_tensors()) | set(cand.inputs))
    cv.set_shapes(shapes.read(cv.unknown_inputs()))  # one run: the shapes, and the shape arithmetic's values
    cv.observed = shapes.values
    unknown = rv.unknown_inputs()  # what the reference's shapes could not tell (an op not evaluated here)
    if unknown and ref.light is not None:
        _, rv.observed = observe(ref.light, (), unknown, feed, options)
    seeds = dict(pairing.pairs)
    seeds.update({i: i for i in ref.graph.inputs if i in cand.inputs})
    found = pair_by_structure(rv, cv, seeds, wanted, exposed)
    if not found:
        return resolved
    matches = dict(resolved.matches)
    for f in found:
        matches[f.reference] = Match(f.reference, f.candidate, "structure", f.why)
    used = {m.candidate for m in matches.values()}
    order = {t: i for i, t in enumerate(ref.order)}
    pairs = sorted(((m.reference, m.candidate) for m in matches.values()), key=lambda rc: order.get(rc[0], -1))
    new = replace(
        pairing,
        pairs=pairs,
        reference_only=[r for r in pairing.reference_only if r not in matches],
        candidate_only=[c for c in pairing.candidate_only if c not in used],
    )
    folded = {r: why for r, why in resolved.folded_away.items() if r not in matches}
    return replace(resolved, pairing=new, matches=matches, folded_away=folded)


def _families(view: View, tensors: Iterable[str]) -> Counter[str]:
    """Tensors by the op family computing them; what lowering inserts (Q/DQ, casts) counts for none, a Q/DQ pair
    doing a folded Relu's clamp as that Relu."""
    core = set(view.core)
    out: Counter[str] = Counter()
    for t in tensors:
        idx = view.producer(t)
        if idx is not None and idx in core:
            out[family(view.op(idx))] += 1
    return out


def coverage(
    name: str,
    ref: ReferencePass,
    cand: GraphIndex,
    cand_names: Sequence[str],
    resolved: Resolved,
    cfg: LayerwiseStage,
    error: str | None = None,
) -> tuple[Coverage, CheckResult]:
    """How many reference tensors were paired, against how many have a counterpart in the candidate by op type;
    and the check `tensors paired` (at least `min_paired` of those with a counterpart)."""
    min_paired = cfg.min_paired
    ignored = set(resolved.pairing.ignored)  # left out on purpose: counted on neither side
    tensors = [t for t in ref.order if t not in ignored]
    ref_view = View(ref.graph, set(ref.order) | set(ref.graph.inputs))
    cand_view = View(cand, set(cand.value_tensors()) | set(cand.inputs))
    refs = _families(ref_view, tensors)
    cands = _families(cand_view, [c for c in cand_names if c not in ignored])
    counterpart = sum(min(n, cands.get(f, 0)) for f, n in refs.items())
    pairs = resolved.pairing.pairs
    by = Counter((resolved.matches[r].how if r in resolved.matches else None) or "name" for r, _ in pairs)
    required = max(1, math.ceil(min_paired * counterpart - 1e-9)) if min_paired > 0 else 0
    passed = len(pairs) >= required
    record = Coverage(
        reference_tensors=len(tensors),
        paired=len(pairs),
        with_counterpart=counterpart,
        required=required,
        min_paired=min_paired,
        by=dict(by.most_common()),
        structure_error=error,
        passed=passed,
    )
    detail: dict[str, Any] = {"reference_tensors": len(tensors), "with_counterpart": counterpart, "by": dict(by)}
    if not passed:
        fix = (
            f"structural pairing failed ({error}): pair tensors with stages.layerwise.rename"
            if error
            else "names and structure paired no more (not two exports of one model? weights that differ?): compare "
            "against a reference exported the way the candidate was, or pair tensors with stages.layerwise.rename"
            if cfg.pair_by_structure
            else "turn stages.layerwise.pair_by_structure on (it pairs two exports of one model by what computes "
            "each tensor), or pair tensors with stages.layerwise.rename"
        )
        detail["reason"] = (
            f"{len(pairs)} of the reference's {len(tensors)} tensors paired, of the {counterpart} with a "
            f"counterpart of their op type in {name} (stages.layerwise.min_paired {min_paired:g} asks for {required}): "
            f"a verdict on so few says nothing about the layers; {fix}"
        )
    check = limit_check(f"{name}: tensors paired", NAME, "paired", len(pairs), required, ">=", candidate=name,
                        detail=detail)  # fmt: skip
    return record, check


def suggestions(
    ref: ReferencePass, cand: GraphIndex, shapes: Mapping[str, tuple[int, ...]], reference_only: Sequence[str],
    candidate_only: Sequence[str],
) -> dict[str, str]:  # fmt: skip
    """Renames worth suggesting: a reference-only and a candidate-only tensor of equal shape computed by the same
    operation (fused and quantised forms counted as it), the only such pair of that kind on both sides. Nothing
    where that is not certain: a wrong rename gives a false shape mismatch or a false root cause."""

    def kinds(g: GraphIndex, tensors: Sequence[str], shape_of: Mapping[str, tuple[int, ...]]) -> dict[tuple, list]:
        out: dict[tuple, list[str]] = {}
        for t in tensors:
            p = g.producers.get(t)
            if p is None or t not in shape_of or passes_on(g.nodes[p.index]):
                continue
            out.setdefault((family(p.op_type), tuple(shape_of[t])), []).append(t)
        return out

    refs, cands = kinds(ref.graph, reference_only, ref.shape), kinds(cand, candidate_only, shapes)
    return {rs[0]: cands[k][0] for k, rs in refs.items() if len(rs) == 1 and len(cands.get(k, [])) == 1}


def unmatched(
    resolved: Resolved, cand: GraphIndex, ref: ReferencePass, reason: str, shapes: CandidateShapes, runs: GraphIndex
) -> Unmatched:
    """What each side alone has, why (as `runs`, the graph the backend runs, makes each), and the renames worth
    suggesting (as `cand`, the candidate as given, computes each)."""
    pairing = resolved.pairing
    kinds: dict[str, list[str]] = {"qdq": [], "cast": [], "renamed": [], "other": [], "not_compared": []}
    ref_nodes = {p.node for p in ref.graph.producers.values()}
    for t in pairing.candidate_only:
        if t in ref.graph.producers:  # the reference's own tensor, left out of its comparison (a marked-all capture)
            kinds["not_compared"].append(t)
            continue
        kind = runs.inserted_kind(t)
        if kind == "other" and t in runs.producers and runs.producers[t].node in ref_nodes:
            kind = "renamed"  # a reference node whose output a converter renamed (e.g. before an inserted cast)
        kinds[kind].append(t)
    missing = [r for r in pairing.reference_only if r not in resolved.folded_away]
    others = kinds["other"] + kinds["renamed"]
    return Unmatched(
        reference_only=pairing.reference_only,
        reference_only_reason=reason,
        reference_only_why={t: w for t, w in resolved.folded_away.items() if t in pairing.reference_only},
        candidate_only=CandidateOnly(**kinds),
        ignored=pairing.ignored,
        bad_renames=pairing.bad_renames,
        suggested_renames=suggestions(ref, cand, shapes.read(), missing, others) if missing and others else {},
    )
