"""The range report of a quantized candidate: per quantized activation, the range its calibration gave (its
QuantizeLinear's scale) against the reference's values of that tensor on the samples compared: the fraction of
values beyond the range (clipped), and the quantization step against the median nonzero |x| (a step as large as the
typical value leaves it a few levels). The "dynamic range mismatch" a user hunts in TensorRT's calibration warnings,
read from the candidate itself; and the same of a TensorRT calibration cache's ranges (cache_report).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from trtverify.graph.onnxgraph import GraphIndex
from trtverify.lint.weights import q_limit
from trtverify.stages.layerwise.models import CacheRanges, RangeRow
from trtverify.stages.layerwise.reference import ReferencePass
from trtverify.toolout.calibcache import CalibrationCache
from trtverify.util.tensorstore import TensorStore


class Values(Protocol):
    """The reference's values per sample: the layerwise stage's reference pass, or repair's (repair/evaluate.py)."""

    store: TensorStore


def report(
    ref: Values, cand: GraphIndex, pairs: Sequence[tuple[str, str]], samples: Sequence[dict[str, np.ndarray]]
) -> list[RangeRow]:
    """One row per QuantizeLinear of an activation whose input pairs with a reference tensor or is a model input
    (its values: the feeds `samples`), the worst first (most clipped, then coarsest step); the ranking input of
    repair's search too (repair/search.py)."""
    to_ref = {c: r for r, c in pairs}
    feeds = samples[0] if samples else {}
    rows = []
    for idx, node in enumerate(cand.nodes):
        if node.op_type != "QuantizeLinear" or not node.input or node.input[0] in cand.constants:
            continue
        r = to_ref.get(node.input[0], node.input[0] if node.input[0] in feeds else None)
        limit = q_limit(cand, node)
        if r is None or limit is None or not limit > 0:
            continue
        scale_t = cand.constants.get(node.input[1]) if len(node.input) > 1 else None
        scale = cand.values_of(scale_t) if scale_t is not None else None
        if scale is None:
            continue
        step = float(np.abs(np.asarray(scale, dtype=np.float64)).max())
        values = (lambda si, r=r: samples[si][r]) if r in feeds else (lambda si, r=r: ref.store.get(si, r))
        row = judge(values, len(samples), limit, step)
        if row is not None:
            rows.append(row.model_copy(update={"tensor": r, "quantize_node": cand.label(idx)}))
    rows.sort(key=worst_first)
    return rows


def worst_first(row: RangeRow) -> tuple[float, float]:
    """Most clipped first, then the coarsest step."""
    return (-row.clipped_fraction, -(row.step_over_median or 0.0))


def judge(values: Callable[[int], np.ndarray], samples: int, limit: float, step: float) -> RangeRow | None:
    """The range ±`limit` (quantization step `step`) against a tensor's values on samples 0..samples-1 (`values(si)`;
    KeyError: not computed for that sample); None where no sample has a finite value. `tensor` is left empty."""
    clipped = total = 0
    top = 0.0
    medians = []
    seen = 0
    for si in range(samples):
        try:
            v = np.abs(np.asarray(values(si), dtype=np.float64))
        except KeyError:
            continue
        v = v[np.isfinite(v)]
        if not v.size:
            continue
        seen += 1
        clipped += int(np.count_nonzero(v > limit * (1 + 1e-6)))
        total += v.size
        top = max(top, float(v.max()))
        nonzero = v[v > 0]  # zeros are exact in INT8 at any step: a ReLU's half of zeros says nothing of its step
        if nonzero.size:
            medians.append(float(np.median(nonzero)))
    if not total:
        return None
    median = float(np.median(medians)) if medians else 0.0
    return RangeRow(
        tensor="",
        limit=limit,
        step=step,
        reference_max_abs=top,
        clipped_fraction=clipped / total,
        step_over_median=step / median if median > 0 else None,
        samples=seen,
    )


def cache_report(
    ref: ReferencePass, cache: CalibrationCache, samples: Sequence[dict[str, np.ndarray]], examples: int = 5
) -> CacheRanges:
    """A TensorRT calibration cache's ranges (scale * 127) against the reference's values of the tensors it names
    (the ONNX tensor names TensorRT keeps; the model's inputs included), the worst first; the names that are no
    reference tensor are counted, the first `examples` of them listed."""
    known = set(ref.order)
    rows, unmatched = [], []
    for name, entry in cache.entries.items():
        if name in known:
            row = judge(lambda si, n=name: ref.store.get(si, n), len(samples), entry.limit, entry.scale)
        elif name in samples[0]:  # a model input: its values are the feeds
            row = judge(lambda si, n=name: samples[si][n], len(samples), entry.limit, entry.scale)
        else:
            unmatched.append(name)
            continue
        if row is not None:
            rows.append(row.model_copy(update={"tensor": name, "cache_line": entry.line}))
    rows.sort(key=worst_first)
    return CacheRanges(
        path=str(cache.path),
        header=cache.header,
        calibrator=cache.calibrator,
        tensorrt_version=cache.version,
        entries=len(cache.entries),
        matched=len(rows),
        unmatched=len(unmatched),
        unmatched_examples=unmatched[:examples],
        rows=rows,
    )
