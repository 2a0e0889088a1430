"""Rows of the tensors a capture holds only the statistics of (trtexec's `tensor_summary.json`: min, max, avg and
10 elements per tensor; trtverify.toolout.debugtensors): compared AS STATISTICS against the same statistics of the
reference's tensor, computed the way trtexec computes them. Such a row says so (`compared_by`), and its metrics are
the statistics' differences, never rel_l2 or cosine: statistics cannot tell how far apart two tensors are.

Metric `stats_diff`: the largest of |Δmin|, |Δmax|, |Δavg| and |Δ| of the elements written, over the reference's
largest magnitude (max(|min|, |max|); the differences themselves where that is 0). Limit: the tensor's rel_l2 limit
(its checks', else the precision's default). For avg it is a bound: |Δavg| <= rms(Δ) <= rel_l2 · rms(ref) <=
rel_l2 · max|ref|, so a tensor within its rel_l2 limit always passes on avg; for min, max and single elements there
is no such bound (one element may differ more than the norm allows), so the limit is the same number by choice.
A statistic non-finite on one side only is a difference of +inf.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from trtverify.backends.base import Backend
from trtverify.compare.checks import CheckResult, limit_check
from trtverify.config.checks import Check
from trtverify.config.stages import PRECISION_CHECKS
from trtverify.stages.layerwise.models import Coverage, Row
from trtverify.stages.layerwise.reference import NAME, ReferencePass
from trtverify.toolout.debugtensors import TensorStats, stats_of
from trtverify.util.words import count

COMPARED_BY = "statistics (min, max, avg, 10 elements: trtexec's tensor_summary.json): not element by element"
# TensorRT's type names in the summary -> numpy's
TYPE_NAMES = {"FLOAT": "float32", "HALF": "float16", "BF16": "bfloat16", "FP8": "float8e4m3", "INT8": "int8",
              "UINT8": "uint8", "INT32": "int32", "INT64": "int64", "BOOL": "bool", "INT4": "int4",
              "FP4": "fp4"}  # fmt: skip


def _diff(a: float, b: float) -> float:
    if math.isnan(a) and math.isnan(b) or (math.isinf(a) and a == b):
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b)


def differences(ref: np.ndarray, cap: TensorStats) -> dict[str, float]:
    """Each statistic's difference over the reference's largest magnitude, and their largest (`stats_diff`)."""
    lo, hi, avg, first, last = stats_of(ref)
    scale = max((abs(v) for v in (lo, hi) if math.isfinite(v)), default=0.0) or 1.0
    out = {"stats_min": _diff(lo, cap.min) / scale, "stats_max": _diff(hi, cap.max) / scale,
           "stats_avg": _diff(avg, cap.avg) / scale}  # fmt: skip
    pairs = list(zip(first, cap.first)) + list(zip(last, cap.last))
    if pairs:
        # trtexec writes elements with 6 significant digits: a relative 5e-6 of them is rounding, not a difference
        out["stats_elements"] = max(max(0.0, _diff(a, b) - 5e-6 * abs(a)) for a, b in pairs) / scale
    out["stats_diff"] = max(out.values())
    return out


def limit(checks: Sequence[Check], precision: str) -> float:
    """The tensor's rel_l2 limit: its checks', else the precision's default."""
    mine = [c.threshold for c in checks if c.metric == "rel_l2" and c.max is not None]
    if mine:
        return float(min(mine))
    loosest = max(precision.split("+"), key=lambda p: PRECISION_CHECKS[p][0][0] if p in PRECISION_CHECKS else 0.0)
    return float(PRECISION_CHECKS.get(loosest, PRECISION_CHECKS["fp32"])[0][0])


def merged(
    rows: list[Row],
    checks: list[CheckResult],
    name: str,
    ref: ReferencePass,
    backend: Backend,
    samples: Sequence[dict[str, np.ndarray]],
    checks_for: Callable[[str], Sequence[Check]],
    precision: str,
) -> tuple[list[Row], list[CheckResult], dict[str, str]]:
    """`rows` and `checks` with a row per statistics-only tensor and a check over them; the tensors compared so
    ({tensor: how}), to take out of the unmatched list."""
    get = getattr(backend, "statistics", None)
    seen: dict[str, list[tuple[int, TensorStats]]] = {}
    for si, feed in enumerate(samples if get is not None else ()):
        for t, st in get(feed).items():  # type: ignore[misc]
            seen.setdefault(t, []).append((si, st))
    if not seen:
        return rows, checks, {}
    stored, have = set(ref.order), {r.tensor for r in rows}
    new: list[Row] = []
    worst: tuple[float, str | None, int | None] = (0.0, None, None)
    failed: list[str] = []
    not_ref = [t for t in seen if t not in stored or t in have]
    for t, got in seen.items():
        if t in not_ref:
            continue
        thr = limit(checks_for(t), precision)
        metrics: dict[str, float] = {}
        errors: list[str] = []
        for si, st in got:
            arr = ref.store.get(si, t)
            if tuple(arr.shape) != st.shape:
                errors.append(f"sample {si}: shape {list(st.shape)} captured, {list(arr.shape)} in the reference")
                continue
            for k, v in differences(arr, st).items():
                metrics[k] = max(metrics.get(k, 0.0), v)
                if k == "stats_diff" and (v > worst[0] or worst[1] is None):
                    worst = (v, t, si)
        bad = bool(errors) or not metrics.get("stats_diff", math.inf) <= thr
        if bad:
            failed.append(t)
        p = ref.graph.producers.get(t)
        new.append(Row(
            tensor=t, node=p.node if p else None, op_type=p.op_type if p else None, topo_index=p.index if p else -1,
            shape=list(got[0][1].shape), dtype=ref.dtype.get(t), candidate_dtype=TYPE_NAMES.get(got[0][1].type),
            samples=len(got), metrics=metrics, compared_by=COMPARED_BY, errors=errors or None, passed=not bad,
            failed=[f"stats_diff <= {thr:g}"] if bad else None,
        ))  # fmt: skip
    rows = sorted(rows + new, key=lambda row: row.topo_index)
    compared = [r.tensor for r in new]
    checks = [_counting(ch, compared, ref) for ch in checks]
    why = "each tensor's rel_l2 limit, on the statistics' differences over the reference's largest magnitude"
    detail: dict[str, Any] = {"tensors": len(new), "tensors_failed": len(failed), "limit": why}
    if failed:
        detail["first_failed"] = min(failed, key=lambda t: next(r.topo_index for r in new if r.tensor == t))
    if not_ref:
        detail["not_compared"] = f"{count(len(not_ref), 'tensor')} not the reference's: {', '.join(not_ref[:5])}"
    checks.append(limit_check(
        f"{name}: statistics within each tensor's rel_l2 limit ({count(len(new), 'tensor')} compared by statistics "
        "only)", NAME, "stats_diff", float(len(failed)), 0, "<=", candidate=name, tensor=worst[1],
        worst_sample=worst[2], detail=detail,
    ))  # fmt: skip
    return rows, checks, {t: COMPARED_BY for t in compared}


def covered(coverage: Coverage, compared: dict[str, str]) -> Coverage:
    """The coverage record with the tensors compared by statistics counted as paired (by: 'statistics')."""
    if not compared:
        return coverage
    paired = coverage.paired + len(compared)
    return coverage.model_copy(update={"paired": paired, "passed": paired >= coverage.required,
                                       "by": {**coverage.by, "statistics": len(compared)}})  # fmt: skip


def _counting(ch: CheckResult, compared: list[str], ref: ReferencePass) -> CheckResult:
    """The counting checks (tensors compared, tensors paired, graph outputs compared) with the tensors compared by
    statistics counted."""
    if ch.metric in ("pairs", "paired") and compared:
        value = (ch.value or 0.0) + len(compared)
        return ch.model_copy(update={"value": value, "passed": value >= (ch.threshold or 0.0), "detail": {
            **(ch.detail or {}), "by_statistics": len(compared)}})  # fmt: skip
    outs = [t for t in compared if t in ref.graph.outputs]
    if ch.metric == "outputs_compared" and outs:
        detail = dict(ch.detail or {})
        done = list(detail.get("compared", [])) + outs  # type: ignore[call-overload]
        detail.update(compared=done, not_compared=[o for o in detail.get("not_compared", []) if o not in outs],  # type: ignore[attr-defined]
                      by_statistics=outs)  # fmt: skip
        passed = ch.passed or detail.get("reason") == "no graph output was compared"  # else an output uncomputed
        if passed:
            detail.pop("reason", None)
        return ch.model_copy(update={"value": float(len(done)), "passed": passed, "detail": detail})
    return ch


__all__ = ["COMPARED_BY", "covered", "differences", "limit", "merged"]
