"""The terminal line of a quantized candidate's range report (stages/layerwise/ranges.py)."""

from __future__ import annotations

from trtverify.stages.layerwise.models import LayerwiseCandidate, LayerwiseResult
from trtverify.util.words import count


def range_lines(cand: LayerwiseCandidate) -> list[str]:
    rows = cand.ranges or []
    if not rows:
        return []
    clipping = [r for r in rows if r.clipped_fraction > 0]
    line = f"          {cand.name}: calibrated ranges of {count(len(rows), 'quantized tensor')}: "
    if clipping:
        w = clipping[0]
        line += (
            f"{len(clipping)} clip the reference's values (worst {w.tensor}: {100 * w.clipped_fraction:.3g}% beyond "
            f"±{w.limit:.4g}, reference max {w.reference_max_abs:.4g})"
        )
    else:
        line += "none clips the reference's values"
    coarse = max((r for r in rows if r.step_over_median is not None), key=lambda r: r.step_over_median or 0.0,
                 default=None)  # fmt: skip
    if coarse is not None:
        line += f"; coarsest step {coarse.tensor} ({coarse.step_over_median:.3g}x its median nonzero |x|)"
    return [line]


def cache_lines(s: LayerwiseResult) -> list[str]:
    """backends.tensorrt.calibration_cache against the reference: how many names matched, the worst clipping."""
    cc = s.calibration_cache
    if cc is None:
        return []
    line = f"          calibration cache {cc.path}: {cc.matched} of {count(cc.entries, 'tensor range')} judged"
    if cc.unmatched:
        line += f" ({cc.unmatched} named like no reference tensor, e.g. {', '.join(cc.unmatched_examples[:3])})"
    clipping = [r for r in cc.rows if r.clipped_fraction > 0]
    if clipping:
        w = clipping[0]
        line += (
            f": {len(clipping)} clip the reference's values (worst {w.tensor}, line {w.cache_line}: "
            f"{100 * w.clipped_fraction:.3g}% beyond ±{w.limit:.4g}, reference max {w.reference_max_abs:.4g})"
        )
    elif cc.rows:
        line += ": none clips the reference's values"
    coarse = max((r for r in cc.rows if r.step_over_median is not None), key=lambda r: r.step_over_median or 0.0,
                 default=None)  # fmt: skip
    if coarse is not None:
        line += f"; coarsest step {coarse.tensor} ({coarse.step_over_median:.3g}x its median nonzero |x|)"
    return [line]
