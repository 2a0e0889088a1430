"""What is wrong with a calibration set before it sets an INT8 model's ranges.

MinMax calibration takes each tensor's range from the largest |x| any row gives it, so one corrupted row (a
pixel of 1000 among images in [0, 1]) stretches the ranges of every tensor it reaches, and the INT8 step of
those tensors grows with it: the normal rows then quantize to a few levels. `check_rows` runs the FP32
reference once per row in ONNX Runtime with every value tensor exposed and looks at each tensor's per-row
max |x|:

- **outlier rows**: a row whose max |x| of a tensor is more than `OUTLIER_FACTOR` (10) times the median of
  the other rows' is an outlier for that tensor. The median makes the rule robust to several bad rows (a
  rule against the other rows' *largest* value misses two corrupted rows); 10x is far above the spread of
  real data: the per-row max |x| of a tensor over natural images or noise inputs varies by well under 3x
  (measured: uniform [0, 1] images through a 3-conv CNN, at most 1.3x the median; the corrupted row of
  the issue, 100x to 1000x). A tensor whose other rows are all zero is skipped (no scale to compare with).
  Outlier rows are left out of the rows handed to quantization unless `keep_outliers`.
- **too few rows**: fewer than `MIN_ROWS` (16). MinMax needs only a few, but histogram methods (entropy,
  percentile) estimate a distribution's tail from the rows, and one unusual row among 8 moves a range a lot;
  TensorRT's guide asks for about 500 images for ImageNet classifiers. 16 is a floor, not a goal.
- **constant rows**: every value of every input equal (a blank image, a zero-filled row).
- **inputs outside the other rows' range**: per float input, a row whose values go further beyond the other
  rows' [min, max] than `INPUT_FACTOR` (2) times that span (the row alone makes the input's range more than
  three times as wide).

The reference runs without plugins here (a graph with plugin nodes is not checked: `skipped` says why).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

OUTLIER_FACTOR = 10.0
MIN_ROWS = 16
INPUT_FACTOR = 2.0


@dataclass(frozen=True)
class OutlierRow:
    row: int  # 0-based index in the .npz
    tensors: int  # how many tensors it is an outlier for
    factor: float  # its largest max |x| against the median of the other rows', over those tensors
    worst: str  # the tensor with that factor


@dataclass(frozen=True)
class InputOutside:
    row: int
    input: str
    low: float  # the row's min and max
    high: float
    others_low: float  # the other rows' min and max
    others_high: float


@dataclass(frozen=True)
class CalibrationCheck:
    rows: int  # rows given
    kept: tuple[int, ...]  # the 0-based indices of the rows handed to quantization
    outliers: tuple[OutlierRow, ...] = ()
    constant: tuple[int, ...] = ()
    outside: tuple[InputOutside, ...] = ()
    tensors: int = 0  # tensors checked
    skipped: str = ""  # why the per-tensor check did not run ('' = it ran)
    kept_outliers: bool = False

    @property
    def too_few(self) -> bool:
        return self.rows < MIN_ROWS

    def warnings(self) -> list[str]:
        """One line per finding, for a `warning:` line each."""
        out: list[str] = []
        if self.too_few:
            out.append(
                f"{self.rows} calibration rows: fewer than {MIN_ROWS}; ranges from so few rows follow each row's "
                "quirks (a few hundred representative rows is usual)"
            )
        for o in self.outliers:
            what = "kept (--keep-outlier-rows)" if self.kept_outliers else "left out of calibration"
            out.append(
                f"calibration row {o.row} sets the range of {o.tensors} tensor{'s' * (o.tensors != 1)}, "
                f"{o.factor:.0f}x the other rows (at {o.worst}): {what}"
            )
        if self.outliers and not self.kept_outliers:
            out.append(f"calibrating on {len(self.kept)} of {self.rows} rows (--keep-outlier-rows keeps them all)")
        for r in self.constant:
            out.append(f"calibration row {r} is constant (every input value equal): it says nothing about ranges")
        for x in self.outside:
            out.append(
                f"calibration row {x.row}: input '{x.input}' spans [{x.low:.4g}, {x.high:.4g}], far outside the "
                f"other rows' [{x.others_low:.4g}, {x.others_high:.4g}]"
            )
        if self.skipped:
            out.append(f"calibration rows not checked per tensor: {self.skipped}")
        return out


def per_row_max_abs(reference: Path, feeds: Sequence[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per float tensor (the inputs and every value tensor), the max finite |x| of each row: one run of the FP32
    reference per row in ONNX Runtime, as written (no graph optimisation), every value tensor exposed."""
    from trtverify.graph.lightmodel import EXTERNAL_FOLDER, LightModel
    from trtverify.util.deps import quiet_onnxruntime, require

    ort = require("onnxruntime", "checking calibration rows")
    quiet_onnxruntime()
    light = LightModel(Path(reference))
    names = light.info.value_tensors()
    run = light.with_outputs(names)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry(EXTERNAL_FOLDER, str(run.folder))
    session = ort.InferenceSession(run.data, sess_options=so, providers=["CPUExecutionProvider"])
    outs = [o.name for o in session.get_outputs()]
    declared = {i.name for i in session.get_inputs()}
    table: dict[str, np.ndarray] = {}
    for i, feed in enumerate(feeds):
        feed = {k: v for k, v in feed.items() if k in declared}
        values = dict(zip(outs, session.run(outs, feed)))
        values.update(feed)
        for name, arr in values.items():
            arr = np.asarray(arr)
            if arr.dtype.kind != "f" or not arr.size:
                continue
            a = np.abs(arr[np.isfinite(arr)]) if not np.isfinite(arr).all() else np.abs(arr)
            col = table.setdefault(name, np.zeros(len(feeds)))
            col[i] = float(a.max()) if a.size else 0.0
    return table


def find_outliers(table: dict[str, np.ndarray], factor: float = OUTLIER_FACTOR) -> list[OutlierRow]:
    """Rows whose max |x| of a tensor is more than `factor` times the median of the other rows' (see module)."""
    hits: dict[int, list[tuple[float, str]]] = {}
    for name, col in table.items():
        n = len(col)
        if n < 3:
            continue
        for i in np.flatnonzero(col > factor * np.median(col)):
            others = np.median(np.delete(col, i))
            if others > 0 and col[i] > factor * others:
                hits.setdefault(int(i), []).append((float(col[i] / others), name))
    return [OutlierRow(row=i, tensors=len(v), factor=max(v)[0], worst=max(v)[1]) for i, v in sorted(hits.items())]


def constant_rows(feeds: Sequence[dict[str, np.ndarray]]) -> list[int]:
    """Rows whose every input holds one value (inputs of one element do not count)."""
    out = []
    for i, feed in enumerate(feeds):
        arrays = [np.asarray(a) for a in feed.values() if np.asarray(a).size > 1]
        if arrays and all(np.all(a == a.flat[0]) for a in arrays):
            out.append(i)
    return out


def inputs_outside(feeds: Sequence[dict[str, np.ndarray]], factor: float = INPUT_FACTOR) -> list[InputOutside]:
    """Per float input, the rows that go beyond the other rows' [min, max] by more than `factor` x its span
    (integer inputs, token ids and the like, are left alone: their rows' ranges say nothing about scales)."""
    if len(feeds) < 3:
        return []
    out = []
    for name in feeds[0]:
        if np.asarray(feeds[0][name]).dtype.kind != "f":
            continue
        try:
            lo = np.array([float(np.min(f[name])) for f in feeds])
            hi = np.array([float(np.max(f[name])) for f in feeds])
        except (KeyError, TypeError, ValueError):
            continue
        for i in range(len(feeds)):
            olo, ohi = float(np.delete(lo, i).min()), float(np.delete(hi, i).max())
            span = ohi - olo
            beyond = max(hi[i] - ohi, olo - lo[i], 0.0)
            if beyond > 0 and beyond > factor * span:
                out.append(InputOutside(i, name, float(lo[i]), float(hi[i]), olo, ohi))
    return out


def check_rows(reference: Path, feeds: list[dict[str, np.ndarray]], keep_outliers: bool) -> CalibrationCheck:
    """Lint the calibration rows `feeds` of `reference` (see module); the rows to calibrate on are
    `[feeds[i] for i in check.kept]`: all of them with `keep_outliers`, else all but the outlier rows."""
    skipped = ""
    table: dict[str, np.ndarray] = {}
    try:
        table = per_row_max_abs(reference, feeds)
    except Exception as exc:  # advisory: a graph ONNX Runtime cannot run alone (plugins) is quantized unchecked
        skipped = f"{Path(reference).name} does not run in ONNX Runtime here ({str(exc).splitlines()[0][:200]})"
    outliers = find_outliers(table)
    bad = {o.row for o in outliers}
    kept = tuple(i for i in range(len(feeds)) if keep_outliers or i not in bad)
    return CalibrationCheck(
        rows=len(feeds),
        kept=kept,
        outliers=tuple(outliers),
        constant=tuple(constant_rows(feeds)),
        outside=tuple(inputs_outside(feeds)),
        tensors=len(table),
        skipped=skipped,
        kept_outliers=keep_outliers,
    )
