"""The graph view of a candidate's dataflow graph: its NodeGraph (results.json) joined with its rows' errors, as the
compact JSON graphview.js draws, and the scripts the report inlines for it (dagre lays the graph out).

Each node is one array, [name, op type, topological index, precision, local error, accumulated error, flags]:
errors are rel_l2 to 3 digits (None: not measured; non-finite ones are flags, JSON has no inf).
"""

from __future__ import annotations

import functools
import math
import re
from pathlib import Path
from typing import Any

from trtverify.stages.layerwise.models import LayerwiseCandidate, Row

_HERE = Path(__file__).parent
DAGRE_JS = _HERE / "vendor" / "dagre.min.js"
DAGRE_LICENSE = _HERE / "vendor" / "LICENSE.dagre.md"
GRAPH_JS = _HERE / "graphview.js"

# a node's flags (graphview.js reads the same bits)
FAIL, PLUGIN, KEPT, INDEX, UNCOMPARED, ACC_NONFINITE, LOCAL_NONFINITE = 1, 2, 4, 8, 16, 32, 64
MARKS = {"plugin": PLUGIN, "kept_fp32": KEPT, "index": INDEX}


def _digits(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(f"{value:.3g}")


def _accumulated(rows: list[Row]) -> tuple[float | None, int]:
    """A node's output error: the largest rel_l2 of its compared rows; and its flags from them."""
    flags, worst = 0, None
    compared = [row for row in rows if row.not_comparable is None]
    if not compared:
        return None, UNCOMPARED
    for row in compared:
        if not row.passed:
            flags |= FAIL
        if row.nonfinite_mismatch:
            flags |= ACC_NONFINITE
        v = row.metrics.get("rel_l2")
        if v is not None and math.isfinite(v):
            worst = v if worst is None else max(worst, v)
        elif v is not None:
            flags |= ACC_NONFINITE
    return _digits(worst), flags


def graph_data(cand: LayerwiseCandidate, row_prefix: str) -> dict[str, Any] | None:
    """What graphview.js needs for one candidate; None without a graph (results of an older version)."""
    g = cand.graph
    if g is None or not g.topo:
        return None
    by_topo: dict[int, list[Row]] = {}
    for row in cand.rows:
        by_topo.setdefault(row.topo_index, []).append(row)
    marks = [0] * len(g.topo)
    for mark, positions in g.marks.items():
        for pos in positions:
            marks[pos] |= MARKS.get(mark, 0)
    nodes = []
    for pos, topo in enumerate(g.topo):
        rows = by_topo.get(topo, [])
        name, op = (rows[0].node or "", rows[0].op_type or "") if rows else tuple(g.unnamed.get(str(pos), ["", ""]))
        acc, flags = _accumulated(rows)
        local = g.local[pos]
        if local is not None and not math.isfinite(local):
            flags |= LOCAL_NONFINITE
        kind = g.precision[pos] if pos < len(g.precision) else -1
        precision = g.precisions[kind] if kind >= 0 else None
        nodes.append([name, op, topo, precision, _digits(local), acc, flags | marks[pos]])
    at = {topo: pos for pos, topo in enumerate(g.topo)}
    fd = cand.first_divergence
    return {
        "nodes": nodes,
        "from": g.edge_from,
        "to": g.edge_to,
        "first": at.get(fd.topo_index) if fd is not None else None,
        "roots": [at[rc.topo_index] for rc in cand.root_causes if rc.topo_index in at],
        "row": row_prefix,
        "method": cand.root_cause_method,
    }


def _inlinable(path: Path, text: str) -> str:
    text = re.sub(r"\n//# sourceMappingURL=\S+\s*$", "\n", text)  # the map is not shipped
    bad = [s for s in ("</script", "<!--", "<script") if s in text.lower()]
    if bad:
        raise RuntimeError(f"{path} contains {bad}: it cannot be inlined in a <script> element")
    return text


@functools.lru_cache(maxsize=1)
def graph_js() -> str:
    """dagre with its licence, and the view's script: inlined into a report only when it has a graph to draw."""
    dagre = DAGRE_JS.read_text(encoding="utf-8").replace(
        "/*! For license information please see dagre.min.js.LEGAL.txt */", ""
    )  # the licence itself goes in instead
    licence = DAGRE_LICENSE.read_text(encoding="utf-8").replace("*/", "* /")
    return "\n".join(
        [f"/*! {licence} */", _inlinable(DAGRE_JS, dagre), _inlinable(GRAPH_JS, GRAPH_JS.read_text(encoding="utf-8"))]
    )
