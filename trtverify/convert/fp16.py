"""FP16 with FP32 islands: an FP32 ONNX model rewritten to compute in FP16 except the nodes kept in FP32.

Why not the converters users have: `onnxruntime.transformers.float16` with `node_block_list` casts
back to FP16 *between* consecutive kept nodes (an overflow inside a kept chain stays) and rounds
the kept nodes' constants through FP16; onnxconverter-common's mixed-precision search produced an
invalid model on a real detector (two nodes named `_output_cast0`). Here:

- every node not kept computes in FP16; kept nodes (and nodes that cannot: subgraphs, ops whose
  ONNX types allow no FP16) compute in FP32; a Cast sits only where a value crosses from one
  island to the other, one per tensor and direction, shared by all readers;
- constants come from the FP32 model: kept nodes read the original values, FP16 nodes a copy
  clipped to ±65504 (what a converter does, and what the lint then reports);
- node and tensor names are kept, so a tensor pairs with the reference by name; graph inputs and
  outputs stay FP32 (an FP16 output is written under `<name>__fp16` and cast to its name);
- unnamed nodes are addressed by their label in the FP32 model (`<op_type>_<topological index>`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from trtverify.graph.onnxgraph import GraphIndex, elem_types

FP16_MAX = 65504.0
# ops whose float inputs the ONNX spec types as float32 only: they stay FP32
FP32_ONLY_OPS = frozenset({"NonMaxSuppression", "RoiAlign", "Range"})
# ops reading or making sequences and optionals: the element type of a sequence is the model's, FP32
CONTAINER_OPS = frozenset({
    "SequenceConstruct", "SequenceInsert", "SequenceAt", "SequenceErase", "SequenceLength", "SequenceEmpty",
    "SplitToSequence", "ConcatFromSequence", "SequenceMap", "Optional", "OptionalGetElement", "OptionalHasElement",
})  # fmt: skip
# float inputs that must stay float32 whatever the node computes in (op -> input positions)
FP32_INPUTS = {"Resize": frozenset({1, 2}), "Upsample": frozenset({1})}
# attributes naming the element type a node produces
DTYPE_ATTRS = {"Cast": "to", "RandomNormal": "dtype", "RandomUniform": "dtype", "EyeLike": "dtype"}


def node_labels(model: Any) -> list[str]:
    """Labels of the model's nodes in topological order: names, or `<op_type>_<index>` for unnamed ones."""
    g = GraphIndex.from_model(model)
    return [g.label(i) for i in range(len(g.nodes))]


def _fp16_tensor(t: Any, name: str) -> Any:
    from onnx import numpy_helper

    values = numpy_helper.to_array(t).astype(np.float64)
    values = np.clip(np.nan_to_num(values, nan=np.nan, posinf=FP16_MAX, neginf=-FP16_MAX), -FP16_MAX, FP16_MAX)
    return numpy_helper.from_array(values.astype(np.float16), name)


def to_fp16(model: Any, keep: Iterable[str] = ()) -> Any:
    """A new model: FP16 except the nodes labelled in `keep` (see node_labels), with FP32 graph I/O."""
    import onnx
    from onnx import TensorProto, helper

    FLOAT, HALF = TensorProto.FLOAT, TensorProto.FLOAT16
    g = GraphIndex.from_model(model)
    labels = [g.label(i) for i in range(len(g.nodes))]
    unknown = sorted(set(keep) - set(labels))
    if unknown:
        raise ValueError(f"keep names nodes the model does not have: {', '.join(unknown[:5])}")
    keep = set(keep)
    types = elem_types(model)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    is_float = {name for name, t in types.items() if t == FLOAT}

    def fp32_node(i: int) -> bool:
        n = g.nodes[i]
        return labels[i] in keep or n.op_type in FP32_ONLY_OPS | CONTAINER_OPS or i in g.subgraph_nodes

    constant_nodes = {
        n.output[0]: n for n in g.nodes if n.op_type == "Constant" and n.output and n.output[0] in is_float
    }
    # Identity of a constant (torch's exporter shares equal initializers that way): read as that constant, so a
    # kept node never gets it through FP16
    alias = {
        n.output[0]: n.input[0]
        for n in g.nodes
        if n.op_type == "Identity"
        and n.input
        and n.output
        and n.input[0] in g.constants
        and n.output[0] not in g.outputs
    }
    precision: dict[str, int] = {name: FLOAT for name in g.inputs}  # tensor -> the type it is produced in
    new_nodes: list[Any] = []
    new_inits: dict[str, Any] = {}
    casts: dict[tuple[str, int], str] = {}
    half_alias: dict[str, str] = {}  # graph outputs written in FP16 under another name
    emitted: set[str] = set()
    out_names = set(g.outputs)

    def constant_as(name: str, want: int) -> str:
        """The constant `name` in type `want` (FP32: the original values; FP16: a clipped copy)."""
        if want == FLOAT:
            if name in inits:
                new_inits[name] = inits[name]
            elif name not in emitted:
                emitted.add(name)
                new_nodes.append(constant_nodes[name])
            return name
        half = f"{name}__fp16"
        if half not in new_inits:
            new_inits[half] = _fp16_tensor(g.constants[name], half)
        return half

    def value_as(name: str, want: int) -> str:
        if want == HALF and name in half_alias:
            return half_alias[name]
        have = precision.get(name, FLOAT)
        if have == want:
            return name
        key = (name, want)
        if key not in casts:
            suffix = "fp16" if want == HALF else "fp32"
            casts[key] = f"{name}__to_{suffix}"
            new_nodes.append(helper.make_node("Cast", [name], [casts[key]], name=f"{name}__cast_to_{suffix}", to=want))
        return casts[key]

    def _outer_fp32(name: str) -> str | None:
        """What a subgraph reads for outer float `name`: the FP32 value (a cast where it is made in FP16)."""
        if alias.get(name, name) not in is_float:
            return None
        target = alias.get(name, name)
        if target in inits or target in constant_nodes:
            return constant_as(target, FLOAT)
        return value_as(target, FLOAT)

    for i, node in enumerate(g.nodes):
        if node.op_type == "Constant" and node.output and node.output[0] in constant_nodes:
            continue  # emitted where read, in the type each reader needs
        if node.op_type == "Identity" and node.output and node.output[0] in alias:
            continue  # read as the constant it passes on
        want = FLOAT if fp32_node(i) else HALF
        n = onnx.NodeProto()
        n.CopyFrom(node)
        if not n.name:
            n.name = labels[i]
        if i in g.subgraph_nodes:  # its bodies compute in FP32: outer values they read, as FP32 under one name
            _rename_outer_reads(n, _outer_fp32, set())
        forced = FP32_INPUTS.get(node.op_type, frozenset())
        for pos, name in enumerate(node.input):
            if not name or alias.get(name, name) not in is_float:
                continue
            target = FLOAT if pos in forced else want
            name = alias.get(name, name)
            if name in inits or name in constant_nodes:
                n.input[pos] = constant_as(name, target)
            else:
                n.input[pos] = value_as(name, target)
        if want == HALF:
            attr = DTYPE_ATTRS.get(node.op_type)
            for a in n.attribute:
                if a.name == attr and a.i == FLOAT:
                    a.i = HALF
                if node.op_type == "ConstantOfShape" and a.name == "value" and a.t.data_type == FLOAT:
                    a.t.CopyFrom(_fp16_tensor(a.t, a.t.name))
        renamed = []
        for pos, o in enumerate(node.output):
            if o and o in is_float:
                precision[o] = want
                if want == HALF and o in out_names:
                    n.output[pos] = half_alias[o] = f"{o}__fp16"
                    precision[o] = FLOAT  # the name itself now holds the FP32 cast
                    renamed.append(o)
        new_nodes.append(n)
        for o in renamed:
            new_nodes.append(helper.make_node("Cast", [half_alias[o]], [o], name=f"{o}__cast_to_fp32", to=FLOAT))
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(new_nodes)
    read = {i for n in new_nodes for i in n.input}
    read |= {name for name, uses in g.consumers.items() if any(pos < 0 for _, pos in uses)}  # in subgraphs
    del out.graph.initializer[:]
    out.graph.initializer.extend(t for name, t in inits.items() if name in read)
    out.graph.initializer.extend(t for name, t in new_inits.items() if name not in inits)
    del out.graph.value_info[:]
    _initializer_inputs(out, model)
    return out


def _scope_names(graph: Any) -> set[str]:
    """Names a (sub)graph defines itself: its inputs, initializers and node outputs."""
    names = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    names |= {t.name for t in graph.sparse_initializer}
    return names | {o for n in graph.node for o in n.output if o}


def _rename_outer_reads(node: Any, rename: Any, local: set[str]) -> None:
    """In the subgraphs of `node` (recursively), every read of an outer-scope name `x` (not defined in a subgraph on
    the way down, `local`) made a read of `rename(x)` where that is not None: node inputs and subgraph outputs."""
    from trtverify.graph.onnxgraph import subgraphs

    for sub in subgraphs(node):
        inner = local | _scope_names(sub)
        for sn in sub.node:
            for pos, x in enumerate(sn.input):
                if x and x not in inner:
                    new = rename(x)
                    if new is not None and new != x:
                        sn.input[pos] = new
            _rename_outer_reads(sn, rename, inner)
        for o in sub.output:  # a branch may pass an outer value on as its output
            if o.name and o.name not in inner:
                new = rename(o.name)
                if new is not None and new != o.name:
                    o.name = new


def _initializer_inputs(out: Any, model: Any) -> None:
    """Graph inputs consistent with the new initializers: inputs that named an initializer the rewrite dropped are
    dropped too (else they become inputs with no value), and below IR version 4, where every initializer must also
    be a graph input, the new initializers (`X__fp16`) are added as inputs."""
    from onnx import helper

    had = {t.name for t in model.graph.initializer}
    has = {t.name for t in out.graph.initializer}
    kept = [vi for vi in out.graph.input if vi.name not in had or vi.name in has]
    if len(kept) != len(out.graph.input):
        del out.graph.input[:]
        out.graph.input.extend(kept)
    if out.ir_version < 4:
        listed = {vi.name for vi in out.graph.input}
        out.graph.input.extend(
            helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
            for t in out.graph.initializer
            if t.name not in listed
        )
