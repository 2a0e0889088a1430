"""Shape baking: a constant that fixes a size the model declares dynamic.

`torch.onnx.export` traces Python ints: `x.view(1, -1)`, `x[:, :16]`, `F.interpolate(x, size=(64, 64))` and
`x.expand(8, -1)` become constants, so the model is right at the traced batch or resolution and wrong at the
others, while its inputs still say `batch` (the "works at batch 1, wrong at batch 8" reports). Read from the graph
alone, with the dimensions the model declares dynamic (a `dim_param` or an unknown size on a graph input) followed
through shape inference. Per node, where its shape-like input is a constant:

- Reshape: a dynamic input made static (no 0 and no -1 in the target), or its leading (batch) dimension set to a
  number while the rest is folded into -1;
- Expand: a dynamic axis broadcast to a size above 1;
- Resize: `sizes` given as a constant on a dynamic spatial axis;
- Slice: a dynamic axis cut at a fixed end (start 0, an end that is not "to the end");
- ConstantOfShape: a fixed-shape tensor meeting a dynamic one in the node that reads it.

Tile is not judged: its repeats alone do not say whether they stood for a traced size. Kind `shape_baked`,
medium: verify the model at the other sizes (a shape sweep), or export with the sizes computed from the input.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from trtverify.graph.onnxgraph import GraphIndex, inferred
from trtverify.lint.findings import Found, at

TO_THE_END = 1 << 30  # Slice ends at or above this (INT_MAX, INT64_MAX) mean "to the end"


def _dims(model: Any, inferred_model: Any = None) -> dict[str, list[str | int | None]]:
    """Each tensor's dimensions after shape inference (`inferred_model`, or inferred here): a name (symbolic), a
    number, or None (unknown)."""
    g = (inferred(model) if inferred_model is None else inferred_model).graph
    out: dict[str, list[str | int | None]] = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        t = vi.type.tensor_type
        if not t.HasField("shape"):
            continue
        out[vi.name] = [
            d.dim_param if d.dim_param else (int(d.dim_value) if d.HasField("dim_value") else None) for d in t.shape.dim
        ]
    return out


def _dynamic(model: Any) -> set[str]:
    """The names of the graph inputs' dynamic dimensions."""
    inits = {t.name for t in model.graph.initializer}
    names = set()
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.dim_param:
                names.add(d.dim_param)
    return names


def _const(g: GraphIndex, name: str) -> np.ndarray | None:
    t = g.constants.get(name)
    if t is None:
        return None
    values = g.values_of(t)
    return None if values is None else np.asarray(values).reshape(-1)


FOLD_NODES = 16  # a shape computed from constants by at most this many nodes is evaluated (torch's Expand shapes)


def _folded(g: GraphIndex, name: str, cache: dict[str, np.ndarray | None]) -> np.ndarray | None:
    """The value of `name` where it is a constant, or computed from constants alone by a few nodes (evaluated with
    ONNX's reference evaluator); else None."""
    if name in cache:
        return cache[name]
    value = _const(g, name)
    if value is None and name in g.producers:
        nodes: list[Any] = []
        todo, seen = [name], set()
        while todo and len(nodes) <= FOLD_NODES:
            t = todo.pop()
            if t in seen or t in g.constants:
                continue
            seen.add(t)
            p = g.producers.get(t)
            if p is None or g.nodes[p.index].op_type in ("Shape", "Size"):
                nodes = []  # it reads a tensor: not a constant
                break
            node = g.nodes[p.index]
            if node not in nodes:
                nodes.append(node)
            todo += [x for x in node.input if x]
        if nodes and len(nodes) <= FOLD_NODES:
            value = _evaluate(g, nodes, name)
    cache[name] = value
    return value


def _evaluate(g: GraphIndex, nodes: list[Any], name: str) -> np.ndarray | None:
    import onnx
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    try:
        order = sorted(nodes, key=lambda n: g.producers[n.output[0]].index)
        inits = []
        for x in sorted({x for n in order for x in n.input if x and x in g.constants}):
            values = _const(g, x)
            if values is None:
                return None
            t = g.constants[x]
            inits.append(onnx.numpy_helper.from_array(np.asarray(values).reshape(tuple(t.dims)), x))
        out = helper.make_tensor_value_info(name, onnx.TensorProto.UNDEFINED, None)
        graph = helper.make_graph(order, "fold", [], [out], initializer=inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
        (value,) = ReferenceEvaluator(model).run(None, {})
        return np.asarray(value).reshape(-1)
    except Exception:  # anything unusual: not judged
        return None


def shape_baking_findings(model: Any, g: GraphIndex, inferred_model: Any = None) -> Found:
    dynamic = _dynamic(model)
    if not dynamic:
        return []
    dims = _dims(model, inferred_model)
    found: Found = []
    cache: dict[str, np.ndarray | None] = {}

    def symbolic(tensor: str) -> dict[int, str]:
        return {i: d for i, d in enumerate(dims.get(tensor, [])) if isinstance(d, str) and d in dynamic}

    def report(i: int, node: Any, axis_name: str, what: str, constant: str, values: np.ndarray) -> None:
        label = g.label(i)
        shown = "[" + ", ".join(str(int(v)) for v in values[:8]) + (", ..." if values.size > 8 else "") + "]"
        message = (
            f"{node.op_type} '{label}' {what}: its constant '{constant}' {shown} fixes a size the model declares "
            f"dynamic ('{axis_name}'); the model is right only at the size it was traced at. Export it with the size "
            "computed from the input, or verify it at every size it will serve (a shape sweep)"
        )
        detail = {"dimension": axis_name, "constant": constant, "values": [int(v) for v in values[:32]]}
        found.append(at(i, "shape_baked", "medium", message, node=label, op_type=node.op_type, detail=detail))

    for i, node in enumerate(g.nodes):
        op = node.op_type
        data = node.input[0] if node.input else ""
        sym = symbolic(data)
        if op == "Reshape" and len(node.input) > 1 and sym:
            target = _folded(g, node.input[1], cache)
            if target is None or target.size == 0:
                continue
            if not np.any((target == 0) | (target == -1)):
                report(i, node, next(iter(sym.values())), "makes a dynamic tensor static", node.input[1], target)
            elif 0 in sym and target[0] > 0:
                report(i, node, sym[0], "sets the leading dimension to a number", node.input[1], target)
        elif op == "Expand" and len(node.input) > 1 and sym:
            shape = _folded(g, node.input[1], cache)
            if shape is None:
                continue
            rank = len(dims.get(data, []))
            for axis, name in sym.items():
                k = shape.size - rank + axis
                if 0 <= k < shape.size and shape[k] > 1:
                    report(i, node, name, f"broadcasts dynamic axis {axis} to {int(shape[k])}", node.input[1], shape)
                    break
        elif op == "Resize" and len(node.input) > 3 and node.input[3] and sym:
            sizes = _folded(g, node.input[3], cache)
            spatial = {a: n for a, n in sym.items() if a >= 2}
            if sizes is not None and spatial:
                report(i, node, next(iter(spatial.values())), "resizes to fixed sizes", node.input[3], sizes)
        elif op == "Slice" and len(node.input) > 2 and sym:
            starts, ends = _folded(g, node.input[1], cache), _folded(g, node.input[2], cache)
            axes = _folded(g, node.input[3], cache) if len(node.input) > 3 and node.input[3] else None
            if starts is None or ends is None:
                continue
            rank = len(dims.get(data, []))
            axis_list = [int(a) % rank if rank else int(a) for a in axes] if axes is not None else range(ends.size)
            for k, axis in enumerate(axis_list):
                if axis in sym and k < ends.size and starts[k] == 0 and 0 < ends[k] < TO_THE_END:
                    report(i, node, sym[axis], f"cuts dynamic axis {axis} at a fixed end", node.input[2], ends)
                    break
        elif op == "ConstantOfShape" and node.input and _const(g, node.input[0]) is not None and node.output:
            out = node.output[0]
            for j, _pos in g.consumers.get(out, []):
                if j < 0:
                    continue
                others = [x for x in g.nodes[j].input if x and x != out and symbolic(x)]
                if others:
                    name = next(iter(symbolic(others[0]).values()))
                    report(i, node, name, "makes a fixed-shape tensor that meets a dynamic one", node.input[0],
                           _const(g, node.input[0]))  # fmt: skip
                    break
    return found
