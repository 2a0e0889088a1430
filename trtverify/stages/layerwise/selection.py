"""Index tensors in the layerwise stage: compared by what they select, never element by element, never a root cause.

A selection op's indices (TopK's second output, ArgMax, ArgMin, NonZero, NonMaxSuppression, the integer output of
an If or Loop holding one of them, a comparison's mask) change by a whole position where two near-equal values
swap, which a lower precision does; compared index by index, a TopK whose top two scores differ in the fourth digit
reads as the worst layer of the network. Here:

- `index` tensors: those outputs, and what is computed from them alone (reshaped, sliced, concatenated, cast,
  offset or divided by constants, gathered from, their shape): compared as sets, `selected_overlap` = the size of
  the intersection of the two multisets of values over that of their union (for a mask: of the positions set; for
  ArgMax and ArgMin, a label per position: the share of positions whose labels agree);
- `selected` tensors: values picked by index tensors (the data of a Gather, GatherND or GatherElements whose indices
  are an index tensor), and what is computed from them before a weighted layer (Conv, MatMul, Gemm): compared in
  value order, `sorted_rel_l2` = rel_l2 of the two sides' values each sorted (where their sizes differ the selection
  did: `size_overlap`, the smaller size over the larger, says by how much).

Neither kind enters the elementwise checks or the root causes; a graph output of indices is checked with
`selected_overlap >= 0.9`, and graph outputs of values stay compared as they are (or as detections). The tensors a
detection row covers (`stages.layerwise.detections`) are compared there instead.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtverify.compare.checks import CheckResult
from trtverify.graph.onnxgraph import GraphIndex, nested_nodes, subgraphs
from trtverify.stages.layerwise.models import Row
from trtverify.stages.layerwise.reference import NAME, ReferencePass

SOURCES = {"TopK": (1,), "ArgMax": (0,), "ArgMin": (0,), "NonZero": (0,), "NonMaxSuppression": (0,)}
MASKS = {"Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"}
GATHERS = {"Gather", "GatherND", "GatherElements"}
WEIGHTED = {"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MatMul", "MatMulInteger", "QLinearMatMul", "Gemm"}
COUNTS = {"Shape", "Size"}
# the first input is the data, the others say how to move it: the output is the first input's kind
DATA_ONLY = {"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Transpose", "Slice", "Expand", "Tile", "Split", "Cast",
             "Identity", "Pad", "ReduceMax", "ReduceMin", "CumSum"}  # fmt: skip
# an index input that only conditions which values pass, or sets a size: the values keep their order
PASS_THROUGH = {"Where", "ConstantOfShape", "Range", "Resize", "Loop", "If"}
OUTPUT_MIN = 0.9  # selected_overlap a graph output of indices needs


@dataclass(frozen=True)
class Selection:
    kind: str  # index | selected
    why: str  # what it is, in words
    by_position: bool = False  # a label per position (ArgMax, ArgMin): the share of positions that agree


def _subgraph_ops(node: object) -> set[str]:
    return {n.op_type for g in subgraphs(node) for n in nested_nodes(g)}


def classify(g: GraphIndex, dtypes: dict[str, str]) -> dict[str, Selection]:
    """The index and selected tensors of the graph (`dtypes`: the reference's dtype of each value tensor)."""
    out: dict[str, Selection] = {}
    for idx, n in enumerate(g.nodes):
        label = f"{n.op_type} {g.label(idx)}"
        outs = [o for o in n.output if o]
        ins = [out[i] for i in n.input if i in out]
        kind: str | None = None
        if n.op_type in SOURCES:
            for slot in SOURCES[n.op_type]:
                if slot < len(n.output) and n.output[slot]:
                    out[n.output[slot]] = Selection("index", f"indices of {label}", n.op_type in ("ArgMax", "ArgMin"))
            continue
        if n.op_type in ("If", "Loop") and _subgraph_ops(n) & set(SOURCES):
            for o in outs:
                if np.dtype(dtypes.get(o, "float32")).kind in "iub":
                    out[o] = Selection("index", f"indices of {label}")
            continue
        if n.op_type in MASKS:
            if ins or _feeds_nonzero(g, outs):  # a comparison of indices, or the mask NonZero selects by
                kind, why = "index", f"mask of {label}"
        elif n.op_type in WEIGHTED or n.op_type in PASS_THROUGH or not ins:
            continue
        elif n.op_type in COUNTS:
            kind, why = "index", f"size of a selection ({label})"
        elif n.op_type in GATHERS and len(n.input) > 1:
            data, indices = out.get(n.input[0]), out.get(n.input[1])
            if data is not None and data.kind == "index":
                kind, why = "index", f"{data.why}, gathered by {label}"
            elif indices is not None:
                kind, why = "selected", f"values picked by {label}"
            elif data is not None:
                kind, why = data.kind, data.why
        elif n.op_type in DATA_ONLY:
            first = out.get(n.input[0]) if n.input else None
            if first is not None:
                for o in outs:
                    out[o] = first
                continue
        else:  # arithmetic, Concat, ...: indices with constants stay indices; with values, values in their order
            values = [i for i in n.input if i and i not in out and i not in g.constants]
            kind = "selected" if values or any(s.kind == "selected" for s in ins) else "index"
            why = ins[0].why
        if kind is not None:
            for o in outs:
                out[o] = Selection(kind, why)
    return out


def _feeds_nonzero(g: GraphIndex, tensors: list[str]) -> bool:
    """A comparison whose mask goes (through casts and reshapes) into NonZero: the positions it selects."""
    todo, seen = list(tensors), set()
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        for c, _ in g.consumers.get(t, []):
            op = g.nodes[c].op_type
            if op == "NonZero":
                return True
            if op in ("Not", "Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "And", "Or"):
                todo += [o for o in g.nodes[c].output if o]
    return False


def overlap(ref: np.ndarray, cand: np.ndarray) -> float:
    """Intersection over union of the two multisets of values (of the positions set, for a boolean mask)."""
    a, b = np.asarray(ref), np.asarray(cand)
    if a.dtype == bool and b.dtype == bool and a.shape == b.shape:
        x, y = set(np.flatnonzero(a).tolist()), set(np.flatnonzero(b).tolist())
        return len(x & y) / len(x | y) if x | y else 1.0
    ca, cb = Counter(a.reshape(-1).tolist()), Counter(b.reshape(-1).tolist())
    union = sum((ca | cb).values())
    return sum((ca & cb).values()) / union if union else 1.0


def sorted_rel_l2(ref: np.ndarray, cand: np.ndarray) -> float:
    """rel_l2 of the two sides' values each sorted (NaN where their sizes differ or nothing is finite)."""
    a = np.sort(np.asarray(ref, dtype=np.float64).reshape(-1))
    b = np.sort(np.asarray(cand, dtype=np.float64).reshape(-1))
    if a.shape != b.shape:
        return math.nan
    ok = np.isfinite(a) & np.isfinite(b)
    if not ok.any():
        return math.nan
    num, den = float(np.linalg.norm(a[ok] - b[ok])), float(np.linalg.norm(a[ok]))
    return num / den if den > 0 else (0.0 if num == 0 else math.inf)


@dataclass
class Series:
    """One index or selected tensor's comparison over the samples: the worst of each metric."""

    tensor: str
    candidate: str
    what: Selection
    samples: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    shape: list[int] | None = None
    dtype: str | None = None
    cand_dtype: str | None = None

    def add(self, ref: np.ndarray, cand: np.ndarray) -> None:
        self.samples += 1
        self.shape, self.dtype, self.cand_dtype = list(np.shape(ref)), str(ref.dtype), str(cand.dtype)
        if self.what.kind == "index" and self.what.by_position and np.shape(ref) == np.shape(cand):
            same = np.asarray(ref) == np.asarray(cand)
            got = {
                "selected_overlap": float(same.mean()) if same.size else 1.0
            }  # labels agreeing, position by position
        elif self.what.kind == "index":
            got = {"selected_overlap": overlap(ref, cand)}
        else:
            got = {"sorted_rel_l2": sorted_rel_l2(ref, cand), "size_overlap": _sizes(ref, cand)}
        for k, v in got.items():
            if v != v:
                continue
            old = self.metrics.get(k)
            worse = old is None or (v < old if k.endswith("overlap") else v > old)
            self.metrics[k] = v if worse else old  # type: ignore[assignment]


def _sizes(ref: np.ndarray, cand: np.ndarray) -> float:
    n, m = np.size(ref), np.size(cand)
    return min(n, m) / max(n, m) if max(n, m) else 1.0


@dataclass
class Plan:
    """The index and selected tensors a candidate's comparison sets apart (reference tensor -> its series)."""

    series: dict[str, Series] = field(default_factory=dict)

    @functools.cached_property
    def by_candidate(self) -> dict[str, str]:
        """Candidate tensor -> reference tensor (made once: asked for every tensor of every sample)."""
        return {s.candidate: r for r, s in self.series.items()}

    @property
    def tensors(self) -> set[str]:
        return set(self.series)


def plan(ref: ReferencePass, pairs: Collection[tuple[str, str]], covered: Collection[str]) -> Plan:
    """The paired tensors that are index or selected tensors, except those a detection row covers."""
    found = classify(ref.graph, ref.dtype)
    outputs = set(ref.graph.outputs)  # values the graph outputs are its contract: compared as they are
    picked = [(r, c) for r, c in pairs if r in found and r not in covered]
    return Plan({r: Series(r, c, found[r]) for r, c in picked if not (r in outputs and found[r].kind == "selected")})


def rows_and_checks(ref: ReferencePass, p: Plan, name: str) -> tuple[list[Row], list[CheckResult]]:
    """One row each (passed: no elementwise check applies), and a check for each graph output among them."""
    rows, checks = [], []
    for r, s in p.series.items():
        prod = ref.graph.producers.get(r)
        ok = True
        if r in ref.graph.outputs:
            value = s.metrics.get("selected_overlap")
            ok = value is not None and value >= OUTPUT_MIN
            checks.append(
                CheckResult(
                    name=f"{name}: {r} (indices): selected_overlap >= {OUTPUT_MIN:g}",
                    stage=NAME,
                    metric="selected_overlap",
                    value=value,
                    threshold=OUTPUT_MIN,
                    op=">=",
                    passed=ok,
                    candidate=name,
                    tensor=r,
                    detail={"compared_by": s.what.why},
                )
            )
        rows.append(
            Row(
                tensor=r,
                candidate_tensor=s.candidate if s.candidate != r else None,
                compared_by=f"what it selects ({s.what.kind}: {s.what.why})",
                node=prod.node if prod else None,
                op_type=prod.op_type if prod else None,
                topo_index=prod.index if prod else -1,
                shape=s.shape,
                dtype=s.dtype,
                candidate_dtype=s.cand_dtype,
                samples=s.samples,
                metrics=s.metrics,
                passed=ok,
                failed=None if ok else [f"selected_overlap >= {OUTPUT_MIN:g}"],
            )
        )
    return rows, checks


def merged(rows: list, checks: list, ref: Any, picked: Any, name: str) -> tuple[list, list]:
    """The value rows and checks with the index tensors' own (compared by what they select), in graph order."""
    picked_rows, picked_checks = rows_and_checks(ref, picked, name)
    return sorted(rows + picked_rows, key=lambda row: row.topo_index), checks + picked_checks
