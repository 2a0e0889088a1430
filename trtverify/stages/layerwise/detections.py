"""Detection outputs in the layerwise stage: recognised on the reference, compared box to box, one row each.

The layouts are recognised on the reference (`trtverify.compare.detlayout`: NMS plugin outputs, [B, K, 6], the
four-output layout); a layout is compared as detections where each of its tensors pairs with a candidate tensor.
Its tensors, and the tensors between them and a selection before them (NonMaxSuppression, an NMS plugin, TopK, a
comparison such as the Equal of a max-pool peak search; with no weighted layer after it), leave the elementwise rows,
the checks on every tensor and the root causes: which boxes they hold and in what order follow near-equal scores,
which a lower precision swaps. They are compared as a `DetectionRow` with its own
checks (`stages.layerwise.detections`, by default per precision). Index tensors no row covers are compared by what
they select (`trtverify.stages.layerwise.selection`), through the same plan.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from trtverify.compare.checks import CheckResult, failed_check
from trtverify.compare.detections import DetectionError, DetectionStats
from trtverify.compare.detlayout import DETS5_PLUGINS, NMS4_PLUGINS, Layout, TensorInfo, paired_images, recognise
from trtverify.config.layerwise import DetectionCheck, LayerwiseDetections, detection_checks
from trtverify.graph.onnxgraph import GraphIndex
from trtverify.stages.layerwise import selection
from trtverify.stages.layerwise.detmodels import DetectionRow, WorstImage
from trtverify.stages.layerwise.reference import NAME, ReferencePass

# ops whose output jumps where an input crosses another (a score threshold, a tie, a neighbour's maximum): what a
# lower precision changes by a whole box, not a rounding
SELECTING = {"NonMaxSuppression", "TopK", "ArgMax", "ArgMin", "NonZero", "Equal", "Greater", "GreaterOrEqual", "Less",
             "LessOrEqual", *NMS4_PLUGINS, *DETS5_PLUGINS}  # fmt: skip
WEIGHTED = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MatMul", "MatMulInteger", "QLinearMatMul", "Gemm"}


@dataclass
class Group:
    """One layout compared as detections: reference and candidate tensors by role, the samples' candidate values."""

    layout: Layout
    candidate: Layout
    covers: list[str]
    values: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)  # sample -> candidate tensor -> value


@dataclass
class Plan:
    groups: list[Group]
    picked: selection.Plan = field(default_factory=selection.Plan)  # index tensors outside the detection rows
    ref: ReferencePass | None = None

    @property
    def covered(self) -> set[str]:
        """Reference tensors compared through detection rows or by what they select: no elementwise row."""
        return {t for g in self.groups for t in [*g.layout.tensors, *g.covers]} | self.picked.tensors

    def keep(self, si: int, candidate_tensor: str, value: np.ndarray) -> bool:
        """Keep a candidate value a detection row needs, or compare an index tensor's; whether it is one (then it
        gets no elementwise series)."""
        hit = False
        for g in self.groups:
            if candidate_tensor in g.candidate.tensors:
                g.values.setdefault(si, {})[candidate_tensor] = np.array(value)
                hit = True
        r = self.picked.by_candidate.get(candidate_tensor)
        if r is not None and self.ref is not None:
            self.picked.series[r].add(self.ref.store.get(si, r), value)
            hit = True
        return hit


def _infos(ref: ReferencePass) -> list[TensorInfo]:
    g = ref.graph
    out = []
    for t in ref.order:
        p = g.producers.get(t)
        if t not in ref.shape or p is None:
            continue
        outputs = [o for o in g.nodes[p.index].output]
        out.append(TensorInfo(t, tuple(ref.shape[t]), ref.dtype[t], p.op_type, p.node, outputs.index(t),
                              t in g.outputs))  # fmt: skip
    return out


def _covers(g: GraphIndex, tensors: Sequence[str], values: set[str]) -> list[str]:
    """The value tensors between a selection node and `tensors`, with no weighted layer after that node."""
    ancestors: dict[int, None] = {}
    todo = [g.producers[t].index for t in tensors if t in g.producers]
    while todo:
        i = todo.pop()
        if i in ancestors:
            continue
        ancestors[i] = None
        todo += [g.producers[x].index for x in g.nodes[i].input if x in g.producers]
    out: set[str] = set()
    for s in ancestors:
        if g.nodes[s].op_type not in SELECTING:
            continue
        reach, todo = set(), [s]  # the selection's descendants among the outputs' ancestors
        while todo:
            i = todo.pop()
            if i in reach or i not in ancestors:
                continue
            reach.add(i)
            todo += [c for o in g.nodes[i].output for c, _ in g.consumers.get(o, [])]
        if any(g.nodes[i].op_type in WEIGHTED for i in reach):
            continue  # a learned layer after it: a selection inside the network, not the detector's tail
        out |= {o for i in reach for o in g.nodes[i].output if o in values}
    order = {t: i for i, t in enumerate(g.producers)}
    return sorted(out - set(tensors), key=lambda t: order.get(t, -1))


def plan(ref: ReferencePass, pairs: Sequence[tuple[str, str]], cfg: LayerwiseDetections) -> Plan:
    """The layouts of the reference that pair whole with the candidate's tensors, with what each covers."""
    if not cfg.compare:
        return Plan([], selection.plan(ref, pairs, ()), ref)
    paired = dict(pairs)

    def first(name: str) -> np.ndarray | None:
        try:
            return ref.store.get(0, name)
        except KeyError:
            return None

    groups = []
    values = set(ref.order)
    for lay in recognise(_infos(ref), first):
        if any(t not in paired for t in lay.tensors):
            continue
        cand = Layout(lay.kind, {r: paired[t] if t is not None else None for r, t in lay.roles.items()}, lay.source)
        covers = [t for t in _covers(ref.graph, lay.tensors, values) if t in paired]
        groups.append(Group(lay, cand, covers))
    covered = {t for g in groups for t in [*g.layout.tensors, *g.covers]}
    return Plan(groups, selection.plan(ref, pairs, covered), ref)


def checks_of(cfg: LayerwiseDetections, candidate: str, precision: str) -> tuple[list[DetectionCheck], str]:
    """The candidate's detection checks and where they come from (`precision`: the loosest part's)."""
    if candidate in cfg.candidate_checks:
        return cfg.candidate_checks[candidate], "stages.layerwise.detections.candidate_checks"
    if cfg.checks is not None:
        return cfg.checks, "stages.layerwise.detections.checks"
    return detection_checks(precision), f"default for {precision}"


def compare(
    name: str, ref: ReferencePass, plan_: Plan, samples: int, cfg: LayerwiseDetections, checks: list[DetectionCheck]
) -> tuple[list[DetectionRow], list[CheckResult]]:
    """One row per detection output, and its checks."""
    rows, results = [], []
    for g in plan_.groups:
        stats = DetectionStats(iou=cfg.iou)
        errors = []
        for si in range(samples):
            got = g.values.get(si, {})
            missing = [t for t in g.candidate.tensors if t not in got]
            if missing:
                errors.append(f"sample {si}: the candidate gave no {', '.join(missing)}")
                continue
            try:
                ref_values = {t: ref.store.get(si, t) for t in g.layout.tensors}
                stats.add(si, *paired_images(g.layout, ref_values, g.candidate, got))
            except DetectionError as exc:
                errors.append(f"sample {si}: {exc}")
        g.values.clear()
        p = ref.graph.producers.get(g.layout.tensors[0])
        row, judged = judge(g.layout, g.candidate, stats, errors, checks, iou=cfg.iou, samples=samples, stage=NAME,
                           prefix=f"{name}: ", where={"candidate": name}, covers=g.covers,
                           producer=(p.node, p.op_type, p.index) if p else None)  # fmt: skip
        rows.append(row)
        results += judged
    return rows, results


def judge(
    layout: Layout,
    candidate: Layout,
    stats: DetectionStats,
    errors: list[str],
    checks: Sequence[DetectionCheck],
    *,
    iou: float,
    samples: int,
    stage: str,
    prefix: str = "",
    where: dict[str, str] | None = None,
    covers: Sequence[str] = (),
    producer: tuple[str, str, int] | None = None,
) -> tuple[DetectionRow, list[CheckResult]]:
    """One detection output's row and its checks (`stage`'s, named `prefix` + 'boxes in ...'), from its matches
    over every sample (`errors`: the samples that could not be compared)."""
    metrics = stats.metrics()
    label = ", ".join(layout.tensors)
    where = {**(where or {}), "tensor": layout.tensors[0]}
    detail: dict[str, object] = {"tensors": layout.tensors, "layout": layout.kind}
    results, failed = [], []
    if errors:
        results.append(failed_check(f"{prefix}boxes in {label}: comparable", stage, "comparable",
                                    {**detail, "errors": errors[:5]}, **where))  # fmt: skip
        failed.append("comparable")
    for ch in checks:
        value = metrics[ch.metric] if stats.images else None
        ok = value is not None and ch.passes(value)
        results.append(
            CheckResult(
                name=f"{prefix}boxes in {label}: {ch.condition}",
                stage=stage,
                metric=ch.metric,
                value=value,
                threshold=ch.threshold,
                op=ch.op,  # type: ignore[arg-type]
                passed=ok,
                detail=detail if ok else {**detail, "reason": _why(stats)},
                **where,
            )
        )
        if not ok:
            failed.append(ch.condition)
    worst = stats.worst
    node, op_type, index = producer if producer else (None, None, -1)
    row = DetectionRow(
        tensors=layout.tensors,
        candidate_tensors=candidate.tensors if candidate.tensors != layout.tensors else None,
        layout=layout.kind,  # type: ignore[arg-type]
        roles={r: t for r, t in layout.roles.items() if t is not None},
        recognised=layout.source,
        covers=list(covers),
        node=node,
        op_type=op_type,
        topo_index=index,
        iou=iou,
        samples=samples - len(errors),
        images=stats.images,
        reference_boxes=stats.reference_boxes,
        candidate_boxes=stats.candidate_boxes,
        matched=stats.matched,
        class_changes=stats.class_changes,
        nonfinite=stats.nonfinite,
        unmatched_score_max=stats.unmatched_score_max,
        worst_image=WorstImage(sample=worst[1], image=worst[2], matched_fraction=worst[0]) if worst else None,
        metrics=metrics,
        errors=errors[:3] or None,
        passed=not failed,
        failed=failed or None,
    )
    return row, results


def _why(stats: DetectionStats) -> str:
    """What a failing detection check rests on, in words."""
    if not stats.images:
        return "no sample could be compared"
    m = stats.metrics()
    out = (
        f"{stats.matched} of {stats.reference_boxes} reference boxes matched ({stats.candidate_boxes} candidate "
        f"boxes in {stats.images} images), mean IoU {m['mean_iou']:.4g}, largest score change "
        f"{m['max_score_change']:.3g}"
    )
    if stats.unmatched_score_max is not None:
        out += f", highest unmatched score {stats.unmatched_score_max:.3g}"
    if stats.class_changes:
        out += f", {stats.class_changes} boxes changed class"
    if stats.worst is not None and stats.worst[0] < 1:
        out += f"; worst image: sample {stats.worst[1]}, image {stats.worst[2]} ({stats.worst[0]:.3g} matched)"
    return out
