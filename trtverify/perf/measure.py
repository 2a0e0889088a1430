"""Latency of a callable: warm-up, then windows of timed runs until the estimate is stable or a budget ends.

The stability rule: runs are timed in windows of `window` calls; after each window the median of every window
so far is known, and the measurement is stable when the coefficient of variation (standard deviation / mean)
of the last `stable_windows` window medians is at most `max_cv`. `min_runs` timed runs always happen (the
budget does not cut them), and stability is judged only after `min_time_s` of timed work (or the budget, if
smaller), so a model that flips between two speeds over a fraction of a second is not called stable on a few
fast windows; after that it stops when stable, when `budget_s` of timed work is spent, or after
`max_runs`; `stable` records which. The
per-run coefficient of variation (`cv`) is reported beside it: it says how noisy single calls are, the rule says
whether the reported median can be trusted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from pydantic import Field

from trtverify.util.record import Record

PERCENTILES = (90, 95, 99)


@dataclass(frozen=True)
class Budget:
    """How long to measure one model at one batch size."""

    warmup: int = 10
    window: int = 20
    stable_windows: int = 3
    max_cv: float = 0.05
    min_runs: int = 60
    min_time_s: float = 0.5
    max_runs: int = 5000
    budget_s: float = 10.0


class LatencyStats(Record):
    """Milliseconds per call; throughput in samples per second (batch / mean latency)."""

    batch: int
    runs: int
    warmup: int
    mean_ms: float
    median_ms: float
    min_ms: float
    max_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    cv: float = Field(description="standard deviation / mean of single runs")
    window_cv: float | None = Field(description="coefficient of variation of the last window medians (the rule)")
    stable: bool = Field(description="window_cv <= max_cv before the budget or max_runs ended the measurement")
    stopped_by: str = Field(description="stable, budget or max_runs")
    throughput: float = Field(description="samples per second: batch * 1000 / mean_ms")


def window_cv(medians: list[float], last: int) -> float | None:
    """CV of the last `last` window medians (None while fewer exist)."""
    if len(medians) < last:
        return None
    tail = np.asarray(medians[-last:], dtype=np.float64)
    mean = float(tail.mean())
    return float(tail.std() / mean) if mean > 0 else 0.0


def summarize(times_ms: list[float] | np.ndarray, batch: int, warmup: int, wcv: float | None, stopped_by: str,
              max_cv: float) -> LatencyStats:  # fmt: skip
    t = np.asarray(times_ms, dtype=np.float64)
    mean = float(t.mean())
    p90, p95, p99 = (float(np.percentile(t, q)) for q in PERCENTILES)
    return LatencyStats(
        batch=batch,
        runs=int(t.size),
        warmup=warmup,
        mean_ms=mean,
        median_ms=float(np.median(t)),
        min_ms=float(t.min()),
        max_ms=float(t.max()),
        p90_ms=p90,
        p95_ms=p95,
        p99_ms=p99,
        cv=float(t.std() / mean) if mean > 0 else 0.0,
        window_cv=wcv,
        stable=wcv is not None and wcv <= max_cv,
        stopped_by=stopped_by,
        throughput=batch * 1000.0 / mean if mean > 0 else float("inf"),
    )


def measure(fn: Callable[[], object], batch: int = 1, budget: Budget = Budget(),
            clock: Callable[[], float] = time.perf_counter) -> LatencyStats:  # fmt: skip
    """Time `fn()` (one inference of `batch` samples) under the stability rule of `budget`."""
    for _ in range(budget.warmup):
        fn()
    times: list[float] = []
    medians: list[float] = []
    spent = 0.0
    stopped_by = "max_runs"
    wcv: float | None = None
    while len(times) < budget.max_runs:
        window = []
        for _ in range(min(budget.window, budget.max_runs - len(times))):
            t0 = clock()
            fn()
            dt = clock() - t0
            spent += dt
            window.append(dt * 1000.0)
        times += window
        medians.append(float(np.median(window)))
        wcv = window_cv(medians, budget.stable_windows)
        enough = len(times) >= budget.min_runs and spent >= min(budget.min_time_s, budget.budget_s)
        if wcv is not None and wcv <= budget.max_cv and enough:
            stopped_by = "stable"
            break
        if spent >= budget.budget_s and len(times) >= budget.min_runs:
            stopped_by = "budget"
            break
    return summarize(times, batch, budget.warmup, wcv, stopped_by, budget.max_cv)
