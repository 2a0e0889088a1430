"""Keep chosen nodes of a lowered candidate in FP32, whatever lowered them.

A candidate lowers a node in one of three ways, or several at once: Q/DQ pairs on its inputs
(ONNX Runtime's `quantize_static`, ModelOpt's INT8/FP8/INT4), FP16/BF16 types (AutoCast, an FP16
converter, ModelOpt's `high_precision_dtype=fp16` rest), or constants stored narrow (FP16 weights,
INT8 weights read by a DequantizeLinear). "Keep node N in FP32" undoes all of them for N alone:

- each activation input reads the value before any Q/DQ pair and before any cast an FP32 value went
  through on its way to N, and is cast to FP32 where that value is FP16/BF16 (one Cast per tensor,
  shared by every kept reader);
- each float constant input is the reference's FP32 constant (`<name>__fp32`), whatever the
  candidate stored (an FP16 copy clipped to 65504, an INT8 weight behind a DequantizeLinear);
- each output the candidate holds in FP16/BF16 is computed in FP32 under `<name>__fp32` and cast
  back to its type under its own name, so every reader, and the pairing with the reference, is
  unchanged.

Nothing else changes and nothing is recalibrated: a keep-list search changes only what it keeps.
Q/DQ pairs and casts nobody reads any more are removed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trtverify.graph.onnxgraph import CAST_OPS, QDQ_OPS, GraphIndex, elem_types

NARROW = (10, 16)  # onnx.TensorProto.FLOAT16, BFLOAT16
FLOAT = 1  # onnx.TensorProto.FLOAT
# nodes whose element type is an attribute: keeping them in FP32 means nothing
TYPED_OPS = frozenset({"Cast", "CastLike", "RandomNormal", "RandomUniform", "EyeLike", "ConstantOfShape"})


def _before_lowering(g: GraphIndex, name: str, types: dict[str, int]) -> str:
    """The value `name` was made from before Q/DQ pairs and casts of an FP32 value lowered it."""
    for _ in range(16):  # bounded: a malformed cyclic graph cannot hang the rewrite
        p = g.producers.get(name)
        if p is None:
            return name
        node = g.nodes[p.index]
        if node.op_type == "DequantizeLinear":
            q = g.producers.get(node.input[0])
            if q is None or q.op_type != "QuantizeLinear":
                return name  # a stored quantised value, not an activation
            name = g.nodes[q.index].input[0]
        elif node.op_type in CAST_OPS and node.input and types.get(node.input[0]) == FLOAT:
            name = node.input[0]
        else:
            return name
    return name


def lowered_nodes(candidate: Any, reference: Any) -> list[str]:
    """Candidate nodes that keeping in FP32 can change: named like a reference node of the same op, and reading a
    DequantizeLinear output or computing in FP16/BF16 (inputs or outputs), in topological order."""
    g = GraphIndex.from_model(candidate)
    ref_ops = {n.name: n.op_type for n in reference.graph.node if n.name}
    types = elem_types(candidate)
    out = []
    for i, n in enumerate(g.nodes):
        if n.op_type in QDQ_OPS or n.op_type in TYPED_OPS or ref_ops.get(n.name) != n.op_type:
            continue
        reads_dq = any((p := g.producers.get(x)) is not None and p.op_type == "DequantizeLinear" for x in n.input)
        narrow = any(types.get(t) in NARROW for t in [*n.input, *n.output] if t)
        if reads_dq or narrow:
            out.append(g.label(i))
    return out


def keep_fp32(candidate: Any, reference: Any, keep: Iterable[str], types: dict[str, int] | None = None) -> Any:
    """A copy of `candidate` where the nodes named in `keep` compute in FP32 (see the module docstring). `types`:
    the candidate's `elem_types`, where a caller making many keep-lists of one candidate read them once."""
    import onnx
    from onnx import helper

    keep = set(keep)
    g = GraphIndex.from_model(candidate)
    missing = sorted(keep - {n.name for n in g.nodes if n.name})
    if missing:
        raise ValueError(f"keep names nodes the model does not have: {', '.join(missing[:5])}")
    ref = GraphIndex.from_model(reference)
    ref_by_name = {n.name: n for n in ref.nodes if n.name}
    types = elem_types(candidate) if types is None else types
    out = onnx.ModelProto()
    out.CopyFrom(candidate)
    graph = out.graph
    have = {t.name for t in graph.initializer}
    to_fp32: dict[str, str] = {}  # narrow tensor -> its FP32 cast, shared by the kept readers
    nodes = []
    for node in g.nodes:
        node = _copy(node)
        if node.name not in keep or node.op_type in TYPED_OPS:
            nodes.append(node)
            continue
        twin = ref_by_name.get(node.name)
        before = []
        for pos, name in enumerate(node.input):
            if not name:
                continue
            weight = twin.input[pos] if twin is not None and pos < len(twin.input) else None
            const = ref.constants.get(weight) if weight else None
            if const is not None and const.data_type == FLOAT:
                fp32 = f"{weight}__fp32"  # under its own name: a quantizer may have reused the reference's
                if fp32 not in have:
                    tensor = onnx.TensorProto()
                    tensor.CopyFrom(const)
                    tensor.name = fp32
                    graph.initializer.append(tensor)
                    have.add(fp32)
                node.input[pos] = fp32
                continue
            source = _before_lowering(g, name, types)
            if types.get(source) in NARROW:
                if source not in to_fp32:
                    to_fp32[source] = f"{source}__to_fp32"
                    before.append(
                        helper.make_node("Cast", [source], [to_fp32[source]], name=f"{source}__to_fp32", to=FLOAT)
                    )
                source = to_fp32[source]
            node.input[pos] = source
        after = []
        for k, o in enumerate(node.output):
            if o and types.get(o) in NARROW:
                node.output[k] = f"{o}__fp32"
                after.append(helper.make_node("Cast", [f"{o}__fp32"], [o], name=f"{o}__from_fp32", to=types[o]))
        nodes += [*before, node, *after]
    del graph.node[:]
    graph.node.extend(nodes)
    prune(out)
    return out


def _copy(node: Any) -> Any:
    import onnx

    n = onnx.NodeProto()
    n.CopyFrom(node)
    return n


def prune(model: Any) -> None:
    """Drop nodes whose outputs nobody reads (and initializers nobody reads), keeping graph outputs."""
    graph = model.graph
    wanted = {o.name for o in graph.output}
    while True:
        read = {i for n in graph.node for i in n.input} | wanted
        dead = [n for n in graph.node if not any(o in read for o in n.output if o)]
        if not dead:
            break
        for n in dead:
            graph.node.remove(n)
    read = {i for n in graph.node for i in n.input}
    unused = [t for t in graph.initializer if t.name not in read]
    for t in unused:
        graph.initializer.remove(t)
