"""The framework stage's lines of the terminal summary (registered as its `lines`)."""

from __future__ import annotations

from typing import Any

from trtverify.report.dettext import detection_text


def framework_lines(s: Any) -> list[str]:
    """The boxes of a detection model's outputs: PyTorch's (reference) against ONNX Runtime's."""
    out = []
    for d in getattr(s, "detections", None) or []:
        verdict = "" if d.passed else f"; fails {', '.join(d.failed or [])}"
        out.append(f"          boxes in {', '.join(d.tensors)} ({d.layout}): {detection_text(d)}{verdict}")
    return out
