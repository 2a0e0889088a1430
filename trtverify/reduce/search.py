"""The smallest cut that still fails: from the root cause's node to the first divergence, grown towards the inputs
only while the cut, fed the reference's captured values, no longer fails the candidate's checks.

Each trial runs the cut reference (FP32) and the candidate's matching cut on the reference's values at the cut's
inputs, sample by sample, and judges the cut's output with the checks the layerwise run judged that tensor by.
The cuts grow by levels (level k: the producers of level k-1's fed tensors added), tried at levels 0, 1, 2, 4, ...
until one fails, then bisected between the last that passed and the first that failed: a few trials whatever the
depth.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends.onnxruntime import OnnxRuntimeBackend
from trtverify.compare.checks import extras_for
from trtverify.compare.metrics import CompareError, compare
from trtverify.config.backends import OnnxRuntimeOptions
from trtverify.config.checks import Check
from trtverify.graph.lightmodel import LightModel
from trtverify.graph.onnxgraph import elem_types
from trtverify.reduce.cut import ADAPTER, Cut, Matched, Port, between, close, cut_model, match, size
from trtverify.stages.layerwise.models import LayerwiseCandidate
from trtverify.util.errors import UsageError
from trtverify.util.words import count

MAX_FRACTION = 0.5  # a failing cut fed only graph inputs and holding more of the model than this: accumulation


class Refused(Exception):
    """No cut smaller than the model shows the divergence; `code` is the exit code (1)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


@dataclass
class Trial:
    level: int
    cut: Cut
    matched: Matched | None
    why_not: str | None = None  # why the candidate has no matching cut
    metrics: list[dict[str, float]] = field(default_factory=list)  # per sample
    failed: list[list[str]] = field(default_factory=list)  # per sample: the checks it fails
    ref_drift: float = 0.0  # the cut reference's output against the whole reference's, largest |difference|
    ran: Any = None  # what _outputs gave (the feeds, both cuts' outputs, the models): the bundle writes it

    @property
    def fails(self) -> bool:
        return any(self.failed)

    def worst(self) -> int:
        """The failing sample with the largest rel_l2 (non-finite first)."""
        bad = [i for i, f in enumerate(self.failed) if f]
        return max(bad, key=lambda i: _severity(self.metrics[i]))


def _severity(m: dict[str, float]) -> float:
    if m.get("nonfinite_mismatch"):
        return math.inf
    v = m.get("rel_l2", 0.0)
    return v if v == v else math.inf


@dataclass
class Reduction:
    """The cut that fails, and everything the bundle writes."""

    reference: LightModel
    candidate: LightModel
    trial: Trial
    trials: list[Trial]
    sample: int  # the sample the bundle holds (the worst)
    feed: dict[str, np.ndarray]  # the cut's inputs on that sample (the reference's values)
    ref_out: np.ndarray  # the cut reference's output on it
    cand_out: np.ndarray  # the candidate cut's
    ref_model: Any  # weightless ModelProtos
    cand_model: Any
    checks: list[Check]
    reference_nodes: int  # nodes of the whole models
    candidate_nodes: int
    adapters: int  # Cast/Identity nodes the candidate cut adds at its inputs and output
    full_metrics: dict[str, float]  # the target's row in the layerwise results (whole model)
    root_cause: str | None
    root_node: str | None
    root_op: str | None
    precision: str


class Captured:
    """The reference's values of chosen tensors on every sample, from runs of the whole reference that expose only
    the tensors not captured yet."""

    def __init__(self, path: Path, options: OnnxRuntimeOptions, samples: Sequence[dict[str, np.ndarray]]):
        self.path, self.options, self.samples = path, options, samples
        self.values: dict[str, list[np.ndarray]] = {}

    def get(self, names: Sequence[str]) -> list[dict[str, np.ndarray]]:
        missing = [n for n in names if n not in self.values and n not in self.samples[0]]
        if missing:
            with OnnxRuntimeBackend(self.path, self.options) as backend:
                backend.expose(missing)
                runs = [backend.infer(feed) for feed in self.samples]
            for n in missing:
                self.values[n] = [np.asarray(r[n]) for r in runs]
        return [
            {n: (feed[n] if n in feed else self.values[n][i]) for n in names} for i, feed in enumerate(self.samples)
        ]


def pairs_of(record: LayerwiseCandidate) -> dict[str, str]:
    """Reference tensor -> the candidate tensor holding its value, from the layerwise rows (rewritten ones left out)."""
    return {r.tensor: r.candidate_tensor or r.tensor for r in record.rows if r.not_comparable is None}


def starting_cut(ref: LightModel, record: LayerwiseCandidate, values: set[str]) -> Cut:
    """From the root cause's node to the first divergence (the first divergence's node alone where the root cause is
    not upstream of it)."""
    first = record.first_divergence
    if first is None:
        raise UsageError(f"candidate '{record.name}': no divergence in these results, nothing to reduce")
    info = ref.info
    if first.tensor not in info.producers:
        raise UsageError(f"candidate '{record.name}': its first divergence '{first.tensor}' is no tensor of "
                         f"{ref.source.name}: were the results made with another reference?")  # fmt: skip
    root = record.root_causes[0].tensor if record.root_causes else first.tensor
    return close(info, between(info, root, first.tensor), values, first.tensor)


def reduce(
    reference: Path,
    candidate: Path,
    record: LayerwiseCandidate,
    samples: Sequence[dict[str, np.ndarray]],
    checks_for: Callable[[str], Sequence[Check]],
    options: OnnxRuntimeOptions,
    max_fraction: float = MAX_FRACTION,
    progress: Callable[[str], None] | None = None,
) -> Reduction:
    """The smallest failing cut of `candidate` against `reference`, from the layerwise `record` of that candidate."""
    ref, cand = LightModel(reference), LightModel(candidate)
    values = set(ref.info.value_tensors())
    pairs = pairs_of(record)
    first = starting_cut(ref, record, values)
    captured = Captured(reference, options, samples)
    ref_types, cand_types = elem_types(ref.model, ref.inferred), elem_types(cand.model, cand.inferred)
    levels = _Levels(ref, first, values)
    tried: dict[int, Trial] = {}

    def trial(k: int) -> Trial:
        if k not in tried:
            cut = levels.at(k)
            made = {o for i in cut.nodes for o in ref.info.nodes[i].output if o}
            outside = values - made - set(cut.inputs)
            matched = match(cand.info, cut, pairs, outside)
            t = Trial(k, cut, matched if isinstance(matched, Matched) else None)
            if isinstance(matched, str):
                t.why_not = matched
            else:
                # the levels the search may try next (up to 2k + 1) are captured in the same run of the reference
                ahead = {n for j in range(k, levels.end(2 * k + 1) + 1) for n in levels.at(j).inputs}
                captured.get(sorted(ahead | set(cut.inputs) | {cut.target}))
                _run(t, ref, cand, captured, checks_for(matched.target), options, ref_types, cand_types)
            if progress is not None:
                verdict = t.why_not or ("fails" if t.fails else "passes")
                nodes = count(size(ref.info, cut.nodes), "node")
                progress(f"level {k}: {nodes}, {count(len(cut.inputs), 'input')} fed: {verdict}")
            tried[k] = t
        return tried[k]

    found = _search(trial, levels)
    total = len(ref.info.nodes)
    if found is None:
        last = tried[max(tried)]
        why = f"; {last.why_not}" if last.why_not else ""
        nodes = count(size(ref.info, last.cut.nodes), "node")
        raise Refused(
            f"'{first.target}' does not fail the checks when cut out and fed the reference's values, even with its "
            f"whole upstream graph ({nodes} from the graph inputs){why}: the layerwise run's divergence does not "
            "reproduce on these samples"
        )
    t = tried[found]
    only_inputs = all(i in ref.info.inputs for i in t.cut.inputs)
    held = size(ref.info, t.cut.nodes)
    if only_inputs and held > max_fraction * total:
        smaller = "every smaller cut fed the reference's values passes" if found else "from the root cause on"
        raise Refused(
            f"'{first.target}' fails only when the graph runs from its inputs ({held} of {total} nodes; {smaller}): "
            "the error accumulates over the graph, and no subgraph shows it; report the whole model with the "
            "layerwise results instead"
        )
    return _reduction(t, list(tried.values()), ref, cand, checks_for, record)


class _Levels:
    """The cuts by level, grown on demand; `last` once a level feeds only graph inputs."""

    def __init__(self, ref: LightModel, first: Cut, values: set[str]):
        self.info, self.values = ref.info, values
        self.cuts = [first]
        self.last: int | None = None

    def at(self, k: int) -> Cut:
        while len(self.cuts) <= k and self.last is None:
            cut = self.cuts[-1]
            grow = {self.info.producers[t].index for t in cut.inputs if t in self.info.producers}
            if not grow:
                self.last = len(self.cuts) - 1
                break
            self.cuts.append(close(self.info, set(cut.nodes) | grow, self.values, cut.target))
        if self.last is None and not any(t in self.info.producers for t in self.cuts[-1].inputs):
            self.last = len(self.cuts) - 1
        return self.cuts[min(k, len(self.cuts) - 1)]

    def end(self, k: int) -> int:
        """`k`, or the last level where there are fewer."""
        self.at(k)
        return k if self.last is None else min(k, self.last)


def _search(trial: Callable[[int], Trial], levels: _Levels) -> int | None:
    """The lowest failing level: 0, 1, 2, 4, ... until one fails, then bisected."""
    passed, k = -1, 0
    while not trial(k).fails:
        passed = k
        nxt = levels.end(max(1, 2 * k))
        if nxt == k:
            return None
        k = nxt
    while k - passed > 1:
        mid = (passed + k) // 2
        if trial(mid).fails:
            k = mid
        else:
            passed = mid
    return k


def _ports(
    cut: Cut, m: Matched, feeds: dict[str, np.ndarray], ref_types: dict[str, int], cand_types: dict[str, int]
) -> tuple[dict[str, Port], dict[str, Port], tuple[str, Port], tuple[str, Port]]:
    import onnx

    def elem(arr: np.ndarray) -> int:
        return onnx.helper.np_dtype_to_tensor_dtype(arr.dtype)

    ref_in: dict[str, Port] = {}
    cand_in: dict[str, Port] = {}
    for r in cut.inputs:
        value = feeds[r]
        fed = elem(value)
        ref_in[r] = (r, fed, list(value.shape), fed)
        c = m.inputs[r]
        cand_in[r] = (c, cand_types.get(c, fed), list(value.shape), fed)
    out = feeds[cut.target]
    out_type = elem(out)
    ref_out = (cut.target, (cut.target, ref_types.get(cut.target, out_type), list(out.shape), out_type))
    cand_out = (cut.target, (m.target, cand_types.get(m.target, out_type), list(out.shape), out_type))
    return ref_in, cand_in, ref_out, cand_out


def _models(
    t: Trial, ref: LightModel, cand: LightModel, first: dict[str, np.ndarray], ref_types: dict[str, int],
    cand_types: dict[str, int]
) -> tuple[Any, Any]:  # fmt: skip
    assert t.matched is not None
    ref_in, cand_in, ref_out, cand_out = _ports(t.cut, t.matched, first, ref_types, cand_types)
    return (cut_model(ref, t.cut.nodes, ref_in, ref_out, "trtverify_reduce_reference"),
            cut_model(cand, t.matched.nodes, cand_in, cand_out, "trtverify_reduce_candidate"))  # fmt: skip


def _outputs(
    t: Trial, ref: LightModel, cand: LightModel, captured: Captured, options: OnnxRuntimeOptions,
    ref_types: dict[str, int], cand_types: dict[str, int]
) -> tuple[list[dict[str, np.ndarray]], list[np.ndarray], list[np.ndarray], tuple[Any, Any]]:  # fmt: skip
    names = [*t.cut.inputs, t.cut.target]
    feeds = captured.get(names)
    models = _models(t, ref, cand, feeds[0], ref_types, cand_types)
    inputs = [{n: f[n] for n in t.cut.inputs} for f in feeds]
    outs = []
    for model, light in zip(models, (ref, cand)):
        with OnnxRuntimeBackend(light.runnable(model), options) as backend:
            outs.append([np.asarray(backend.infer(feed)[t.cut.target]) for feed in inputs])
    return feeds, outs[0], outs[1], models


def _run(
    t: Trial, ref: LightModel, cand: LightModel, captured: Captured, checks: Sequence[Check],
    options: OnnxRuntimeOptions, ref_types: dict[str, int], cand_types: dict[str, int]
) -> None:  # fmt: skip
    t.ran = _outputs(t, ref, cand, captured, options, ref_types, cand_types)
    feeds, ref_outs, cand_outs, _ = t.ran
    extra = extras_for(checks)
    for feed, a, b in zip(feeds, ref_outs, cand_outs):
        t.ref_drift = max(t.ref_drift, float(np.max(np.abs(a.astype(np.float64) - feed[t.cut.target]))) if a.size
                          and a.dtype.kind == "f" else 0.0)  # fmt: skip
        try:
            c = compare(a, b, extra)
        except CompareError as exc:
            t.metrics.append({})
            t.failed.append([str(exc)])
            continue
        m = dict(c.metrics)
        if c.nonfinite_mismatch:
            m["nonfinite_mismatch"] = float(c.nonfinite_mismatch)
        t.metrics.append(m)
        bad = [f"{ch.key} {ch.op} {ch.threshold:g}" for ch in checks if ch.key in m and not ch.passes(m[ch.key])]
        if c.nonfinite_mismatch:
            bad.append(f"{count(c.nonfinite_mismatch, 'value')} non-finite on one side only")
        t.failed.append(bad)


def _reduction(
    t: Trial, trials: list[Trial], ref: LightModel, cand: LightModel,
    checks_for: Callable[[str], Sequence[Check]], record: LayerwiseCandidate
) -> Reduction:  # fmt: skip
    assert t.matched is not None
    feeds, ref_outs, cand_outs, (ref_model, cand_model) = t.ran
    worst = t.worst()
    row = next((r for r in record.rows if r.tensor == t.cut.target), None)
    rc = record.root_causes[0] if record.root_causes else None
    return Reduction(
        reference=ref,
        candidate=cand,
        trial=t,
        trials=sorted(trials, key=lambda x: x.level),
        sample=worst,
        feed={n: feeds[worst][n] for n in t.cut.inputs},
        ref_out=ref_outs[worst],
        cand_out=cand_outs[worst],
        ref_model=ref_model,
        cand_model=cand_model,
        checks=list(checks_for(t.matched.target)),
        reference_nodes=len(ref.info.nodes),
        candidate_nodes=len(cand.info.nodes),
        adapters=sum(1 for n in cand_model.graph.node if n.name.startswith(ADAPTER)),
        full_metrics=dict(row.metrics) if row is not None else {},
        root_cause=rc.tensor if rc else None,
        root_node=rc.node if rc else None,
        root_op=rc.op_type if rc else None,
        precision=record.precision,
    )
