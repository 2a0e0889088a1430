"""`--method auto`: the INT8 calibration method chosen per model on calibration rows it was not calibrated on.

The last quarter of the rows (at least one) is held out; the model is calibrated with each of ONNX Runtime's
methods (minmax, entropy, percentile) on the rest, and each candidate runs against the FP32 reference on the
held-out rows in ONNX Runtime (repair/evaluate.py: every value tensor computed, the figure read on the graph
outputs). The figure of a method is its worst rel_l2 over the graph's outputs and held-out rows; the smallest wins
(the first in METHODS on a tie) and the final model is calibrated with it on all rows.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.convert.int8 import METHODS, quantize
from trtverify.repair.evaluate import Reference, evaluate
from trtverify.util.errors import UsageError

HOLD_OUT = 0.25  # the fraction of calibration rows held out to judge each method


@dataclass(frozen=True)
class Choice:
    """What `auto` chose and why: each method's figure (worst rel_l2 over outputs on the held-out rows)."""

    method: str
    figures: dict[str, float] = field(default_factory=dict)
    fit_rows: int = 0
    held_out: int = 0
    note: str | None = None  # why nothing was compared (too few rows)

    def record(self) -> dict[str, Any]:
        """What the model's metadata says of it (convert/int8.py record_calibration); JSON (null: non-finite)."""
        return {
            "method": self.method,
            "chosen_by": "auto",
            "calibration_rows": self.fit_rows + self.held_out,
            "held_out_rows": self.held_out,
            # worst rel_l2 over the graph outputs on the held-out rows, per method
            "figures": {m: (v if math.isfinite(v) else None) for m, v in self.figures.items()},
            **({"note": self.note} if self.note else {}),
        }


def chooser(progress: Callable[[str], None]) -> Callable[..., dict[str, Any]]:
    """`choose` as a suite recipe calls it (convert/recipes.py Chooser): its record, progress lines to `progress`."""

    def run(
        reference: Path, out: Path, calibration: Sequence[dict[str, np.ndarray]], symmetric: bool, per_channel: bool
    ) -> dict[str, Any]:
        choice = choose(reference, out, calibration, symmetric=symmetric, per_channel=per_channel, progress=progress)
        progress(f"calibration method: {choice.method}" + (f" ({choice.note})" if choice.note else ""))
        return choice.record()

    return run


def split(rows: int) -> tuple[int, int]:
    """(rows calibrated on, rows held out): the last quarter, at least one, held out; (rows, 0) when fewer than 2."""
    if rows < 2:
        return rows, 0
    held = max(1, int(rows * HOLD_OUT))
    return rows - held, held


def choose(
    reference: Path,
    out: Path,
    calibration: Sequence[dict[str, np.ndarray]],
    *,
    symmetric: bool = True,
    per_channel: bool = True,
    exclude: Iterable[str] = (),
    progress: Callable[[str], None] = lambda _: None,
) -> Choice:
    """Calibrate `reference` with the method whose held-out error is smallest, written to `out`."""
    opts: dict[str, Any] = {"symmetric": symmetric, "per_channel": per_channel, "exclude": list(exclude),
                            "progress": progress}  # fmt: skip
    fit, held = split(len(calibration))
    if held == 0:
        note = f"{len(calibration)} calibration row(s): too few to hold any out, so minmax without comparing"
        quantize(reference, out, calibration, **opts)
        return Choice("minmax", {}, fit, 0, note)
    test = list(calibration[fit:])
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="trtverify-calibrate-") as tmp:
        try:
            ref = Reference.run(reference, test, workdir=Path(tmp))  # on disk past the memory budget
        except UsageError as exc:  # e.g. a plugin node with no reference: nothing to judge the methods on
            note = f"the reference cannot run here to compare methods ({exc}), so minmax without comparing"
            quantize(reference, out, calibration, **opts)
            return Choice("minmax", {}, len(calibration), 0, note)
        for method in METHODS:
            progress(f"calibrating with {method} on rows 0-{fit - 1}, judging on rows {fit}-{len(calibration) - 1}")
            cand = quantize(reference, Path(tmp) / f"{method}.onnx", calibration[:fit], method=method, **opts)
            ev = evaluate(ref, cand, test, [], "outputs", ())
            worst = max((ev.errors.get(o, math.inf) for o in ref.outputs), default=math.inf)
            figures[method] = math.inf if ev.nonfinite or worst != worst else worst
            progress(f"{method}: worst rel_l2 over outputs {figures[method]:.4g}")
    best = min(METHODS, key=lambda m: figures[m])
    progress(f"calibrating with {best} on all {len(calibration)} rows")
    quantize(reference, out, calibration, method=best, **opts)
    return Choice(best, figures, fit, held)
