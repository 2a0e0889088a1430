"""The dataflow graph a layerwise candidate carries for the report's graph view (`nodegraph.build`)."""

from __future__ import annotations

from pydantic import Field

from trtverify.util.record import Record, omitted


class NodeGraph(Record):
    """The reference's nodes that compute values (shape arithmetic and constants left out), in topological order,
    as columns of numbers: position i of each list is node i. A node's name, op type and errors are those of its
    rows (the candidate's rows whose topo_index is its `topo`); `unnamed` names the nodes without a row."""

    topo: list[int] = Field(description="each node's topological index in the reference: its rows' topo_index")
    edge_from: list[int] = Field(description="the edges, as positions: the node computing a value ...")
    edge_to: list[int] = Field(description="... and the node reading it (edge i: edge_from[i] -> edge_to[i])")
    local: list[float | None] = Field(
        description="the error each node adds, rel_l2 to 3 digits: by isolate its own error on the reference's "
        "inputs, by amplification its output's rel_l2 less its inputs' largest; inf: non-finite from finite inputs; "
        "null: not measured"
    )
    precisions: list[str] = omitted(list, "what the candidate computes its nodes in (FP16, BF16, INT8, FP32, ...)")
    precision: list[int] = omitted(
        list, "each node's, as a position in precisions; -1: not known (the candidate is no ONNX graph there)"
    )
    marks: dict[str, list[int]] = omitted(
        dict,
        "the nodes (positions) with a mark: plugin (no ONNX op: a TensorRT plugin), kept_fp32 (FP32 in a candidate "
        "of a lower precision), index (its outputs are indices, compared by what they select, not as errors)",
    )
    unnamed: dict[str, list[str]] = omitted(dict, "the nodes without a row (not compared): position -> [name, op type]")
