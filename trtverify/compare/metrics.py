"""Tensor comparison metrics, vectorised numpy with float64 accumulation.

Conventions (reference `a`, candidate `b`):
- metrics are computed over positions where both tensors are finite;
- NaN/Inf are counted separately for each side, and `nonfinite_mismatch` counts positions
  where the two sides disagree about being finite (or hold different non-finite values);
  any such position fails the comparison, whatever the thresholds; `ref_only_nonfinite` and
  `cand_only_nonfinite` say which side holds the non-finite value;
- a saturated fill is no mismatch: where the reference is at its type's extreme (±inf, or beyond half
  its largest finite value: a mask's `masked_fill(-inf)` or `finfo.min`) and the candidate is at the
  extreme of any type it may compute in (±inf, or beyond half the float16 maximum: 32752) with the
  same sign, both mean "as large as the type goes" (a Softmax makes both exact zeros). Such positions
  are left out of the metrics and counted in `saturated` when their values differ (-inf against
  -65504); what follows them (the Softmax) is compared as usual and decides;
- 0/0 ratios are 0 (identical), x/0 ratios are +inf (a real difference against nothing);
- across samples of one tensor, a sample whose reference is all zeros has no scale of its own: `judged`
  measures its difference against the tensor's typical magnitude (the reference's mean square over the
  samples where it is not all zeros); only a tensor whose reference is zero on every sample keeps +inf;
- a tensor with no elements cannot be compared: it is reported as an error, never a pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trtverify.config.checks import BASE_METRICS, METRICS, metric_key
from trtverify.util.halfcast import to_float32


class CompareError(ValueError):
    """The two tensors cannot be compared (shape mismatch, no elements, ...)."""


@dataclass(frozen=True)
class Comparison:
    """All metrics of one reference/candidate tensor pair."""

    metrics: dict[str, float]
    numel: int
    ref_nan: int
    ref_inf: int
    cand_nan: int
    cand_inf: int
    nonfinite_mismatch: int
    # float64 sums over the positions compared (finite on both sides): what `judged` rescales a zero reference by
    ref_sq: float = 0.0
    diff_sq: float = 0.0
    compared: int = 0
    # which side holds the non-finite value of a mismatch (the rest: both non-finite, different values)
    ref_only_nonfinite: int = 0
    cand_only_nonfinite: int = 0
    # positions both at their type's extreme with the same sign and different values (-inf against -65504),
    # left out of the metrics; `saturated_values` is the first (reference, candidate) pair
    saturated: int = 0
    saturated_values: tuple[float, float] | None = None

    @property
    def zero_reference(self) -> bool:
        """The reference is all zeros where compared while the candidate is not: no relative error of its own."""
        return self.compared > 0 and self.ref_sq == 0.0 and self.diff_sq > 0.0


def typical_square(per_sample: Sequence[Comparison]) -> tuple[float, int]:
    """(sum of squares, elements) of the reference over the samples where it is not all zeros."""
    live = [c for c in per_sample if c.ref_sq > 0.0 and math.isfinite(c.ref_sq)]
    return sum(c.ref_sq for c in live), sum(c.compared for c in live)


def rejudged(c: Comparison, mean_sq: float) -> dict[str, float]:
    """A zero-reference sample's metrics against a tensor's typical magnitude (`mean_sq`, the reference's mean
    square where it is not zero, > 0): rel_l2 = ||b - a|| / sqrt(mean_sq * its elements), what rel_l2 means on
    the tensor's other samples; sqnr follows; cosine NaN (a zero vector has no direction: it cannot decide the
    tensor's cosine). The absolute metrics are its own."""
    scale = mean_sq * c.compared
    m = dict(c.metrics)
    if math.isfinite(c.diff_sq):  # a difference too large to square stays inf / -inf
        m["rel_l2"] = math.sqrt(c.diff_sq / scale)
        m["sqnr"] = 10.0 * math.log10(scale / c.diff_sq)
    m["cosine"] = math.nan
    return m


def judged(per_sample: Sequence[Comparison]) -> list[dict[str, float]]:
    """Each sample's metrics, a zero-reference sample's `rejudged` against the tensor's typical magnitude (the
    same dict where nothing changed). Where the reference is zero on every sample, nothing rescales it: rel_l2
    stays +inf (a dead tensor that came alive is a real error)."""
    if not any(c.zero_reference for c in per_sample):  # the common case: no sum over the samples
        return [c.metrics for c in per_sample]
    sq, n = typical_square(per_sample)
    if not n:
        return [c.metrics for c in per_sample]
    return [rejudged(c, sq / n) if c.zero_reference else c.metrics for c in per_sample]


def _ratio(num: float, den: float) -> float:
    if den == 0.0:
        return 0.0 if num == 0.0 else math.inf
    return num / den


def _working(x: np.ndarray) -> np.ndarray:
    """Flat array in the type elementwise work happens in: float32 for float16/bfloat16/float32
    (exact: both widen into it), float64 for everything else. Sums are float64 regardless."""
    x = np.asarray(x)
    if x.dtype == np.float16:
        return to_float32(x).ravel()
    if x.dtype == np.float32:
        return x.ravel()
    if x.dtype.kind == "V" or str(x.dtype) == "bfloat16":
        return x.astype(np.float32).ravel()
    return _as_float64(x).ravel()


def _as_float64(x: np.ndarray) -> np.ndarray:
    if x.dtype == np.float64:
        return x
    if x.dtype.kind in "fiub":
        return x.astype(np.float64)
    # bfloat16 and friends arrive as named numpy dtypes from ml_dtypes; go through float32
    return x.astype(np.float32).astype(np.float64)


def topk_agreement(a: np.ndarray, b: np.ndarray, k: int) -> float:
    """Fraction of rows whose top-k index sets (over the last axis) are equal."""
    if a.ndim == 0:
        raise CompareError("topk_agreement needs at least one axis (classes on the last axis)")
    classes = a.shape[-1]
    if not 1 <= k <= classes:
        raise CompareError(f"topk_agreement k={k} but the last axis has {classes} classes")
    ra = a.reshape(-1, classes)
    rb = b.reshape(-1, classes)
    if k == 1:
        return float(np.mean(np.argmax(ra, axis=1) == np.argmax(rb, axis=1)))
    ta = np.sort(np.argpartition(-ra, k - 1, axis=1)[:, :k], axis=1)
    tb = np.sort(np.argpartition(-rb, k - 1, axis=1)[:, :k], axis=1)
    return float(np.mean(np.all(ta == tb, axis=1)))


def _core(a: np.ndarray, b: np.ndarray) -> tuple[dict[str, float], float, float]:
    """Base metrics of two finite flat arrays: elementwise work in their type, sums in float64; with the sums of
    squares of the reference and of the difference."""
    d = b - a
    saa = float(np.add.reduce(a * a, dtype=np.float64))
    sbb = float(np.add.reduce(b * b, dtype=np.float64))
    sdd = float(np.add.reduce(d * d, dtype=np.float64))
    sab = float(np.add.reduce(a * b, dtype=np.float64))
    absd = np.abs(d, out=d)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rel = np.divide(absd, np.abs(a))
    # fmax skips NaN (0/0: identical zeros count as 0) and keeps inf (x/0)
    max_rel = float(np.fmax.reduce(rel))
    mean_abs = float(np.add.reduce(absd, dtype=np.float64)) / absd.size
    return _finish(float(absd.max()), mean_abs, 0.0 if max_rel != max_rel else max_rel, saa, sbb, sdd, sab), saa, sdd


def _finish(
    max_abs: float, mean_abs: float, max_rel: float, saa: float, sbb: float, sdd: float, sab: float
) -> dict[str, float]:
    """The metrics from the elementwise maxima and the float64 sums of squares and products."""
    metrics: dict[str, float] = {"max_abs": max_abs, "mean_abs": mean_abs, "max_rel": max_rel}
    metrics["rel_l2"] = _ratio(math.sqrt(sdd), math.sqrt(saa))
    if saa == 0.0 and sbb == 0.0:
        cos = 1.0
    elif saa == 0.0 or sbb == 0.0:
        cos = 0.0
    else:
        cos = max(-1.0, min(1.0, sab / math.sqrt(saa * sbb)))
    metrics["cosine"] = cos
    if sdd == 0.0:
        metrics["sqnr"] = math.inf
    elif saa == 0.0 or math.isinf(sdd):  # a difference too large to square in float64 is no signal
        metrics["sqnr"] = -math.inf
    else:
        ratio = saa / sdd
        metrics["sqnr"] = 10.0 * math.log10(ratio) if ratio > 0 else -math.inf
    return metrics


# values per block of the fused comparison: its four float32 buffers stay in a core's cache, where the same work
# over whole tensors streams each through memory a dozen times
BLOCK = 1 << 16
_FUSED = (np.dtype(np.float16), np.dtype(np.float32))


def _core_blocks(ref: np.ndarray, cand: np.ndarray) -> tuple[dict[str, float], float, float] | None:
    """`_core` of two float16/float32 tensors, block by block, without a whole-tensor temporary; None where a
    value is not finite or a square overflows float32 (the caller then takes the path that counts and redoes)."""
    a, b = ref.reshape(-1), cand.reshape(-1)
    n = a.size
    m = min(n, BLOCK)
    wa, wb, d, t = (np.empty(m, np.float32) for _ in range(4))
    saa = sbb = sdd = sab = sabs = 0.0
    max_abs = max_rel = 0.0
    add, mul = np.add.reduce, np.multiply
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        for s in range(0, n, BLOCK):
            e = min(n, s + BLOCK)
            if e - s != wa.size:
                wa, wb, d, t = wa[: e - s], wb[: e - s], d[: e - s], t[: e - s]
            x = a[s:e] if a.dtype == np.float32 else to_float32(a[s:e], out=wa)
            y = b[s:e] if b.dtype == np.float32 else to_float32(b[s:e], out=wb)
            np.subtract(y, x, out=d)
            saa += float(add(mul(x, x, out=t), dtype=np.float64))
            sbb += float(add(mul(y, y, out=t), dtype=np.float64))
            sab += float(add(mul(x, y, out=t), dtype=np.float64))
            sdd += float(add(mul(d, d, out=t), dtype=np.float64))
            if not (math.isfinite(saa) and math.isfinite(sbb) and math.isfinite(sdd) and math.isfinite(sab)):
                return None  # a NaN, an inf, or a value whose square is beyond float32
            np.abs(d, out=d)
            max_abs = max(max_abs, float(d.max()))
            sabs += float(add(d, dtype=np.float64))
            np.divide(d, np.abs(x, out=t), out=t)
            rel = float(np.fmax.reduce(t))  # fmax skips NaN (0/0: identical zeros) and keeps inf (x/0)
            if rel == math.inf:  # x/0, or a ratio beyond float32 (1e-38 against 10): that block in float64
                with np.errstate(divide="ignore", invalid="ignore"):
                    rel = float(np.fmax.reduce(d.astype(np.float64) / np.abs(x.astype(np.float64))))
            if rel == rel:
                max_rel = max(max_rel, rel)
    return _finish(max_abs, sabs / n, max_rel, saa, sbb, sdd, sab), saa, sdd


def compare(ref: np.ndarray, cand: np.ndarray, extra: dict[str, dict[str, Any]] | None = None) -> Comparison:
    """Compare two tensors of the same shape.

    `extra` asks for parameterised metrics: {"frac_outside_tol": {"atol": .., "rtol": ..},
    "topk_agreement": {"k": 5}}; results are keyed by `metric_key(name, params)`.
    """
    ref = np.asarray(ref)
    cand = np.asarray(cand)
    if ref.shape != cand.shape:
        raise CompareError(f"shape mismatch: reference {list(ref.shape)} vs candidate {list(cand.shape)}")
    if ref.size == 0:
        raise CompareError("the tensors have no elements; nothing can be compared")
    if not extra and ref.dtype in _FUSED and cand.dtype in _FUSED:
        fused = _core_blocks(ref, cand)
        if fused is not None:
            metrics, saa, sdd = fused
            return Comparison(metrics, int(ref.size), 0, 0, 0, 0, 0, saa, sdd, int(ref.size))
    a, b = _working(ref), _working(cand)
    ref_extreme = _extreme(ref.dtype)
    ref_only = cand_only = saturated = 0
    sat_values: tuple[float, float] | None = None

    # fast path: a finite float64 sum proves every element finite (one pass per side)
    if math.isfinite(float(a.sum(dtype=np.float64))) and math.isfinite(float(b.sum(dtype=np.float64))):
        ref_nan = ref_inf = cand_nan = cand_inf = mismatch = 0
        if ref_extreme is not None and (float(a.max()) >= ref_extreme or float(a.min()) <= -ref_extreme):
            fill = _fills(a, b, ref_extreme)  # a finite fill: finfo(float32).min against -65504
            saturated, sat_values = _saturation(a, b, fill)
            a, b = a[~fill], b[~fill]
    else:
        a_fin = np.isfinite(a)
        b_fin = np.isfinite(b)
        ref_nan = int(np.count_nonzero(np.isnan(a)))
        cand_nan = int(np.count_nonzero(np.isnan(b)))
        ref_inf = int(a.size - ref_nan - np.count_nonzero(a_fin))
        cand_inf = int(b.size - cand_nan - np.count_nonzero(b_fin))
        fill = _fills(a, b, ref_extreme) if ref_extreme is not None else np.zeros(a.shape, bool)
        saturated, sat_values = _saturation(a, b, fill)
        # positions where finiteness differs, or both non-finite but not the same value (NaN vs inf, +inf vs -inf);
        # a saturated fill (-inf against -65504) is neither
        ref_only = int(np.count_nonzero(~a_fin & b_fin & ~fill))
        cand_only = int(np.count_nonzero(a_fin & ~b_fin & ~fill))
        nf = ~a_fin & ~b_fin & ~fill
        same = (np.isnan(a[nf]) & np.isnan(b[nf])) | (a[nf] == b[nf])
        mismatch = ref_only + cand_only + int(np.count_nonzero(~same))
        both = a_fin & b_fin & ~fill
        a, b = a[both], b[both]

    metrics: dict[str, float] = {}
    saa = sdd = 0.0
    if a.size == 0:
        for name in BASE_METRICS:
            metrics[name] = math.nan
    else:
        with np.errstate(over="ignore"):
            metrics, saa, sdd = _core(a, b)
        if a.dtype == np.float32 and any(math.isinf(metrics[k]) for k in ("max_rel", "rel_l2", "sqnr", "max_abs")):
            # float32 products can overflow where float64 would not (|x| > 1.8e19): redo in float64
            metrics, saa, sdd = _core(a.astype(np.float64), b.astype(np.float64))

    for name, params in (extra or {}).items():
        spec = METRICS[name]
        p = {**spec.params, **params}
        key = metric_key(name, p)
        if name == "frac_outside_tol":
            if a.size == 0:
                outside = 0
            else:
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
                outside = int(np.count_nonzero(np.abs(b64 - a64) > p["atol"] + p["rtol"] * np.abs(a64)))
            metrics[key] = (outside + mismatch) / ref.size
        elif name == "topk_agreement":
            metrics[key] = topk_agreement(
                _as_float64(ref).reshape(ref.shape), _as_float64(cand).reshape(cand.shape), int(p["k"])
            )
        else:
            raise KeyError(f"metric {name} takes no parameters")

    return Comparison(
        metrics,
        int(ref.size),
        ref_nan,
        ref_inf,
        cand_nan,
        cand_inf,
        mismatch,
        saa,
        sdd,
        int(a.size),
        ref_only_nonfinite=ref_only,
        cand_only_nonfinite=cand_only,
        saturated=saturated,
        saturated_values=sat_values,
    )


# a candidate value beyond half the float16 maximum is at the extreme of a type it may compute in (float16's top
# binade: a -65504 fill plus a score of up to +-16 stays there, rounded; a float32 or bfloat16 fill is far beyond)
CAND_EXTREME = float(np.finfo(np.float16).max) / 2


def _extreme(dtype: np.dtype) -> float | None:
    """Where a reference of this type is at its extreme: beyond half its largest finite value (its top binade,
    where only a fill such as finfo.min, or finfo.min plus a score, lands); None for a non-float type."""
    name = str(dtype)
    if name == "bfloat16":
        return 2.0**127  # half of bfloat16's largest finite value, rounded to its top binade's start
    if np.dtype(dtype).kind != "f":
        return None
    return float(np.finfo(dtype).max) / 2


def _fills(a: np.ndarray, b: np.ndarray, ref_extreme: float) -> np.ndarray:
    """Positions where both sides are at their type's extreme with the same sign: equal by meaning (a mask's
    fill, -inf in one export and finfo.min or -65504 in another). NaN is never one."""
    with np.errstate(invalid="ignore"):
        return ((a >= ref_extreme) & (b >= CAND_EXTREME)) | ((a <= -ref_extreme) & (b <= -CAND_EXTREME))


def _saturation(a: np.ndarray, b: np.ndarray, fill: np.ndarray) -> tuple[int, tuple[float, float] | None]:
    """(fill positions whose values differ, the first such (reference, candidate) pair)."""
    where = np.flatnonzero(fill)
    if not where.size:
        return 0, None
    differ = where[a[where] != b[where]]
    if not differ.size:
        return 0, None
    i = int(differ[0])
    return int(differ.size), (float(a[i]), float(b[i]))
