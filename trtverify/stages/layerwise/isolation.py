"""The isolation model: every candidate node (with the Q/DQ/Cast nodes lowering put before it)
re-wired to take the reference's values as inputs, so one run yields each node's own error,
separated from the error it inherited."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from trtverify.graph.onnxgraph import GraphIndex


@dataclass(frozen=True)
class Group:
    """One candidate node plus the inserted nodes (Q/DQ, casts) between it and reference tensors."""

    key: str  # the candidate node's name
    nodes: tuple[int, ...]  # indices into GraphInfo.nodes, topological
    boundary: tuple[str, ...]  # reference tensors it reads (fed with reference values)
    outputs: tuple[str, ...]  # reference tensors it produces (compared with reference values)


def isolation_groups(
    cand: GraphIndex, reference_tensors: set[str], wanted: Iterable[str]
) -> tuple[list[Group], dict[str, str]]:
    """Groups producing each tensor in `wanted`; and tensors that could not be isolated, with why.

    A group starts at the producer of a wanted tensor and walks back through inputs that the
    reference does not have (so they were inserted by lowering), stopping at reference
    tensors (fed from the reference) and initializers.
    """
    groups: dict[int, Group] = {}
    skipped: dict[str, str] = {}
    wanted = list(wanted)
    wanted_set = set(wanted)
    ref_or_input = set(reference_tensors) | set(cand.inputs)
    for t in wanted:
        p = cand.producers.get(t)
        if p is None:
            skipped[t] = "not produced by a node of the candidate"
            continue
        if p.index in groups:
            continue
        members: set[int] = set()
        boundary: set[str] = set()
        stack = [p.index]
        ok = True
        while stack:
            idx = stack.pop()
            if idx in members:
                continue
            node = cand.nodes[idx]
            if idx in cand.subgraph_nodes:
                ok = False
                skipped[t] = f"{node.op_type} has subgraphs: not isolated"
                break
            members.add(idx)
            for i in node.input:
                if not i or i in cand.initializers:
                    continue
                if i in ref_or_input:
                    boundary.add(i)
                elif i in cand.producers:
                    stack.append(cand.producers[i].index)
                else:
                    ok = False
                    skipped[t] = f"input '{i}' has no producer"
                    break
            if not ok:
                break
        if not ok:
            continue
        node = cand.nodes[p.index]
        outs = tuple(o for o in node.output if o in wanted_set)
        groups[p.index] = Group(cand.label(p.index), tuple(sorted(members)), tuple(sorted(boundary)), outs)
    return list(groups.values()), skipped


def build_isolation_model(
    light_model: Any, cand: GraphIndex, groups: Sequence[Group], input_dtypes: dict[str, int]
) -> tuple[Any, dict[str, str]]:
    """A model running every group side by side on fresh inputs named like the reference tensors.

    Returns the model and a map {isolated output name -> reference tensor name}. Graph
    outputs are declared without type or shape: ONNX Runtime infers them, so nothing
    declared can be wrong. Initializers are shared (the light model keeps them external).
    """
    import onnx
    from onnx import helper

    nodes = []
    out_map: dict[str, str] = {}
    boundary: set[str] = set()
    for gi, grp in enumerate(groups):
        prefix = f"iso{gi}::"
        internal = {o for idx in grp.nodes for o in cand.nodes[idx].output if o}
        for idx in grp.nodes:
            src = cand.nodes[idx]
            n = onnx.NodeProto()
            n.CopyFrom(src)
            n.name = prefix + cand.label(idx)  # unnamed nodes: op type and index, unique in the group
            n.ClearField("input")
            n.ClearField("output")
            n.input.extend([(prefix + i) if i in internal else i for i in src.input])
            n.output.extend([(prefix + o) if o else o for o in src.output])
            nodes.append(n)
        for o in grp.outputs:
            out_map[prefix + o] = o
        boundary.update(grp.boundary)
    g = light_model.graph
    inputs = [helper.make_tensor_value_info(b, input_dtypes[b], None) for b in sorted(boundary)]
    if light_model.ir_version < 4:  # below IR version 4 every initializer must also be a graph input
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in g.initializer
                   if t.name not in boundary]  # fmt: skip
    outputs = []
    for name in out_map:
        vi = onnx.ValueInfoProto()
        vi.name = name
        outputs.append(vi)
    graph = helper.make_graph(nodes, "trtverify_isolation", inputs, outputs, list(g.initializer))
    graph.sparse_initializer.extend(g.sparse_initializer)
    model = helper.make_model(graph, opset_imports=list(light_model.opset_import), ir_version=light_model.ir_version)
    model.functions.extend(light_model.functions)
    return model, out_map
