"""The one index of an ONNX graph, shared by the layerwise stage and the precision lint.

It says, without running anything and without the weights' values being needed:
- the nodes in topological order (FP16 converters break file order), each with a label;
- who produces each tensor and who reads it (with the input position);
- the constants (initializers and Constant nodes);
- which tensors carry values derived from the inputs (shape arithmetic and constants are left
  out of comparisons: their "error" says nothing about accuracy);
- why a tensor exists only in a lowered graph (Q/DQ pairs, casts of FP16 converters).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# ops whose outputs describe a tensor's shape, not its values
SHAPE_OPS = frozenset({"Shape", "Size"})
# quantisation plumbing: the one list of Q/DQ op types
QDQ_OPS = frozenset({"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"})
CAST_OPS = frozenset({"Cast", "CastLike"})


@dataclass(frozen=True)
class Producer:
    index: int  # topological position of the node
    node: str  # its label: the node's name, or '<op_type>_<index>' when it has none
    op_type: str


def values_of(t: Any, folder: Path | None = None) -> Any:
    """Values of a TensorProto (external data memory-mapped from `folder`, the model's); None when they live in
    an external file that cannot be read (no folder given, missing, short or outside the folder)."""
    import onnx
    from onnx import numpy_helper

    from trtverify.graph.onnxwire import read_external

    if t.data_location == onnx.TensorProto.EXTERNAL:
        if folder is None:
            return None  # to_array would read a path relative to the working directory
        try:
            return read_external(t, folder)
        except (OSError, ValueError):
            return None
    try:
        return numpy_helper.to_array(t)
    except Exception:  # a malformed tensor in an untrusted file: reported as unreadable, never a crash
        return None


def subgraphs(node: Any) -> list[Any]:
    """The GraphProto attributes of a node (If branches, Loop/Scan bodies)."""
    import onnx

    out: list[Any] = []
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def nested_nodes(graph: Any) -> Iterator[Any]:
    """Every node of `graph` and of its subgraphs (If branches, Loop/Scan bodies), at any depth, parents first."""
    for node in graph.node:
        yield node
        for sub in subgraphs(node):
            yield from nested_nodes(sub)


def _subgraph_scan(graphs: list[Any]) -> tuple[int, set[str]]:
    """Nodes in `graphs` (recursive) and every tensor name they read."""
    count, names = 0, set()
    for graph in graphs:
        for node in graph.node:
            count += 1
            names.update(i for i in node.input if i)
            c, n = _subgraph_scan(subgraphs(node))
            count, names = count + c, names | n
    return count, names


def _constant_tensor(node: Any) -> Any | None:
    """The float tensor a Constant node holds (None for sparse, integer or string constants)."""
    import onnx

    for a in node.attribute:
        if a.name == "value" and a.type == onnx.AttributeProto.TENSOR:
            return a.t
        if a.name == "value_float":
            return onnx.helper.make_tensor(node.output[0], onnx.TensorProto.FLOAT, [], [a.f])
        if a.name == "value_floats":
            return onnx.helper.make_tensor(node.output[0], onnx.TensorProto.FLOAT, [len(a.floats)], list(a.floats))
    return None


def inferred(model: Any) -> Any:
    """`model` after ONNX shape inference (types and shapes of every tensor it can reach); the model as declared
    where inference cannot read it (custom ops, an untrusted file): what is unknown is simply absent."""
    import onnx

    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - partial types are enough
        return model


def elem_types(model: Any, inferred_model: Any = None) -> dict[str, int]:
    """Element type of every tensor the model declares or shape inference gives (initializers, graph inputs and
    outputs, value_info, Constant nodes). `inferred_model`: the model already inferred (LightModel.inferred),
    so that one inference serves every reader."""
    g = (inferred(model) if inferred_model is None else inferred_model).graph
    types = {t.name: t.data_type for t in g.initializer}
    for vi in [*g.input, *g.output, *g.value_info]:
        if vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    for n in g.node:
        if n.op_type == "Constant" and n.output:
            for a in n.attribute:
                if a.name == "value":
                    types[n.output[0]] = a.t.data_type
    return types


def topological(nodes: list[Any], available: set[str]) -> list[Any]:
    """Nodes in an order where every input is produced before use (stable: file order where it is)."""
    produced_by = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    known = set(available)
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
                progressed = True
            else:
                rest.append(i)
        if not progressed:  # a cycle or a dangling reference: keep file order for the rest
            order.extend(nodes[i] for i in rest)
            break
        pending = rest
    return order


def reachable(start: Iterable[int], step: Callable[[int], Iterable[int]]) -> set[int]:
    """The nodes `step` leads to from `start`, directly or not: its producers, say, for everything upstream (a start
    node is in it only where a path comes back to it). Any graph of numbered nodes: ONNX, an engine's layers."""
    seen: set[int] = set()
    todo = list(start)
    while todo:
        for j in step(todo.pop()):
            if j not in seen:
                seen.add(j)
                todo.append(j)
    return seen


@dataclass
class GraphIndex:
    """Names and structure of one ONNX graph (the main graph; subgraphs are counted, not indexed)."""

    inputs: list[str]  # graph inputs that are not initializers
    outputs: list[str]
    initializers: set[str]
    nodes: list[Any]  # onnx.NodeProto, topological order
    producers: dict[str, Producer] = field(default_factory=dict)
    # tensor -> (node index, input position); position -1: read inside that node's subgraphs
    consumers: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    constants: dict[str, Any] = field(default_factory=dict)  # name -> TensorProto (initializers, Constant nodes)
    subgraph_nodes: dict[int, int] = field(default_factory=dict)  # control-flow node -> nodes in its subgraphs
    folder: Path | None = None  # where its external data lives (a weightless model's: the original files)

    @classmethod
    def from_model(cls, model: Any, folder: Path | None = None) -> GraphIndex:
        g = model.graph
        inits = {i.name for i in g.initializer} | {i.name for i in g.sparse_initializer}
        inputs = [i.name for i in g.input if i.name not in inits]
        nodes = topological(list(g.node), set(inputs) | inits)
        info = cls(inputs, [o.name for o in g.output], inits, nodes, folder=folder)
        info.constants = {t.name: t for t in g.initializer}
        for idx, n in enumerate(nodes):
            for o in n.output:
                if o:
                    info.producers[o] = Producer(idx, info.label(idx), n.op_type)
            for pos, i in enumerate(n.input):
                if i:
                    info.consumers[i].append((idx, pos))
            if n.op_type == "Constant" and n.output:
                t = _constant_tensor(n)
                if t is not None:
                    info.constants[n.output[0]] = t
            subs = subgraphs(n)
            if subs:
                count, names = _subgraph_scan(subs)
                info.subgraph_nodes[idx] = count
                for name in names:  # outer-scope reads: a weight used only inside an If branch is still a weight
                    if name in info.constants or name in info.producers:
                        info.consumers[name].append((idx, -1))
        return info

    def values_of(self, t: Any) -> Any:
        """The values of constant `t` (a TensorProto of this graph), external data read from `folder`; None when
        unreadable."""
        return values_of(t, self.folder)

    def label(self, index: int) -> str:
        n = self.nodes[index]
        return n.name or f"{n.op_type}_{index}"

    def value_tensors(self) -> list[str]:
        """Node outputs whose values depend on the graph inputs, in topological order.

        Outputs of Shape/Size, and anything computed only from them or from constants,
        are left out (they are shape arithmetic, not activations).
        """
        live = set(self.inputs)
        out: list[str] = []
        for idx, n in enumerate(self.nodes):
            if n.op_type in SHAPE_OPS:
                continue
            reads_live = any(i in live for i in n.input if i)
            if reads_live or (idx in self.subgraph_nodes and _subgraph_reads(n, live)):
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
    for sub in subgraphs(node):
        for sn in sub.node:
            if any(i in live for i in sn.input):
                return True
    return False
