"""The note on saturated fills: tensors where both sides are at their type's extreme (a mask's -inf in the reference,
-65504 in an FP16 candidate or finfo(float32).min in another export), equal by meaning and left out of the metrics
(compare/metrics.py); the verdict rests on what follows them (the Softmax's exact zeros)."""

from __future__ import annotations

from trtverify.compare.checks import saturated_words
from trtverify.stages.layerwise.models import LayerwiseCandidate
from trtverify.util.words import count


def saturation_note(cand: LayerwiseCandidate) -> str | None:
    """'bert_fp16: saturated fill in 6 tensors, first at T: 432 values ... (reference -inf, candidate -65504) ...'."""
    rows = [row for row in cand.rows if row.saturated]
    if not rows:
        return None
    first = rows[0]
    total = sum(row.saturated or 0 for row in rows)
    return (
        f"{cand.name}: saturated fill in {count(len(rows), 'tensor')} ({count(total, 'value')}), first at "
        f"{first.tensor}: {saturated_words(first.saturated or 0, first.saturated_values)}; equal by meaning (a "
        "mask's fill, which a Softmax turns into exact zeros on both sides), left out of the metrics: the tensors "
        "after it decide"
    )


def sided(counts: dict[str, int]) -> dict[str, int]:
    """A row's non-finite counts with both sides named where there is a mismatch, 0 included (absent: a
    results.json older than that)."""
    if counts.get("nonfinite_mismatch"):
        return {"ref_only_nonfinite": 0, "cand_only_nonfinite": 0, **counts}
    return counts
