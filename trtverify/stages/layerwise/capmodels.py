"""The typed result of captured candidates compared with each other (stages/layerwise/consistency.py)."""

from __future__ import annotations

from pydantic import Field

from trtverify.util.record import Record, optional


class CaptureParting(Record):
    """A tensor where two captures differ, in the ONNX graph's topological order."""

    tensor: str
    node: str | None
    op_type: str | None
    topo_index: int
    metrics: dict[str, float] = Field(description="the second capture against the first, the worst feed")
    failed: list[str] | None = optional("the checks both candidates' checks fail on this difference")


class CapturePair(Record):
    """Two captured candidates against each other, on the feeds both captured (matched by the kit's digests)."""

    a: str = Field(description="a captured candidate (taken as the reference of the pair)")
    b: str = Field(description="another captured candidate")
    feeds: int = Field(description="feeds both captured, compared")
    tensors: int = Field(description="tensors both hold, compared")
    identical: bool = Field(description="every tensor compared is bit for bit the same")
    first_difference: CaptureParting | None = Field(description="the first tensor that differs at all")
    first_parting: CaptureParting | None = Field(
        description="the first tensor whose difference breaks both candidates' checks (b judged against a)"
    )
    not_compared: str | None = optional("why the pair was not compared")
