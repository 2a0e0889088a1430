"""What the layerwise stage adds to its rows: error histograms of the suspects, and each row's lint findings."""

from __future__ import annotations

from trtverify.compare.checks import TensorSeries
from trtverify.lint.findings import LintFinding
from trtverify.stages.layerwise.models import FirstDivergence, RootCause, Row, SuspectHistogram

HISTOGRAM_SUSPECTS = 3  # root causes that get an error histogram, besides the first divergence


def histograms(
    first: FirstDivergence | None, causes: list[RootCause], series: dict[str, TensorSeries], rows: list[Row]
) -> list[SuspectHistogram]:
    """Error histograms of the suspects: the first divergence and the top root causes."""
    reasons: dict[str, list[str]] = {}
    if first is not None:
        reasons.setdefault(first.tensor, []).append("first divergence")
    for rc in causes[:HISTOGRAM_SUSPECTS]:
        reasons.setdefault(rc.tensor, []).append(f"root cause #{rc.rank}")
    by_tensor = {row.tensor: row for row in rows}
    out = []
    for tensor, why in reasons.items():
        h = series[tensor].histogram_record() if tensor in series else None
        if h is None:
            continue
        row = by_tensor[tensor]
        out.append(
            SuspectHistogram(
                **dict(h),
                tensor=tensor,
                node=row.node,
                op_type=row.op_type,
                topo_index=row.topo_index,
                reason=", ".join(why),
            )
        )
    return out


def with_lint(rows: list[Row], findings: list[LintFinding]) -> list[Row]:
    """Each row lists the kinds of the lint findings about its tensor, then about its node."""
    by_node: dict[str, list[str]] = {}
    by_tensor: dict[str, list[str]] = {}
    for f in findings:
        by_node.setdefault(f.node or "", []).append(f.kind)
        if f.tensor is not None:
            by_tensor.setdefault(f.tensor, []).append(f.kind)
    out = []
    for row in rows:
        kinds = list(by_tensor.get(row.tensor, []))
        for kind in by_node.get(row.node or "\0", []):
            if kind not in kinds:
                kinds.append(kind)
        out.append(row.model_copy(update={"lint": kinds}) if kinds else row)
    return out
