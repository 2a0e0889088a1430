"""What the precision lint reports: one finding per place where a build is likely to change the numbers."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from trtverify.config.findings import LINT_KINDS, Severity
from trtverify.util.record import Record


class LintFinding(Record):
    """One place where the build is likely to change the numbers, said so a user can act on it."""

    kind: str
    severity: Severity
    node: str | None = Field(description="consuming (constants) or producing (activations) ONNX node")
    op_type: str | None
    tensor: str | None
    message: str = Field(description="one sentence with the numbers")
    count: int = Field(default=1, description="elements affected (constants), or 1")
    detail: dict[str, Any] = Field(default_factory=dict)
    tensorrt: bool = Field(default=False, description="TensorRT itself is why: ONNX Runtime runs the model as is")


Found = list[tuple[int, LintFinding]]  # (graph position, finding)


def at(position: int, kind: str, severity: str, message: str, **fields: Any) -> tuple[int, LintFinding]:
    """A finding placed at a graph position (for sorting); `fields`: node, op_type, tensor, count, detail."""
    full = {"node": None, "op_type": None, "tensor": None, "tensorrt": LINT_KINDS.get(kind, False), **fields}
    return position, LintFinding(kind=kind, severity=severity, message=message, **full)
