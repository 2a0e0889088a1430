"""One evaluation of a repair candidate: every value tensor of the candidate against the reference's, which are
computed once and reused by every evaluation of a search."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends.onnxruntime import OnnxRuntimeBackend
from trtverify.compare.checks import Worst, nonfinite_words
from trtverify.compare.metrics import CompareError, compare
from trtverify.compare.pairing import pair_names
from trtverify.compare.semantic import resolve
from trtverify.config.backends import Backends, OnnxRuntimeOptions
from trtverify.config.checks import Check
from trtverify.graph.lightmodel import GraphBytes
from trtverify.graph.onnxgraph import GraphIndex
from trtverify.stages.layerwise.reference import as_written, update_max_abs
from trtverify.util.errors import UsageError
from trtverify.util.tensorstore import TensorStore

AS_WRITTEN = as_written(Backends()).onnxruntime  # graphs run as written, as in the layerwise stage


# reference intermediates kept in memory up to half of this (the layerwise stage's default budget); beyond, on disk
MEMORY_BUDGET = 2048 << 20


@dataclass
class Reference:
    """The reference's value tensors for every sample (in memory, or on disk when they do not fit half the
    budget), and its graph. Computed once per search, one sample at a time."""

    graph: GraphIndex
    order: list[str]
    outputs: list[str]
    store: TensorStore
    max_abs: dict[str, float]
    samples: int = 0
    options: OnnxRuntimeOptions = AS_WRITTEN  # how the reference and every candidate run (the suite's plugins too)

    @classmethod
    def run(
        cls,
        path: Path,
        samples: Sequence[dict[str, np.ndarray]],
        workdir: Path | None = None,
        budget: int = MEMORY_BUDGET,
        search_rows: int | None = None,
        options: OnnxRuntimeOptions | None = None,
    ) -> Reference:
        """`search_rows`: the activation ranges (`max_abs`) come from the first rows only (the search's; the rest
        are held out for the verification)."""
        max_abs: dict[str, float] = {}
        store: TensorStore | None = None
        ort = AS_WRITTEN if options is None else as_written(Backends(onnxruntime=options)).onnxruntime
        with OnnxRuntimeBackend(path, ort) as backend:
            info = backend.graph().info
            skip = backend.uncomputed()  # after a plugin without a reference: nothing to compare
            blind = [o for o in info.outputs if o in skip]
            if blind:  # the search is judged on the outputs: one nothing computes would pass every keep-list
                raise UsageError(
                    f"{path.name}: nothing computes the output(s) {', '.join(blind)} ({skip[blind[0]]}): give the "
                    "plugin a reference (--plugin OP=module:callable, the suite's plugins:, or "
                    "backends.onnxruntime.custom_op_libraries; docs/plugins.md)"
                )
            order = [t for t in info.value_tensors() if t not in skip]
            backend.expose(order)
            for si, feed in enumerate(samples):
                out = backend.infer(feed)
                if store is None:
                    total = sum(a.nbytes for a in out.values()) * len(samples)
                    on_disk = workdir is not None and total > budget // 2
                    store = TensorStore(workdir / "reference" if on_disk and workdir is not None else None)
                for name, arr in out.items():
                    store.put(si, name, arr)
                    if search_rows is None or si < search_rows:
                        update_max_abs(max_abs, name, arr)
                del out
        return cls(info, order, list(info.outputs), store or TensorStore(), max_abs, len(samples), ort)


@dataclass
class Evaluation:
    """A candidate against the target: what fails, and each tensor's worst error."""

    keep: tuple[str, ...]
    passed: bool
    checked: dict[str, dict[str, float]]  # tensor -> worst value of each checked metric
    failed: list[str]  # 'y: rel_l2 <= 0.01 (0.31)', 'Pow_output_0: 32 non-finite values'
    nonfinite: list[str]  # reference tensors non-finite in the candidate where finite in the reference, in order
    errors: dict[str, float] = field(default_factory=dict)  # reference tensor -> worst rel_l2
    overflows: dict[str, list[str]] = field(default_factory=dict)  # FP16 cast that overflows -> nodes reading it
    seconds: float = 0.0


def evaluate(
    ref: Reference,
    candidate: Path | GraphBytes,
    samples: Sequence[dict[str, np.ndarray]],
    checks: Sequence[Check],
    tensors: str,
    keep: tuple[str, ...],
    first: int = 0,
) -> Evaluation:
    """Run `candidate` (a file, or a graph in memory) with every value tensor exposed, one sample at a time, each
    compared and let go before the next; `checks` on the outputs (`tensors='outputs'`) or on every tensor ('all');
    any tensor non-finite where the reference is finite fails as well. Sample i is the reference's row first + i."""
    t0 = time.perf_counter()
    overflows: dict[str, list[str]] = {}
    worst: dict[str, Worst] = {}  # a zero-reference sample judged against the tensor's typical magnitude
    bad: dict[str, tuple[int, int, int]] = {}  # non-finite mismatches: (all, in the reference only, candidate only)
    with OnnxRuntimeBackend(candidate, ref.options) as backend:
        cand: Any = backend.graph().info
        names = backend.intermediates()
        resolved = resolve(pair_names(ref.order, names), ref.graph, cand)
        pairs = resolved.pairing.pairs
        casts = _narrowing_casts(cand)
        backend.expose([c for _, c in pairs] + [t for pair in casts.items() for t in pair])
        for si, feed in enumerate(samples, start=first):
            out = backend.infer(feed)
            for cast, source in casts.items():
                if cast in out and source in out and _overflowed(out[source], out[cast]):
                    overflows[cast] = [cand.label(i) for i, _ in cand.consumers.get(cast, [])]
            for r, c in pairs:
                if c not in out or (si, r) not in ref.store:
                    continue
                try:
                    cmp = compare(ref.store.get(si, r), out[c])
                except CompareError:
                    continue
                if cmp.nonfinite_mismatch:
                    n, r_only, c_only = bad.get(r, (0, 0, 0))
                    bad[r] = (
                        n + cmp.nonfinite_mismatch,
                        r_only + cmp.ref_only_nonfinite,
                        c_only + cmp.cand_only_nonfinite,
                    )
                worst.setdefault(r, Worst()).add(cmp)
            del out
    worst_of = {r: {k: v for k, v in w.result().items() if v == v} for r, w in worst.items()}
    checked_names = ref.outputs if tensors == "outputs" else [r for r, _ in pairs]
    failed, checked = [], {}
    for t in checked_names:
        m = worst_of.get(t, {})
        checked[t] = {c.metric: m.get(c.metric, math.nan) for c in checks}
        for c in checks:
            v = m.get(c.metric, math.nan)
            if not c.passes(v):
                failed.append(f"{t}: {c.condition} ({v:.4g})")
    nonfinite = [r for r in ref.order if r in bad]
    failed += [f"{t}: {nonfinite_words(*bad[t])}" for t in nonfinite]
    failed += [f"{t}: the cast to FP16 overflows (read by {', '.join(users)})" for t, users in overflows.items()]
    errors = {r: m["rel_l2"] for r, m in worst_of.items() if "rel_l2" in m}
    seconds = time.perf_counter() - t0
    return Evaluation(keep, not failed, checked, failed, nonfinite, errors, overflows, seconds)


def _narrowing_casts(g: GraphIndex) -> dict[str, str]:
    """Casts to FP16 in the candidate: output -> input. ONNX Runtime's CPU provider can drop such a cast
    together with one of its own back to FP32 (it lacks FP16 kernels), so an overflow there would go unseen
    downstream on the CPU while a GPU engine computes with inf: it is checked where it happens."""
    out = {}
    for n in g.nodes:
        if n.op_type != "Cast" or not n.output or not n.input:
            continue
        to = next((a.i for a in n.attribute if a.name == "to"), None)
        if to == 10:  # FLOAT16 (BF16 has FP32's range: a cast to it cannot overflow)
            out[n.output[0]] = n.input[0]
    return out


def _overflowed(source: np.ndarray, cast: np.ndarray) -> bool:
    if cast.dtype.kind != "f" or np.isfinite(cast).all():
        return False
    return bool(np.any(np.isfinite(source) & ~np.isfinite(cast)))
