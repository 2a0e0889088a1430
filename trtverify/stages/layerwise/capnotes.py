"""Notes on a captured candidate's comparison that only its tensors can give."""

from __future__ import annotations

from collections.abc import Sequence

from trtverify.config.models import Candidate
from trtverify.stages.layerwise.models import Row
from trtverify.util.words import count

LOWER = {"float16": "fp16", "bfloat16": "bf16"}


def lower_than_checked(spec: Candidate, precision: str, rows: Sequence[Row]) -> str:
    """Where the capture holds FP16/BF16 tensors but the checks are FP32's (no `precision:`, the ONNX model the
    engine was built from is FP32): the engine computed in lower precision than its graph says (--fp16), and the
    FP32 checks fail it for its arithmetic, not for a bug. Empty otherwise."""
    if spec.precision is not None or precision != "fp32":
        return ""
    lower = [LOWER[r.candidate_dtype] for r in rows if r.candidate_dtype in LOWER]
    if not lower:
        return ""
    kind = max(set(lower), key=lower.count)
    return (f"; {len(lower)} of {count(len(rows), 'tensor')} compared were captured as {kind.upper()}, but the "
            f"checks are FP32's: an engine built with --{kind} computes in {kind.upper()}; give the candidate "
            f"`precision: {kind}` (or --check) for its default checks (docs/captured.md)")  # fmt: skip


def with_precision_note(ran_as: str | None, spec: Candidate, precision: str, rows: Sequence[Row]) -> str | None:
    """A captured candidate's `ran_as` with `lower_than_checked`'s note; any other candidate's as it is."""
    return (ran_as or "") + lower_than_checked(spec, precision, rows) if spec.capture is not None else ran_as


__all__ = ["lower_than_checked", "with_precision_note"]
