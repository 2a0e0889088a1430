"""The reference's dataflow graph with what the report's graph view colours and marks on it (`NodeGraph`).

Carried in results.json, not read from the model when the report is rendered: a report is re-rendered where the
models are not (a CI artifact, another machine), and the candidate's per-node types and the isolated errors of
every node exist only while the stage runs. Columns of numbers keep it small, and it does not repeat the rows
(a node's tensors, name and op type are its rows', by `topo`): on a 5,000-node model it adds 4 % to results.json.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from trtverify.plugins.onnxops import is_plugin
from trtverify.stages.layerwise.graphmodels import NodeGraph

if TYPE_CHECKING:
    from trtverify.graph.onnxgraph import GraphIndex
    from trtverify.stages.layerwise.models import RootCause, Row

# the ops whose precision an INT8 (FP8, INT4) candidate chooses: an FP32 one among them is kept out of it
COMPUTE_OPS = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul"})
REDUCED_FLOAT = frozenset({"FP16", "BF16"})
REDUCED_INT = frozenset({"INT8", "FP8", "INT4"})
# how the index tensors' rows say they were compared (stages.layerwise.selection)
INDEX_ROWS = "what it selects (index"


def _digits(value: float) -> float | None:
    """rel_l2 to 3 significant digits (the colour needs no more); None for NaN."""
    if value != value:
        return None
    return value if math.isinf(value) or value == 0 else float(f"{value:.3g}")


def _kept_rule(precision: Mapping[str, str]) -> frozenset[str] | None:
    """Which nodes in FP32 are kept out of the candidate's lower precision, as the op types that count (empty: all):
    beside FP16/BF16 nodes every FP32 node; beside INT8 (FP8, INT4) ones the FP32 Conv/Gemm/MatMul (the rest of a
    Q/DQ graph computes in FP32 by design); None: the candidate lowers nothing."""
    found = set(precision.values())
    if found & REDUCED_FLOAT:
        return frozenset()
    return COMPUTE_OPS if found & REDUCED_INT else None


def build(
    graph: GraphIndex, rows: Sequence[Row], causes: Sequence[RootCause], precision: Mapping[str, str] | None
) -> NodeGraph:
    """The graph of `graph` (the reference's): `causes`, every node's ranked error (not only the top few kept);
    `precision`: the candidate's node -> what it computes in (`lint.linter.node_precisions`), None where the
    candidate is not an ONNX graph."""
    precision = precision or {}
    values = graph.value_tensors()
    live = set(values)
    at: dict[int, int] = {}  # topological index -> position
    for t in values:
        at.setdefault(graph.producers[t].index, len(at))
    order = sorted(at, key=at.__getitem__)
    score: dict[int, float] = {}
    for rc in causes:
        p = graph.producers.get(rc.tensor)
        if p is not None and p.index in at and rc.score == rc.score:
            score[p.index] = max(score.get(p.index, -math.inf), rc.score)
    # the candidate node that computes a reference node's value, where a rewrite moved it (else the same name)
    moved = {row.topo_index: row.pairing.candidate_node for row in rows if row.pairing and row.pairing.candidate_node}
    index_rows: dict[int, list[bool]] = {}
    for row in rows:
        index_rows.setdefault(row.topo_index, []).append((row.compared_by or "").startswith(INDEX_ROWS))
    rule = _kept_rule(precision)
    with_rows = {row.topo_index for row in rows}
    kinds: dict[str, int] = {}
    edge_from, edge_to, local, kind_of = [], [], [], []
    marks: dict[str, list[int]] = {}
    unnamed: dict[str, list[str]] = {}
    for pos, idx in enumerate(order):
        node, label = graph.nodes[idx], graph.label(idx)
        for src in dict.fromkeys(at[graph.producers[i].index] for i in node.input if i in live):
            edge_from.append(src)
            edge_to.append(pos)
        local.append(_digits(score[idx]) if idx in score else None)
        kind = precision.get(moved.get(idx, label))
        kind_of.append(-1 if kind is None else kinds.setdefault(kind, len(kinds)))
        kept = kind == "FP32" and rule is not None and (not rule or node.op_type in rule)
        for mark, has in (
            ("plugin", is_plugin(node)),
            ("kept_fp32", kept),
            ("index", all(index_rows.get(idx, [False]))),
        ):
            if has:
                marks.setdefault(mark, []).append(pos)
        if idx not in with_rows:
            unnamed[str(pos)] = [label, node.op_type]
    return NodeGraph(
        topo=order,
        edge_from=edge_from,
        edge_to=edge_to,
        local=local,
        precisions=list(kinds),
        precision=kind_of if kinds else [],
        marks=marks,
        unnamed=unnamed,
    )
