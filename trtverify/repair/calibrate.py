"""`--method auto`: the INT8 calibration method chosen per model on calibration rows it was not calibrated on.

The last quarter of the rows (at least one) is held out; the model is calibrated with each of ONNX Runtime's
methods (minmax, entropy, percentile) on the rest, and each candidate runs against the FP32 reference on the
held-out rows in ONNX Runtime (repair/evaluate.py: every value tensor computed). The figure of a method is its worst
rel_l2 over the *judged tensors* and held-out rows; the smallest wins (the first in METHODS on a tie) and the final
model is calibrated with it on all rows.

The judged tensors (`judged_tensors`) are what a detector computes before its post-processing: its NMS, TopK and
NonZero (and an If or Loop around them) select, sort and index, so the element-wise error of their outputs says
nothing (a box moved to another rank is all error; the labels are integers). In a model with an NMS (the op, one
inside an If/Loop, a plugin whose op type says NMS), those ops and everything after them are cut, and the float
tensors flowing into the cut (SSDlite: its per-class scores and its decoded boxes of every anchor, before any
selection) are judged, with any float output outside it. A model without an NMS is judged on its float outputs
(a TopK or NonZero alone may sit anywhere: a router, a mask).

Cost bound: minmax runs first; each other method's range computation gets a budget of BUDGET_FACTOR times minmax's
whole calibration (at least BUDGET_FLOOR_S): entropy's per-tensor threshold search, the part that takes minutes
whatever the rows (percentile's ranges are one cumulative sum per histogram, well under a second, and have no stop),
is stopped, and entropy not compared, once its projected time passes the budget (the line says so, with the
projection; `--method entropy` still calibrates with it alone, unbounded). So auto runs at most 3 calibrations on
the fit rows and 1 on all rows (with a method that stayed in its budget), and entropy's threshold search (the one
part whose cost does not follow the rows: about 1 s per tensor on ONNX Runtime 1.32) takes at most the budget, twice
when entropy wins.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.convert.calibranges import OverBudget
from trtverify.convert.int8 import METHODS, quantize
from trtverify.repair.evaluate import Reference, evaluate
from trtverify.util.errors import UsageError

HOLD_OUT = 0.25  # the fraction of calibration rows held out to judge each method
BUDGET_FACTOR = 10.0  # a method's range computation may take this many times minmax's whole calibration
BUDGET_FLOOR_S = 30.0  # and at least this (a small model's minmax takes a second)
# with an NMS, the ops that select, sort or index: their outputs and everything after them are not judged element-wise
POSTPROCESS_OPS = ("NonMaxSuppression", "TopK", "NonZero")


@dataclass(frozen=True)
class Choice:
    """What `auto` chose and why: each method's figure (worst rel_l2 over the judged tensors on the held-out rows),
    the tensors judged and why, and the methods stopped by the budget."""

    method: str
    figures: dict[str, float] = field(default_factory=dict)
    fit_rows: int = 0
    held_out: int = 0
    note: str | None = None  # why nothing was compared (too few rows)
    judged: tuple[str, ...] = ()
    judged_why: str = ""
    skipped: dict[str, str] = field(default_factory=dict)  # method -> why it was not compared (over budget)

    def record(self) -> dict[str, Any]:
        """What the model's metadata says of it (convert/int8.py record_calibration); JSON (null: non-finite)."""
        return {
            "method": self.method,
            "chosen_by": "auto",
            "calibration_rows": self.fit_rows + self.held_out,
            "held_out_rows": self.held_out,
            # worst rel_l2 over the judged tensors on the held-out rows, per method
            "figures": {m: (v if math.isfinite(v) else None) for m, v in self.figures.items()},
            **({"judged": list(self.judged), "judged_why": self.judged_why} if self.judged else {}),
            **({"skipped": self.skipped} if self.skipped else {}),
            **({"note": self.note} if self.note else {}),
        }


def chooser(progress: Callable[[str], None]) -> Callable[..., dict[str, Any]]:
    """`choose` as a suite recipe calls it (convert/recipes.py Chooser): its record, progress lines to `progress`."""

    def run(
        reference: Path, out: Path, calibration: Sequence[dict[str, np.ndarray]], symmetric: bool, per_channel: bool
    ) -> dict[str, Any]:
        choice = choose(reference, out, calibration, symmetric=symmetric, per_channel=per_channel, progress=progress)
        progress(f"calibration method: {choice.method}" + (f" ({choice.note})" if choice.note else ""))
        return choice.record()

    return run


def split(rows: int) -> tuple[int, int]:
    """(rows calibrated on, rows held out): the last quarter, at least one, held out; (rows, 0) when fewer than 2."""
    if rows < 2:
        return rows, 0
    held = max(1, int(rows * HOLD_OUT))
    return rows - held, held


def choose(
    reference: Path,
    out: Path,
    calibration: Sequence[dict[str, np.ndarray]],
    *,
    symmetric: bool = True,
    per_channel: bool = True,
    exclude: Iterable[str] = (),
    progress: Callable[[str], None] = lambda _: None,
) -> Choice:
    """Calibrate `reference` with the method whose held-out error is smallest, written to `out`."""
    opts: dict[str, Any] = {"symmetric": symmetric, "per_channel": per_channel, "exclude": list(exclude),
                            "progress": progress}  # fmt: skip
    fit, held = split(len(calibration))
    if held == 0:
        note = f"{len(calibration)} calibration row(s): too few to hold any out, so minmax without comparing"
        quantize(reference, out, calibration, **opts)
        return Choice("minmax", {}, fit, 0, note)
    test = list(calibration[fit:])
    figures: dict[str, float] = {}
    skipped: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="trtverify-calibrate-") as tmp:
        try:
            ref = Reference.run(reference, test, workdir=Path(tmp))  # on disk past the memory budget
        except UsageError as exc:  # e.g. a plugin node with no reference: nothing to judge the methods on
            note = f"the reference cannot run here to compare methods ({exc}), so minmax without comparing"
            quantize(reference, out, calibration, **opts)
            return Choice("minmax", {}, len(calibration), 0, note)
        judged, why = judged_tensors(ref)
        shown = ", ".join(judged[:6]) + (f" and {len(judged) - 6} more" if len(judged) > 6 else "")
        progress(f"judging each method on {why}: {shown}")
        budget = math.inf
        for method in METHODS:  # minmax first: its time sets the others' budget
            progress(f"calibrating with {method} on rows 0-{fit - 1}, judging on rows {fit}-{len(calibration) - 1}")
            t0 = time.monotonic()
            try:
                cand = quantize(reference, Path(tmp) / f"{method}.onnx", calibration[:fit], method=method,
                                budget_s=None if method == "minmax" else budget, **opts)  # fmt: skip
            except OverBudget as stop:
                skipped[method] = (
                    f"its range computation would take about {stop.projected:.0f} s ({stop.done}/{stop.total} "
                    f"tensors in {stop.spent:.1f} s), over auto's budget of {stop.budget:.0f} s"
                )
                progress(f"{method}: not compared: {skipped[method]} ({BUDGET_FACTOR:g}x minmax's calibration, at "
                         f"least {BUDGET_FLOOR_S:g} s); --method {method} calibrates with it alone")  # fmt: skip
                continue
            if method == "minmax":
                budget = max(BUDGET_FLOOR_S, BUDGET_FACTOR * (time.monotonic() - t0))
            ev = evaluate(ref, cand, test, [], "outputs", ())
            worst = max((ev.errors.get(t, math.inf) for t in judged), default=math.inf)
            figures[method] = math.inf if ev.nonfinite or worst != worst else worst
            progress(f"{method}: worst rel_l2 over the judged tensors {figures[method]:.4g}")
    best = min(figures, key=lambda m: figures[m])
    progress(f"calibrating with {best} on all {len(calibration)} rows")
    quantize(reference, out, calibration, method=best, **opts)
    return Choice(best, figures, fit, held, judged=tuple(judged), judged_why=why, skipped=skipped)


def judged_tensors(ref: Reference) -> tuple[list[str], str]:
    """The tensors `auto` judges a method on, and what they are (see module). In a model with an NMS (the op, an
    If/Loop holding one, a plugin whose op type says NMS): the float tensors that flow into its post-processing
    (the NMS and every TopK and NonZero, and all after them) from before it, and any float output outside it.
    Otherwise (a TopK or NonZero alone may be anywhere: a router, a mask) the float graph outputs."""
    from trtverify.graph.onnxgraph import subgraphs

    graph = ref.graph

    def nms(node: Any) -> bool:
        return (
            "nms" in node.op_type.lower()
            or "nonmaxsuppression" in node.op_type.lower()
            or any(nms(n) for g in subgraphs(node) for n in g.node)
        )

    def is_float(name: str) -> bool:
        return (0, name) in ref.store and ref.store.get(0, name).dtype.kind == "f"

    outputs = [o for o in ref.outputs if is_float(o)] or list(ref.outputs)
    if not any(nms(n) for n in graph.nodes):
        return outputs, "its float outputs"
    cut = {i for i, n in enumerate(graph.nodes) if n.op_type in POSTPROCESS_OPS or nms(n)}
    ops = sorted({graph.nodes[i].op_type for i in cut})
    todo = list(cut)
    while todo:  # everything after the post-processing ops
        for out in graph.nodes[todo.pop()].output:
            for j, _ in graph.consumers.get(out, []):
                if j not in cut:
                    cut.add(j)
                    todo.append(j)

    def made_before(t: str) -> bool:
        return t in graph.producers and graph.producers[t].index not in cut

    into = [
        t
        for t in ref.order
        if made_before(t)
        and t not in graph.constants
        and any(j in cut for j, _ in graph.consumers.get(t, []))
        and is_float(t)
    ]
    judged = into + [o for o in outputs if made_before(o) and o not in into]
    if not judged:
        return outputs, "its float outputs"
    return judged, f"the float tensors flowing into its post-processing ({', '.join(ops)}), not its outputs"
