"""The smallest FP32 keep-list that makes a lowered model pass, found by evaluation and verified.

1. Seeds, from what the lowered model shows before anything is kept: the nodes whose constants the
   conversion saturated, flushed or changed beyond rounding (the lint against the reference), the
   producers of reference activations beyond FP16's range, the readers of quantized activations whose
   calibrated range clips 1% of the reference's values or more, or whose INT8 step is 2x the median nonzero
   |x| (the range report, stages/layerwise/ranges.py; the worst first), and, in topological order, the first
   node whose output turns non-finite where the reference's is finite.
2. Grow: while the target fails, keep one more node: the first node (topological order) whose output
   is non-finite where the reference's is finite; else a node reading a cast to FP16 that overflows
   (a kept node's FP32 output too large for its FP16 reader); else the node adding the most error
   (its output rel_l2 minus its inputs' largest). Each step is one evaluation.
3. Shrink: drop each member whose removal still passes (latest first), so the result is 1-minimal:
   removing any single node fails. The final keep-list was the last evaluation that passed.

Every evaluation is counted; `max_evaluations` bounds the search, and the best candidate seen (the
fewest failures) is reported when nothing passes.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.config.checks import Check
from trtverify.convert.fp16 import FP16_MAX, to_fp16
from trtverify.convert.int8 import quantize, record_calibration
from trtverify.convert.islands import keep_fp32 as islands
from trtverify.convert.islands import lowered_nodes
from trtverify.graph.lightmodel import GraphBytes
from trtverify.graph.onnxgraph import GraphIndex, elem_types
from trtverify.lint.linter import precision_parts
from trtverify.lint.reference_constants import reference_constant_findings
from trtverify.repair.calibrate import choose
from trtverify.repair.evaluate import Evaluation, Reference, evaluate
from trtverify.stages.layerwise.ranges import report as range_report
from trtverify.util.errors import UsageError
from trtverify.util.words import count

Progress = Callable[[str], None]


@dataclass
class Search:
    """What a search did: every evaluation, in order, and the outcome."""

    precision: str
    keep: list[str]
    passed: bool
    seeds: dict[str, str]  # node -> why it was a seed
    steps: list[Evaluation] = field(default_factory=list)
    before: Evaluation | None = None
    after: Evaluation | None = None
    model: Any = None  # the repaired onnx.ModelProto
    lowered: Any = None  # the lowered model with nothing kept (what the search started from)
    order: list[str] = field(default_factory=list)  # the reference's value tensors, topological order
    producer: dict[str, str] = field(default_factory=dict)  # tensor -> the node (label) computing it
    stopped: str = ""  # why the search ended where it did not pass
    lowerable: int = 0  # nodes keeping can change
    calibration: dict[str, Any] | None = None  # int8 made here: how it was calibrated (the method auto chose)
    interrupted: BaseException | None = None  # Ctrl-C or SIGTERM during the search: the best so far is reported


class Lowering:
    """Makes the lowered model for a keep-list: the reference lowered to FP16 here with FP32 islands, or a lowered
    model (INT8 Q/DQ quantised here, or the user's candidate: Q/DQ, FP16/BF16 or both) with the kept nodes
    computing in FP32 again (convert/islands.py)."""

    def __init__(
        self,
        reference: Path,
        precision: str,
        calibration: Sequence[dict[str, np.ndarray]],
        workdir: Path,
        candidate: Path | None = None,
        method: str = "auto",
        progress: Progress = lambda _: None,
    ):
        import onnx

        self.precision = precision
        self.calibration: dict[str, Any] | None = None
        self.reference = onnx.load(str(reference))
        self.workdir = workdir
        self.count = 0
        self.labels = _labels(self.reference)
        self.qdq = None  # the lowered model the islands are made in (None: FP16 made from the reference)
        self.types: dict[str, int] | None = None  # its element types, read on first use
        if candidate is not None:
            self.qdq = onnx.load(str(candidate))
            if precision_parts(self.qdq) == ["fp32"]:
                raise UsageError(
                    f"--candidate {candidate}: it computes in FP32 (no Q/DQ, no FP16/BF16 types): nothing was lowered "
                    "to repair"
                )
        elif precision == "int8":
            self.qdq = onnx.load(str(self._calibrated(reference, workdir / "int8_qdq.onnx", calibration, method,
                                                      progress)))  # fmt: skip
        elif precision != "fp16":
            raise UsageError(
                f"repair lowers to fp16 and int8 itself; a {precision} model comes from ModelOpt: pass it as the "
                f"candidate (trtverify repair REF --precision {precision} --candidate MODEL.onnx)"
            )

    def _calibrated(
        self, reference: Path, out: Path, calibration: Sequence[dict[str, np.ndarray]], method: str, progress: Progress
    ) -> Path:
        """The reference quantized on `calibration` with `method`, or with the method `auto` finds best (as
        `convert --method auto`: repair/calibrate.py); what was chosen goes to self.calibration."""
        if method != "auto":
            quantize(reference, out, calibration, method=method, progress=progress)
            self.calibration = {"method": method, "calibration_rows": len(calibration)}
            return out
        choice = choose(reference, out, calibration, progress=progress)
        figures = ", ".join(f"{m} {v:.4g}" for m, v in choice.figures.items())
        progress(f"int8 calibration method: {choice.method} ({figures or choice.note})")
        self.calibration = choice.record()
        return out

    def model(self, keep: Sequence[str]) -> Any:
        if self.qdq is None:
            return to_fp16(self.reference, keep)
        if self.types is None:  # one type inference per search, not one per evaluation
            self.types = elem_types(self.qdq)
        return islands(self.qdq, self.reference, keep, self.types)

    def runnable(self, keep: Sequence[str]) -> tuple[GraphBytes, Any]:
        """The lowered model for `keep`, serialized in memory for ONNX Runtime (no file is written)."""
        self.count += 1
        model = self.model(keep)
        return GraphBytes(model.SerializeToString(), self.workdir, f"candidate{self.count}.onnx"), model

    def save(self, model: Any, name: str) -> Path:
        """`model` as a file, for a hook that reads one (the suite's e2e gates)."""
        import onnx

        path = self.workdir / name
        onnx.save(model, str(path))
        return path


def _labels(model: Any) -> list[str]:
    g = GraphIndex.from_model(model)
    return [g.label(i) for i in range(len(g.nodes))]


def _seeds(
    ref: Reference, lowering: Lowering, model: Any, first: Evaluation, rows: Sequence[dict[str, np.ndarray]]
) -> dict[str, str]:
    """Nodes that must stay FP32 by what the lowered model shows (see the module docstring)."""
    seeds: dict[str, str] = _range_seeds(ref, model, rows) if lowering.qdq is not None else {}
    if lowering.qdq is None or _narrow(model):  # FP16/BF16 parts: constants clipped, activations beyond range
        cand = GraphIndex.from_model(model)
        for _, f in reference_constant_findings(ref.graph, cand):
            if f.node and f.node in lowering.labels:
                seeds.setdefault(f.node, f"{f.kind}: {f.detail.get('reference', f.tensor)}")
        for t in ref.order:
            if ref.max_abs.get(t, 0.0) > FP16_MAX and t in ref.graph.producers:
                seeds.setdefault(ref.graph.producers[t].node, f"reference activation {t} beyond FP16's range")
    if first.nonfinite:
        node = ref.graph.producers[first.nonfinite[0]].node
        seeds.setdefault(node, f"first non-finite output: {first.nonfinite[0]}")
    return {n: why for n, why in seeds.items() if n in lowering.labels}


# a calibrated range is bad where it clips this share of the reference's values on the search's rows, or where its
# INT8 step is this many times the median of the tensor's nonzero |x| (the typical value rounds to 0 or one step: a
# range an outlier stretched). Right MinMax ranges measured at most 0.14x on the demo's Fashion-MNIST CNN; the issue's
# corrupted calibration row (one pixel of 1000 among values in [0, 1]) made 8x to 16x on a three-convolution CNN
CLIP_SEED = 0.01
STEP_SEED = 2.0
RANGE_SEEDS = 5  # at most this many tensors' readers seeded by their ranges (each costs an evaluation to shrink)


def _range_seeds(ref: Reference, model: Any, rows: Sequence[dict[str, np.ndarray]]) -> dict[str, str]:
    """The readers of the quantized activations whose calibrated range is bad (the range report of the layerwise
    stage, stages/layerwise/ranges.py, on the search's rows), the worst range first: they are seeded first."""
    graph = GraphIndex.from_model(model)
    seeds: dict[str, str] = {}
    bad = [r for r in range_report(ref, graph, [(t, t) for t in ref.order], rows)
           if r.clipped_fraction >= CLIP_SEED or (r.step_over_median or 0.0) >= STEP_SEED]  # fmt: skip
    labels = {graph.label(i): i for i, n in enumerate(graph.nodes) if n.op_type == "QuantizeLinear"}
    for r in bad[:RANGE_SEEDS]:  # the report's order: most clipped first, then the coarsest step
        why = (
            f"calibrated range of {r.tensor} (±{r.limit:.4g}) clips {100 * r.clipped_fraction:.3g}% of the "
            f"reference's values (max {r.reference_max_abs:.4g})"
            if r.clipped_fraction >= CLIP_SEED
            else f"calibrated range of {r.tensor} (±{r.limit:.4g}): its INT8 step is {r.step_over_median:.3g}x the "
            "median nonzero |x| of the reference's values"
        )
        q = labels.get(r.quantize_node or "")
        for dq, _ in graph.consumers.get(graph.nodes[q].output[0], []) if q is not None else []:
            for reader, _ in graph.consumers.get(graph.nodes[dq].output[0], []):  # the nodes reading it quantized
                seeds.setdefault(graph.label(reader), why)
    return seeds


def _next(ref: Reference, ev: Evaluation, keep: Sequence[str], allowed: set[str]) -> str | None:
    """The node to keep next: the first non-finite one, a reader of an overflowing cast to FP16, else the one
    adding the most error."""
    for t in ev.nonfinite:
        node = ref.graph.producers[t].node
        if node not in keep and node in allowed:
            return node
    for readers in ev.overflows.values():
        for node in readers:
            if node not in keep and node in allowed:
                return node
    best, best_added = None, 0.0
    for node, added in added_errors(ref, ev).items():
        if node not in keep and node in allowed and added > best_added:
            best, best_added = node, added
    return best


def added_errors(ref: Reference, ev: Evaluation) -> dict[str, float]:
    """Each node's added error in `ev` (the amplification ranking of the layerwise stage): its output's rel_l2 minus
    the largest of its inputs', the largest over its outputs; node -> added error, in the reference's order."""
    out: dict[str, float] = {}
    for t, err in ev.errors.items():
        p = ref.graph.producers.get(t)
        if p is None:
            continue
        inputs = [ev.errors.get(i, 0.0) for i in ref.graph.nodes[p.index].input if i]
        added = err - max(inputs, default=0.0)
        out[p.node] = max(out.get(p.node, added), added)
    return out


def search(
    reference: Path,
    precision: str,
    samples: Sequence[dict[str, np.ndarray]],
    checks: Sequence[Check],
    *,
    tensors: str = "outputs",
    calibration: Sequence[dict[str, np.ndarray]] = (),
    candidate: Path | None = None,
    max_evaluations: int = 50,
    progress: Progress = lambda _: None,
    extra: Callable[[Path], list[str]] | None = None,
    reference_pass: Reference | None = None,
    method: str = "auto",
) -> Search:
    """Find a 1-minimal FP32 keep-list for `reference` lowered to `precision` (fp16 or int8).

    INT8: the Q/DQ model is `candidate` when given (a user's quantised model), else quantised here
    (symmetric, per-channel) on `calibration` (default: the samples) with `method` (auto: the one whose held-out
    error is smallest, repair/calibrate.py). `extra(path)` adds failures of its own
    (the suite's e2e gates), asked only where the tensors pass."""
    with tempfile.TemporaryDirectory(prefix="trtverify-repair-") as tmp:
        work = Path(tmp)
        # the one reference pass of the search (given: made with the held-out rows after the search's)
        ref = reference_pass if reference_pass is not None else Reference.run(reference, samples, work)
        lowering = Lowering(reference, precision, calibration or samples, work, candidate, method, progress)
        quantized = set(lowered_nodes(lowering.qdq, lowering.reference)) if lowering.qdq else set(lowering.labels)
        steps: list[Evaluation] = []

        def run(keep: Sequence[str]) -> Evaluation:
            graph, model = lowering.runnable(keep)
            ev = evaluate(ref, graph, samples, checks, tensors, tuple(keep))
            if extra is not None and ev.passed:
                ev.failed += extra(lowering.save(model, graph.name))
                ev.passed = not ev.failed
            steps.append(ev)
            progress(
                f"evaluation {len(steps)}: keep {count(len(keep), 'node')}: {'passes' if ev.passed else ev.failed[0]}"
            )
            return ev

        before = run([])
        out = Search(precision, [], before.passed, {}, steps, before, calibration=lowering.calibration)
        try:
            _grow_and_shrink(ref, lowering, quantized, out, run, max_evaluations, samples)
        except KeyboardInterrupt as exc:  # the best keep-list so far is reported (repair.json), then it goes on up
            out.interrupted = exc
            out.stopped = f"interrupted after {count(len(steps), 'evaluation')}"
        best = min(steps, key=_rank)
        out.keep, out.passed, out.after = list(best.keep), best.passed, best
        out.model = lowering.model(out.keep)
        out.lowered = lowering.model([])
        if lowering.calibration is not None:  # the files say how they were calibrated, as convert's do
            record_calibration(out.model, lowering.calibration)
            record_calibration(out.lowered, lowering.calibration)
        out.lowerable = len(quantized)
        out.order = list(ref.order)
        out.producer = {t: p.node for t, p in ref.graph.producers.items()}
        return out


def _grow_and_shrink(
    ref: Reference,
    lowering: Lowering,
    quantized: set[str],
    out: Search,
    run: Callable[[Sequence[str]], Evaluation],
    max_evaluations: int,
    rows: Sequence[dict[str, np.ndarray]],
) -> None:
    """Grow the keep-list from the seeds until it passes, then shrink it to 1-minimal (the module docstring)."""
    steps, before = out.steps, out.before
    assert before is not None
    if not before.passed:
        out.seeds = _seeds(ref, lowering, lowering.model([]), before, rows)
        keep = [n for n in out.seeds if n in quantized]
        ev = run(keep) if keep and len(steps) < max_evaluations else before
        while not ev.passed and len(steps) < max_evaluations:
            nxt = _next(ref, ev, keep, quantized)
            if nxt is None:
                rest = [n for n in lowering.labels if n in quantized and n not in keep]
                if not rest:
                    out.stopped = f"every one of the {count(len(quantized), 'lowered node')} is kept and it still fails"
                    break
                # no single node shows added error (the failure is spread, or at the outputs alone): the rest
                # in topological order, so the search ends on a keep-list that passes if any does
                nxt = rest[0]
            keep.append(nxt)
            ev = run(keep)
        if not ev.passed and not out.stopped:
            out.stopped = (
                f"the budget of {count(max_evaluations, 'evaluation')} ran out (stages.repair.max_evaluations)"
            )
        if ev.passed:
            for node in reversed(list(keep)):
                if len(steps) >= max_evaluations:
                    break
                trial = [n for n in keep if n != node]
                if run(trial).passed:
                    keep = trial


def _rank(ev: Evaluation) -> tuple[int, int, float, int]:
    """Passing first, then the fewest failures, then (where nothing passes) the closest to the target, then the
    fewest kept nodes. Without the third, every evaluation failing the same checks tied and the empty keep-list
    won: the search reported its starting point as its best (PP-OCRv4's recognizer: 0.043 reported where an
    evaluation had reached 0.013)."""
    return (0 if ev.passed else 1, len(ev.failed), 0.0 if ev.passed else _distance(ev), len(ev.keep))


def _distance(ev: Evaluation) -> float:
    """How far the checked tensors are from passing: the largest error among them (rel_l2, else 1 - cosine);
    non-finite or unmeasured counts as infinitely far."""
    worst = 0.0
    for values in ev.checked.values():
        for metric, v in values.items():
            d = v if metric != "cosine" else 1.0 - v
            worst = max(worst, d if d == d else math.inf)
    return worst


def _narrow(model: Any) -> bool:
    """Does the model hold FP16/BF16 values (constants or tensors)?"""
    from trtverify.convert.islands import NARROW

    return any(t in NARROW for t in elem_types(model).values())
