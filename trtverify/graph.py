"""Static facts about ONNX graphs that the layerwise stage needs.

- which tensors carry values derived from the inputs (shape-only and constant tensors are
  left out of comparisons: their "error" says nothing about accuracy);
- who produces each tensor, in topological order;
- which candidate-only tensors were inserted by lowering (Q/DQ pairs, casts of FP16
  converters), so they can be listed as such instead of as mismatches;
- the *isolation model*: every candidate node (with the Q/DQ/Cast nodes that feed it)
  re-wired to take the reference's values as inputs, so one run yields each node's own
  error, separated from the error it inherited.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ops whose outputs describe a tensor's shape, not its values
SHAPE_OPS = {"Shape", "Size"}
QDQ_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"}
CAST_OPS = {"Cast", "CastLike"}


@dataclass(frozen=True)
class Producer:
    index: int  # topological position of the node
    node: str
    op_type: str


@dataclass
class GraphInfo:
    """Names and structure of one ONNX graph (weights not needed)."""

    inputs: list[str]
    outputs: list[str]
    initializers: set[str]
    nodes: list[Any]  # onnx.NodeProto in topological order
    producers: dict[str, Producer] = field(default_factory=dict)
    consumers: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))

    @classmethod
    def from_model(cls, model: Any) -> GraphInfo:
        g = model.graph
        inits = {i.name for i in g.initializer} | {i.name for i in g.sparse_initializer}
        inputs = [i.name for i in g.input if i.name not in inits]
        nodes = topological(list(g.node), set(inputs) | inits)
        info = cls(inputs, [o.name for o in g.output], inits, nodes)
        for idx, n in enumerate(nodes):
            for o in n.output:
                if o:
                    info.producers[o] = Producer(idx, n.name or f"{n.op_type}_{idx}", n.op_type)
            for i in n.input:
                if i:
                    info.consumers[i].append(idx)
        return info

    def value_tensors(self) -> list[str]:
        """Node outputs whose values depend on the graph inputs, in topological order.

        Outputs of Shape/Size, and anything computed only from them or from constants,
        are left out (they are shape arithmetic, not activations).
        """
        live = set(self.inputs)
        out: list[str] = []
        for n in self.nodes:
            if n.op_type in SHAPE_OPS:
                continue
            if any(i in live for i in n.input if i) or _subgraph_reads(n, live):
                for o in n.output:
                    if o:
                        live.add(o)
                        out.append(o)
        return out

    def inserted_kind(self, tensor: str) -> str:
        """Why a candidate-only tensor exists: 'qdq', 'cast' or 'other'."""
        p = self.producers.get(tensor)
        if p is None:
            return "other"
        if p.op_type in QDQ_OPS:
            return "qdq"
        if p.op_type in CAST_OPS:
            return "cast"
        return "other"


def _subgraph_reads(node: Any, live: set[str]) -> bool:
    """Control-flow nodes (If/Loop/Scan) may read outer tensors only inside their bodies."""
    import onnx

    for attr in node.attribute:
        graphs = (
            [attr.g]
            if attr.type == onnx.AttributeProto.GRAPH
            else list(attr.graphs)
            if attr.type == onnx.AttributeProto.GRAPHS
            else []
        )
        for sub in graphs:
            for sn in sub.node:
                if any(i in live for i in sn.input):
                    return True
    return False


def topological(nodes: list[Any], available: set[str]) -> list[Any]:
    """Nodes in an order where every input is produced before use (FP16 converters break order)."""
    produced_by = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    known = set(available)
    done = [False] * len(nodes)
    order: list[Any] = []
    pending = list(range(len(nodes)))
    while pending:
        progressed = False
        rest = []
        for i in pending:
            n = nodes[i]
            if all((not x) or x in known or x not in produced_by for x in n.input):
                order.append(n)
                known.update(o for o in n.output if o)
                done[i] = True
                progressed = True
            else:
                rest.append(i)
        if not progressed:  # a cycle or a dangling reference: keep file order for the rest
            order.extend(nodes[i] for i in rest)
            break
        pending = rest
    return order


def has_subgraph(node: Any) -> bool:
    import onnx

    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


# ----------------------------------------------------------------------------- isolation


@dataclass(frozen=True)
class Group:
    """One candidate node plus the inserted nodes (Q/DQ, casts) between it and reference tensors."""

    key: str  # the candidate node's name
    nodes: tuple[int, ...]  # indices into GraphInfo.nodes, topological
    boundary: tuple[str, ...]  # reference tensors it reads (fed with reference values)
    outputs: tuple[str, ...]  # reference tensors it produces (compared with reference values)


def isolation_groups(
    cand: GraphInfo, reference_tensors: set[str], wanted: Iterable[str]
) -> tuple[list[Group], dict[str, str]]:
    """Groups producing each tensor in `wanted`; and tensors that could not be isolated, with why.

    A group starts at the producer of a wanted tensor and walks back through inputs that the
    reference does not have (so they were inserted by lowering), stopping at reference
    tensors (fed from the reference) and initializers.
    """
    groups: dict[int, Group] = {}
    skipped: dict[str, str] = {}
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
            if has_subgraph(node):
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
        outs = tuple(o for o in node.output if o in reference_tensors)
        groups[p.index] = Group(
            node.name or f"{node.op_type}_{p.index}", tuple(sorted(members)), tuple(sorted(boundary)), outs
        )
    return list(groups.values()), skipped


def build_isolation_model(
    light_model: Any, cand: GraphInfo, groups: Sequence[Group], input_dtypes: dict[str, int]
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
            n.name = prefix + (src.name or src.op_type)
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


class LightModel:
    """A model whose weights live in one external file, so graph surgery copies no weights.

    Each variant (extra outputs, isolation model) is saved next to the weights file and
    ONNX Runtime loads it from that path.
    """

    def __init__(self, path: Path, workdir: Path):
        import onnx

        from trtverify.onnxwire import externalize

        self.dir = Path(tempfile.mkdtemp(prefix="model-", dir=workdir))
        externalize(Path(path), self.dir / "model.onnx")  # one tensor at a time: no full copy of the weights in memory
        self.model = onnx.load(str(self.dir / "model.onnx"), load_external_data=False)
        self.info = GraphInfo.from_model(self.model)
        self._count = 0

    def save_variant(self, model: Any) -> Path:
        import onnx

        self._count += 1
        path = self.dir / f"variant{self._count}.onnx"
        onnx.save(model, str(path))
        return path

    def with_outputs(self, names: Sequence[str]) -> Path:
        """The model with `names` added as untyped graph outputs (ONNX Runtime infers their type)."""
        import onnx

        m = onnx.ModelProto()
        m.CopyFrom(self.model)
        existing = {o.name for o in m.graph.output}
        for n in names:
            if n not in existing:
                vi = onnx.ValueInfoProto()
                vi.name = n
                m.graph.output.append(vi)
        return self.save_variant(m)
