"""Evaluate configured checks over many samples and summarise per tensor."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trtverify.compare.metrics import BASE_METRICS, METRICS, CompareError, compare, metric_key
from trtverify.config.models import Check


@dataclass
class CheckResult:
    name: str
    metric: str
    value: float | None
    threshold: float | None
    op: str
    passed: bool
    tensor: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "metric": self.metric,
            "value": self.value,
            "threshold": self.threshold,
            "op": self.op,
            "passed": self.passed,
            "tensor": self.tensor,
            **({"detail": self.detail} if self.detail else {}),
        }


def _summary(values: list[float], better: str) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    finite = arr[np.isfinite(arr)]
    if np.isnan(arr).any():
        worst = math.nan
    else:
        worst = float(arr.max() if better == "lower" else arr.min())
    out = {"worst": worst, "min": float(arr.min()), "max": float(arr.max())}
    if finite.size:
        out["mean"] = float(finite.mean())
        out["median"] = float(np.median(finite))
        out["p95"] = float(np.percentile(finite, 95 if better == "lower" else 5))
    return out


# error histogram: log10 |reference - candidate| in half-decade bins from 1e-12 to 1e4, over a
# strided sample of each tensor (the full tensor would double the compare time; the extremes are
# already in max_abs / max_rel)
HIST_LOG10_LO, HIST_LOG10_HI, HIST_PER_DECADE = -12, 4, 2
HIST_BINS = (HIST_LOG10_HI - HIST_LOG10_LO) * HIST_PER_DECADE
HIST_SAMPLE = 16384


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
    """Metric values of one tensor pair across samples."""

    reference: str
    candidate: str
    shape: list[int] | None = None
    dtype: str | None = None
    cand_dtype: str | None = None
    values: dict[str, list[float]] = field(default_factory=dict)
    nonfinite: dict[str, int] = field(
        default_factory=lambda: {"ref_nan": 0, "ref_inf": 0, "cand_nan": 0, "cand_inf": 0, "nonfinite_mismatch": 0}
    )
    errors: list[str] = field(default_factory=list)
    samples: int = 0
    histogram: bool = False
    hist: dict[str, Any] = field(default_factory=dict)

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
        if self.histogram:
            counts, exact, nonfinite, looked = error_histogram(ref, cand)
            h = self.hist
            h["counts"] = h["counts"] + counts if "counts" in h else counts
            for k, v in (("exact", exact), ("nonfinite", nonfinite), ("sampled", looked), ("total", int(np.size(ref)))):
                h[k] = h.get(k, 0) + v
        for k in self.nonfinite:
            self.nonfinite[k] += getattr(c, k)

    def histogram_dict(self) -> dict[str, Any] | None:
        """The histogram with empty bins at both ends dropped; None when none was taken."""
        h = self.hist
        if "counts" not in h:
            return None
        counts = h["counts"]
        nz = np.flatnonzero(counts)
        lo, hi = (int(nz[0]), int(nz[-1]) + 1) if nz.size else (0, 0)
        edges = [HIST_LOG10_LO + i / HIST_PER_DECADE for i in range(lo, hi + 1)] if nz.size else []
        return {
            "log10_edges": edges,
            "counts": [int(c) for c in counts[lo:hi]],
            "exact": h["exact"],
            "nonfinite": h["nonfinite"],
            "sampled": h["sampled"],
            "total": h["total"],
        }

    def summary(self) -> dict[str, Any]:
        metrics = {}
        for key, vals in self.values.items():
            base = key.split("@")[0]
            metrics[key] = _summary(vals, METRICS[base].better)
        return {
            "tensor": self.candidate,
            "reference_tensor": self.reference,
            "shape": self.shape,
            "dtype": self.dtype,
            "candidate_dtype": self.cand_dtype,
            "samples": self.samples,
            "metrics": metrics,
            **self.nonfinite,
            "errors": list(self.errors),
        }


def extras_for(checks: Sequence[Check]) -> dict[str, dict[str, Any]]:
    return {c.metric: c.params for c in checks if METRICS[c.metric].params}


def evaluate(series: TensorSeries, checks: Sequence[Check]) -> list[CheckResult]:
    """Each check against the worst sample; non-finite mismatches and compare errors always fail."""
    out = []
    name = series.candidate
    if series.errors:
        out.append(
            CheckResult(
                f"{name}: comparable", "comparable", None, None, "==", False, name, {"errors": series.errors[:5]}
            )
        )
    mism = series.nonfinite["nonfinite_mismatch"]
    out.append(
        CheckResult(
            f"{name}: nonfinite_mismatch <= 0",
            "nonfinite_mismatch",
            float(mism),
            0.0,
            "<=",
            mism == 0,
            name,
            {k: v for k, v in series.nonfinite.items() if v} if mism else {},
        )
    )
    for check in checks:
        key = metric_key(check.metric, check.params)
        vals = series.values.get(key, [])
        if not vals:
            out.append(
                CheckResult(
                    f"{name}: {key} {check.op} {check.threshold:g}",
                    key,
                    None,
                    check.threshold,
                    check.op,
                    False,
                    name,
                    {"reason": "no comparable samples"},
                )
            )
            continue
        summary = _summary(vals, METRICS[check.metric].better)
        failing = [i for i, v in enumerate(vals) if not check.passes(v)]
        worst_idx = (
            int(np.nanargmax(vals) if check.max is not None else np.nanargmin(vals))
            if not all(v != v for v in vals)
            else 0
        )
        out.append(
            CheckResult(
                f"{name}: {key} {check.op} {check.threshold:g}",
                key,
                summary["worst"],
                check.threshold,
                check.op,
                check.passes(summary["worst"]) and not failing,
                name,
                {"worst_sample": worst_idx, "samples_failed": len(failing), "samples": len(vals)},
            )
        )
    return out


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


__all__ = ["BASE_METRICS", "CheckResult", "TensorSeries", "evaluate", "run_comparisons"]
