"""Check results, and checks evaluated over many samples of one tensor pair."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field

from trtverify.compare.metrics import CompareError, Comparison, compare, judged, rejudged
from trtverify.config.checks import METRICS, Better, Check, better_of
from trtverify.util.record import Record, omitted, optional
from trtverify.util.words import count


class CheckResult(Record):
    """One check of one stage: what was measured, against which limit, and whether it passed.

    `name` is for people ('fp16: rel_l2 <= 0.01 (every tensor)'); programs read the fields."""

    name: str = Field(description="human-readable label of the check")
    stage: str = Field(description="the stage that ran it")
    candidate: str | None = Field(default=None, description="the candidate it concerns, if any")
    tensor: str | None = Field(default=None, description="the tensor it concerns (the worst one, for aggregates)")
    metric: str = Field(description="what was measured")
    value: float | None = Field(description="the measured value (the worst sample's); null when not computed")
    threshold: float | None = Field(description="the limit")
    op: Literal["<=", ">=", "=="] = Field(description="direction: value op threshold passes")
    passed: bool
    worst_sample: int | None = Field(default=None, description="index of the sample with the worst value")
    detail: dict[str, Any] = omitted(dict, "supporting facts: failing samples, reasons, findings")


def failed_check(name: str, stage: str, metric: str, detail: dict[str, Any], **kw: Any) -> CheckResult:
    """A check that could not be evaluated (`detail` says why): never a pass."""
    return CheckResult(
        name=name, stage=stage, metric=metric, value=None, threshold=None, op="==", passed=False, detail=detail, **kw
    )


def limit_check(name: str, stage: str, metric: str, value: float, limit: float, op: str, **kw: Any) -> CheckResult:
    """A value against a limit: 'tensors compared >= 1', 'unmatched outputs <= 0', 'accuracy drop <= 0.01'."""
    passed = value <= limit if op == "<=" else value >= limit
    return CheckResult(
        name=name, stage=stage, metric=metric, value=float(value), threshold=float(limit), op=op, passed=passed, **kw
    )


class MetricSummary(Record):
    """One metric of one tensor pair across samples."""

    worst: float
    min: float
    max: float
    mean: float | None = optional("over the samples where the metric is finite")
    median: float | None = optional()
    p95: float | None = optional("95th percentile (5th for higher-is-better metrics)")


def summarize(values: Sequence[float], better: Better) -> MetricSummary:
    if len(values) == 1 and values[0] != 0.0:  # one sample (a layerwise row): numpy's reductions cost 100 us here
        # (a zero goes to numpy: its mean and median of -0.0 are 0.0, its percentile -0.0)
        v = float(values[0])
        extra = {"mean": v, "median": v, "p95": v} if math.isfinite(v) else {}
        return MetricSummary(worst=v, min=v, max=v, **extra)
    arr = np.asarray(values, dtype=np.float64)
    finite = arr[np.isfinite(arr)]
    worst = math.nan if np.isnan(arr).any() else float(arr.max() if better == "lower" else arr.min())
    extra: dict[str, float] = {}
    if finite.size:
        extra = {
            "mean": float(finite.mean()),
            "median": float(np.median(finite)),
            "p95": float(np.percentile(finite, 95 if better == "lower" else 5)),
        }
    return MetricSummary(worst=worst, min=float(arr.min()), max=float(arr.max()), **extra)


class TensorSummary(Record):
    """A compared tensor pair: shapes, types, metric summaries and non-finite counts."""

    tensor: str = Field(description="candidate tensor name")
    reference_tensor: str
    shape: list[int] | None
    dtype: str | None
    candidate_dtype: str | None
    samples: int
    metrics: dict[str, MetricSummary]
    ref_nan: int
    ref_inf: int
    cand_nan: int
    cand_inf: int
    nonfinite_mismatch: int
    ref_only_nonfinite: int = Field(default=0, description="mismatches non-finite in the reference only")
    cand_only_nonfinite: int = Field(default=0, description="mismatches non-finite in the candidate only")
    saturated: int = Field(
        default=0,
        description="positions both at their type's extreme (a mask's fill: -inf against -65504), not compared",
    )
    errors: list[str]


# error histogram: log10 |reference - candidate| in half-decade bins from 1e-12 to 1e4, over a
# strided sample of each tensor (the full tensor would double the compare time; the extremes are
# already in max_abs / max_rel)
HIST_LOG10_LO, HIST_LOG10_HI, HIST_PER_DECADE = -12, 4, 2
HIST_BINS = (HIST_LOG10_HI - HIST_LOG10_LO) * HIST_PER_DECADE
HIST_SAMPLE = 16384
NONFINITE_KEYS = (
    "ref_nan",
    "ref_inf",
    "cand_nan",
    "cand_inf",
    "nonfinite_mismatch",
    "ref_only_nonfinite",
    "cand_only_nonfinite",
    "saturated",
)


def nonfinite_words(mismatch: int, ref_only: int | None, cand_only: int | None) -> str:
    """A non-finite mismatch in words, saying which side holds the non-finite values: '432 non-finite values in
    the candidate where the reference's are finite'. Counts of a results.json older than the sides: `None`."""
    if ref_only is None and cand_only is None:
        return f"{count(mismatch, 'value')} non-finite on one side only"
    ref_only, cand_only = ref_only or 0, cand_only or 0
    parts = []
    if cand_only:
        parts.append(f"{count(cand_only, 'non-finite value')} in the candidate where the reference's are finite")
    if ref_only:
        parts.append(f"{count(ref_only, 'non-finite value')} in the reference where the candidate's are finite")
    rest = mismatch - ref_only - cand_only
    if rest > 0:
        parts.append(f"{count(rest, 'value')} non-finite on both sides but different (NaN, or inf of the other sign)")
    return ", ".join(parts)


def saturated_words(n: int, values: Sequence[float] | None) -> str:
    """'432 values at their type's extreme on both sides (reference -inf, candidate -65504)'."""
    pair = f" (reference {values[0]:.6g}, candidate {values[1]:.6g})" if values else ""
    return f"{count(n, 'value')} at their type's extreme on both sides{pair}"


class Histogram(Record):
    """|reference - candidate| of a strided sample of a tensor's elements, in log10 bins."""

    log10_edges: list[float]
    counts: list[int]
    exact: int
    nonfinite: int
    sampled: int
    total: int


def error_histogram(ref: np.ndarray, cand: np.ndarray, limit: int = HIST_SAMPLE) -> tuple[np.ndarray, int, int, int]:
    """(counts over HIST_BINS bins, with values below 1e-12 in the first and above 1e4 in the last;
    exact zeros; non-finite differences; elements looked at)."""
    a = np.asarray(ref).reshape(-1)
    b = np.asarray(cand).reshape(-1)
    step = max(1, -(-a.size // limit))
    d = np.abs(a[::step].astype(np.float64) - b[::step].astype(np.float64))
    finite = np.isfinite(d)
    nonfinite = int(d.size - np.count_nonzero(finite))
    d = d[finite]
    exact = int(np.count_nonzero(d == 0))
    d = d[d > 0]
    idx = np.floor((np.log10(d) - HIST_LOG10_LO) * HIST_PER_DECADE).astype(np.int64)
    counts = np.bincount(np.clip(idx, 0, HIST_BINS - 1), minlength=HIST_BINS)
    return counts, exact, nonfinite, int(a[::step].size)


@dataclass
class TensorSeries:
    """Metric values of one tensor pair across samples (accumulated while the samples stream by)."""

    reference: str
    candidate: str
    shape: list[int] | None = None
    dtype: str | None = None
    cand_dtype: str | None = None
    values: dict[str, list[float]] = field(default_factory=dict)
    nonfinite: dict[str, int] = field(default_factory=lambda: dict.fromkeys(NONFINITE_KEYS, 0))
    errors: list[str] = field(default_factory=list)
    samples: int = 0
    histogram: bool = False
    hist: dict[str, Any] = field(default_factory=dict)
    comparisons: list[Comparison] = field(default_factory=list)  # one per sample compared, as `values`
    saturated_values: tuple[float, float] | None = None  # the first saturated fill: (reference, candidate)
    _judged: tuple[int, list[dict[str, float]]] | None = field(default=None, init=False, repr=False, compare=False)

    def add(self, ref: np.ndarray, cand: np.ndarray, extra: dict[str, dict[str, Any]]) -> None:
        self.samples += 1
        self.shape = list(np.shape(ref))
        self.dtype = str(np.asarray(ref).dtype)
        self.cand_dtype = str(np.asarray(cand).dtype)
        try:
            c = compare(ref, cand, extra)
        except CompareError as exc:
            self.errors.append(f"sample {self.samples - 1}: {exc}")
            return
        for k, v in c.metrics.items():
            self.values.setdefault(k, []).append(v)
        self.comparisons.append(c)
        if self.histogram:
            counts, exact, nonfinite, looked = error_histogram(ref, cand)
            h = self.hist
            h["counts"] = h["counts"] + counts if "counts" in h else counts
            for k, v in (("exact", exact), ("nonfinite", nonfinite), ("sampled", looked), ("total", int(np.size(ref)))):
                h[k] = h.get(k, 0) + v
        for k in self.nonfinite:
            self.nonfinite[k] += getattr(c, k)
        if self.saturated_values is None:
            self.saturated_values = c.saturated_values

    def histogram_record(self) -> Histogram | None:
        """The histogram with empty bins at both ends dropped; None when none was taken."""
        h = self.hist
        if "counts" not in h:
            return None
        counts = h["counts"]
        nz = np.flatnonzero(counts)
        lo, hi = (int(nz[0]), int(nz[-1]) + 1) if nz.size else (0, 0)
        edges = [HIST_LOG10_LO + i / HIST_PER_DECADE for i in range(lo, hi + 1)] if nz.size else []
        return Histogram(
            log10_edges=edges,
            counts=[int(c) for c in counts[lo:hi]],
            exact=h["exact"],
            nonfinite=h["nonfinite"],
            sampled=h["sampled"],
            total=h["total"],
        )

    @property
    def zero_reference(self) -> int:
        """Samples whose reference is all zeros and whose candidate is not, in a tensor with a nonzero reference
        elsewhere: judged against the tensor's typical magnitude (`metrics.judged`)."""
        return sum(1 for m, c in zip(self._per_sample(), self.comparisons) if m is not c.metrics)

    def _per_sample(self) -> list[dict[str, float]]:
        """`metrics.judged` of the samples compared so far, worked out once (checks, summaries and the zero-reference
        count all read it)."""
        if self._judged is None or self._judged[0] != len(self.comparisons):
            self._judged = (len(self.comparisons), judged(self.comparisons))
        return self._judged[1]

    def judged(self) -> dict[str, tuple[list[float], list[int]]]:
        """Per metric key, the values checks read and the position in `values` of each: `values`, but a
        zero-reference sample's rel_l2 and sqnr against the tensor's typical magnitude and its cosine left out
        (a zero vector has no direction)."""
        per_sample = self._per_sample()
        if all(m is c.metrics for m, c in zip(per_sample, self.comparisons)):
            return {k: (v, list(range(len(v)))) for k, v in self.values.items()}
        out: dict[str, tuple[list[float], list[int]]] = {}
        for k in self.values:
            pairs = [
                (m[k], i)
                for i, (m, c) in enumerate(zip(per_sample, self.comparisons))
                if m is c.metrics or m[k] == m[k]  # NaN where rejudged: that sample does not decide this metric
            ]
            out[k] = ([v for v, _ in pairs], [i for _, i in pairs])
        return out

    def metric_summaries(self) -> dict[str, MetricSummary]:
        return {key: summarize(vals, better_of(key)) for key, (vals, _) in self.judged().items()}

    def worst(self) -> dict[str, float]:
        """The worst value of each metric across samples."""
        return {k: v.worst for k, v in self.metric_summaries().items()}

    def summary(self) -> TensorSummary:
        return TensorSummary(
            tensor=self.candidate,
            reference_tensor=self.reference,
            shape=self.shape,
            dtype=self.dtype,
            candidate_dtype=self.cand_dtype,
            samples=self.samples,
            metrics=self.metric_summaries(),
            **self.nonfinite,
            errors=list(self.errors),
        )


class Worst:
    """The worst value of each metric over a tensor's samples, taken as they stream by (NaN where no sample has a
    finite one); a zero-reference sample is held aside and `rejudged` at the end against the typical magnitude of
    the samples where the reference is not zero (no second pass over tensors)."""

    def __init__(self) -> None:
        self._worst: dict[str, float] = {}
        self._sq = 0.0
        self._n = 0
        self._zero: list[Comparison] = []

    def add(self, c: Comparison) -> None:
        if c.zero_reference:
            self._zero.append(c)
            self._take(self._worst, dict.fromkeys(c.metrics, math.nan))  # its keys, decided at the end
            return
        if c.ref_sq > 0.0 and math.isfinite(c.ref_sq):
            self._sq += c.ref_sq
            self._n += c.compared
        self._take(self._worst, c.metrics)

    @staticmethod
    def _take(into: dict[str, float], metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            w = into.get(k, math.nan)
            if w != w or (v == v and (v > w if better_of(k) == "lower" else v < w)):
                into[k] = v

    @property
    def zero_reference(self) -> int:
        """Samples judged against the tensor's typical magnitude."""
        return len(self._zero) if self._n else 0

    def result(self) -> dict[str, float]:
        out = dict(self._worst)
        for c in self._zero:
            self._take(out, rejudged(c, self._sq / self._n) if self._n else c.metrics)
        return out


def worst_of(comparisons: Sequence[Comparison]) -> dict[str, float]:
    """The worst value of each metric over samples (`Worst`)."""
    w = Worst()
    for c in comparisons:
        w.add(c)
    return w.result()


def extras_for(checks: Sequence[Check]) -> dict[str, dict[str, Any]]:
    return {c.metric: c.params for c in checks if METRICS[c.metric].params}


@dataclass(frozen=True)
class Evaluated:
    """A tensor's checks, and the conditions it failed ('rel_l2 <= 0.01', 'nonfinite_mismatch <= 0')."""

    checks: list[CheckResult]
    failed: list[str]


def evaluate(series: TensorSeries, checks: Sequence[Check], *, stage: str, candidate: str | None = None) -> Evaluated:
    """Each check against the worst sample; non-finite mismatches and compare errors always fail."""
    tensor = prefix = series.candidate
    out: list[CheckResult] = []
    failed: list[str] = []
    where = {"candidate": candidate, "tensor": tensor}
    if series.errors:
        out.append(failed_check(f"{prefix}: comparable", stage, "comparable", {"errors": series.errors[:5]}, **where))
        failed.append("comparable")
    mism = series.nonfinite["nonfinite_mismatch"]
    detail = {k: v for k, v in series.nonfinite.items() if v} if mism else {}
    out.append(
        limit_check(
            f"{prefix}: nonfinite_mismatch <= 0", stage, "nonfinite_mismatch", mism, 0, "<=", detail=detail, **where
        )
    )
    if mism:
        failed.append("nonfinite_mismatch <= 0")
    per_key = series.judged()
    zero_ref = series.zero_reference
    for check in checks:
        key = check.key
        vals, where_in = per_key.get(key, ([], []))
        if not vals:
            result = CheckResult(
                name=f"{prefix}: {check.condition}",
                metric=key,
                value=None,
                threshold=check.threshold,
                op=check.op,
                passed=False,
                detail={"reason": "no comparable samples"},
                stage=stage,
                **where,
            )
        else:
            summary = summarize(vals, METRICS[check.metric].better)
            failing = [i for i, v in enumerate(vals) if not check.passes(v)]
            pick = np.nanargmax if check.max is not None else np.nanargmin
            worst_idx = where_in[int(pick(vals))] if len(vals) > 1 and not all(v != v for v in vals) else where_in[0]
            info: dict[str, Any] = {"samples_failed": len(failing), "samples": len(vals)}
            if zero_ref:  # judged against the tensor's typical magnitude, not their own (zero) one
                info["zero_reference_samples"] = zero_ref
            result = CheckResult(
                name=f"{prefix}: {check.condition}",
                metric=key,
                value=summary.worst,
                threshold=check.threshold,
                op=check.op,
                passed=check.passes(summary.worst) and not failing,
                worst_sample=worst_idx,
                detail=info,
                stage=stage,
                **where,
            )
        out.append(result)
        if not result.passed:
            failed.append(check.condition)
    return Evaluated(out, failed)


def run_comparisons(
    ref_samples: Sequence[dict[str, np.ndarray]],
    cand_samples: Sequence[dict[str, np.ndarray]],
    pairs: Sequence[tuple[str, str]],
    checks_for: Callable[[str], Sequence[Check]],
) -> list[TensorSeries]:
    series = {}
    for ref_name, cand_name in pairs:
        s = TensorSeries(ref_name, cand_name)
        extra = extras_for(checks_for(cand_name))
        for r, c in zip(ref_samples, cand_samples):
            s.add(r[ref_name], c[cand_name], extra)
        series[cand_name] = s
    return list(series.values())
