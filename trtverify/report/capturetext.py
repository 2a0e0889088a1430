"""Terminal text of captured candidates compared with each other (stage layerwise's `capture_pairs`)."""

from __future__ import annotations

from trtverify.report.format import fmt
from trtverify.stages.layerwise.capmodels import CapturePair
from trtverify.util.words import count


def pair_text(p: CapturePair) -> str:
    """Two captures against each other: where they differ first, and where they part."""
    head = f"{p.a} / {p.b} ({count(p.feeds, 'feed')}, {count(p.tensors, 'tensor')}): "
    if p.not_compared:
        return head + f"not compared: {p.not_compared}"
    if p.first_difference is None:
        return head + "identical, bit for bit"
    part = p.first_parting
    parted = (f"part at {part.tensor} (rel_l2 {fmt(part.metrics.get('rel_l2'))})" if part else "never part beyond "
              "their checks")  # fmt: skip
    return head + f"first differ at {p.first_difference.tensor}, {parted}"
