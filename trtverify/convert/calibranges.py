"""Activation ranges of one calibration method, computed with ONNX Runtime's calibrators and shown as they go.

quantize_static calibrates and quantizes in one call and says nothing in between: its entropy calibrator reads
the rows in seconds, then searches each tensor's KL-optimal threshold for minutes (SSDlite: 16 rows in 2 s, then
214 s without a line). Here the calibrator is ONNX Runtime's (`create_calibrator`), driven step by step:

1. the rows (`METHOD calibration: done/N rows`, RowProgress), then for entropy and percentile
   each tensor's histogram (`... histograms of done/N tensors`, every PROGRESS_EVERY_S);
2. the ranges: minmax has them when the rows are done; percentile computes its own at once (one line); entropy's
   threshold search runs tensor by tensor through the collector's own `get_entropy_threshold`, with a line every
   PROGRESS_EVERY_S (`entropy calibration: thresholds of 40/109 tensors (30 s, about 50 s left)`). It searches
   only the tensors the Q/DQ model quantizes (the inputs of QUANTIZED_OPS): the calibrator also collects their
   outputs, which no Q/DQ reads (OpTypesToExcludeOutputQuantization), and those keep their seen range (SSDlite:
   109 of 202 tensors searched, half the time, the same scales). A `budget_s` stops the search once its
   projected total passes the budget (OverBudget, with the projection):
   `auto` (repair/calibrate.py) bounds each method's cost that way.

The ranges go to an ONNX Runtime calibration cache that quantize_static reads instead of calibrating again.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# TensorRT's entropy calibrator: 2048 histogram bins, thresholds searched over 128-bin quantisations.
# quantize_static builds its Entropy histogram with 128 bins and no option to change it: with 128 quantised bins
# the one threshold it can try is the full range, i.e. MinMax's.
ENTROPY_OPTIONS = {"num_bins": 2048, "num_quantized_bins": 128}


PROGRESS_EVERY_S = 5.0  # a calibration's progress line at most this often between its first and its last


class RowProgress:
    """Progress of one calibration pass: `METHOD calibration: 0/N rows` at the start, the rows done at most every
    PROGRESS_EVERY_S seconds (thousands of rows make a few lines, not thousands), and the last row with the time
    it took (then the ranges are computed from what the rows gave)."""

    def __init__(self, method: str, total: int, progress: Callable[[str], None] | None) -> None:
        self.method, self.total, self.progress = method, total, progress
        self.t0 = self.last = time.monotonic()
        self.finished = False

    def done(self, rows: int) -> None:
        if self.progress is None or self.finished:
            return
        now = time.monotonic()
        if rows == 0:
            self.progress(f"{self.method} calibration: 0/{self.total} rows")
        elif rows >= self.total:
            self.finished = True
            self.progress(f"{self.method} calibration: {self.total}/{self.total} rows ({now - self.t0:.1f} s)")
        elif now - self.last >= PROGRESS_EVERY_S:
            self.progress(f"{self.method} calibration: {rows}/{self.total} rows ({now - self.t0:.1f} s)")
        else:
            return
        self.last = now


class OverBudget(Exception):  # noqa: N818 - a stop, not a failure
    """A range computation stopped: its projected time passed the budget."""

    def __init__(self, method: str, spent: float, projected: float, done: int, total: int, budget: float) -> None:
        super().__init__(f"{method}: projected {projected:.0f} s > budget {budget:.0f} s")
        self.method, self.spent, self.projected, self.done, self.total, self.budget = (
            method, spent, projected, done, total, budget)  # fmt: skip


def _collector(calibrator: Any, say: Callable[[str], None]) -> Any:
    """The histogram calibrator's own collector (ONNX Runtime's HistogramCollector, with its settings), fed one
    tensor at a time so that making the histograms shows progress: it histograms each tensor on its own, so the
    result is the same as one call with every tensor."""
    from onnxruntime.quantization.calibrate import HistogramCollector

    method = calibrator.method

    class Collector(HistogramCollector):
        def collect(self, name_to_arr: dict[str, Any]) -> None:
            names = list(name_to_arr)
            say(f"{method} calibration: histograms of 0/{len(names)} tensors")
            t0 = last = time.monotonic()
            for done, name in enumerate(names, start=1):
                super().collect({name: name_to_arr[name]})
                now = time.monotonic()
                if done == len(names):
                    say(f"{method} calibration: histograms of {done}/{len(names)} tensors ({now - t0:.1f} s)")
                elif now - last >= PROGRESS_EVERY_S:
                    say(f"{method} calibration: histograms of {done}/{len(names)} tensors ({now - t0:.0f} s)")
                    last = now

    return Collector(method=method, symmetric=calibrator.symmetric, num_bins=calibrator.num_bins,
                     num_quantized_bins=calibrator.num_quantized_bins, percentile=calibrator.percentile,
                     scenario=calibrator.scenario)  # fmt: skip


def quantized_inputs(reference: Path, op_types: Sequence[str]) -> set[str]:
    """The tensors read by nodes of `op_types` in the main graph (the ones a Q/DQ model quantizes)."""
    from trtverify.graph.onnxwire import weightless

    graph = weightless(reference)[0].graph
    return {i for n in graph.node if n.op_type in op_types for i in n.input if i}


def compute_ranges(
    reference: Path,
    reader: Any,
    method: str,
    symmetric: bool,
    tmp: Path,
    op_types: Sequence[str],
    rows: Any,
    budget_s: float | None = None,
) -> Any:
    """ONNX Runtime's TensorsData for `method` ('minmax', 'entropy', 'percentile') from the rows of `reader` (a
    CalibrationDataReader that reports its rows to `rows`, a RowProgress); progress lines through `rows.progress`.
    OverBudget when `budget_s` is given and the range computation's projected time passes it."""
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import create_calibrator

    calibrate = {"minmax": CalibrationMethod.MinMax, "entropy": CalibrationMethod.Entropy,
                 "percentile": CalibrationMethod.Percentile}[method]  # fmt: skip
    # MinMax with quantize_static's defaults (its symmetric Q/DQ uses max |x| anyway); the histogram methods'
    # ranges symmetric like the activations' Q/DQ (percentile: ONNX Runtime's default 99.999)
    options: dict[str, Any] = {} if method == "minmax" else {"symmetric": symmetric}
    if method == "entropy":
        options.update(ENTROPY_OPTIONS)
    calibrator = create_calibrator(
        Path(reference), list(op_types), augmented_model_path=str(tmp / f"augmented-{method}.onnx"),
        calibrate_method=calibrate, extra_options=options,
    )  # fmt: skip
    say = rows.progress or (lambda _: None)
    if method != "minmax":  # after the last row, the calibrator makes every tensor's histogram before it returns
        calibrator.collector = _collector(calibrator, say)
    calibrator.collect_data(reader)
    t0 = time.monotonic()
    if method == "entropy":
        data = _entropy(calibrator, quantized_inputs(reference, op_types), say, budget_s)
    else:  # minmax: ranges reduced as the rows ran; percentile: one cumulative sum per histogram
        data = calibrator.compute_data()
        if method != "minmax":
            say(f"{method} calibration: ranges of {len(list(data.keys()))} tensors ({time.monotonic() - t0:.1f} s)")
    del calibrator
    return data


def _entropy(calibrator: Any, quantized: set[str], say: Callable[[str], None], budget_s: float | None) -> Any:
    """The entropy calibrator's thresholds, tensor by tensor (its collector's get_entropy_threshold), with
    progress; the tensors no Q/DQ reads keep their seen range (min, max)."""
    from onnxruntime.quantization import CalibrationMethod
    from onnxruntime.quantization.calibrate import TensorsData

    collector = calibrator.collector
    histograms = collector.histogram_dict
    searched = [t for t in histograms if t in quantized]
    say(f"entropy calibration: thresholds of 0/{len(searched)} tensors (its KL search, tensor by tensor)")
    ranges: dict[str, tuple[Any, ...]] = {}
    for name, h in histograms.items():  # (hist, edges, min, max, threshold)
        if name not in quantized:
            ranges[name] = (h[2], h[3], *h[:2])
    t0 = last = time.monotonic()
    for done, name in enumerate(searched, start=1):
        h = histograms[name]
        ranges[name] = (*collector.get_entropy_threshold(h, collector.num_quantized_bins), *h[:2])
        now = time.monotonic()
        spent = now - t0
        projected = spent / done * len(searched)
        if budget_s is not None and 2 <= done < len(searched) and projected > budget_s:
            raise OverBudget("entropy", spent, projected, done, len(searched), budget_s)
        if done == len(searched):
            say(f"entropy calibration: thresholds of {done}/{len(searched)} tensors ({spent:.1f} s)")
        elif now - last >= PROGRESS_EVERY_S:
            say(f"entropy calibration: thresholds of {done}/{len(searched)} tensors ({spent:.0f} s, about "
                f"{projected - spent:.0f} s left)")  # fmt: skip
            last = now
    return TensorsData(CalibrationMethod.Entropy, {n: ranges[n] for n in histograms})
