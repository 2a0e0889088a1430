"""INT8 calibration of a graph with plugin nodes: ONNX Runtime's `quantize_static` runs the graph to calibrate, and
refuses one with an op it does not have (`TRT:EfficientNMS_TRT(-1) is not a registered function/op`).

The graph is cut before its first plugins: the part that depends on no plugin (for a detector, everything before its
NMS) is quantized as a model of its own, whose outputs are every tensor the rest reads; the plugin nodes and what
follows them are then put back as they were, in FP32. So the convolutions a detector spends its time in get their
Q/DQ, and nothing after a plugin is calibrated (a mid-graph plugin leaves the rest of the graph unquantized: said in
the note `quantize` returns).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trtverify.plugins.onnxops import is_plugin, label


def split(model: Any) -> tuple[Any, list[Any], list[str]] | None:
    """(the model of the nodes that depend on no plugin, with as outputs the tensors the rest reads and its own
    graph outputs; the rest of the nodes, in order; the plugin nodes' labels), or None when there is no plugin."""
    import onnx

    g = model.graph
    if not any(is_plugin(n) for n in g.node):
        return None
    after: set[str] = set()  # tensors that depend on a plugin
    head, rest, plugins = [], [], []
    for n in g.node:  # a valid ONNX graph lists its nodes in topological order
        if is_plugin(n) or any(x in after for x in n.input if x):
            after.update(o for o in n.output if o)
            rest.append(n)
            if is_plugin(n):
                plugins.append(label(n))
        else:
            head.append(n)
    made = {o for n in head for o in n.output if o}
    wanted = [x for n in rest for x in n.input if x in made] + [o.name for o in g.output if o.name in made]
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.node[:], m.graph.output[:]
    m.graph.node.extend(head)
    used = {x for n in head for x in n.input}
    kept = [t for t in g.initializer if t.name in used]
    del m.graph.initializer[:]
    m.graph.initializer.extend(kept)
    declared = {vi.name: vi for vi in [*g.output, *g.value_info]}
    for name in dict.fromkeys(wanted):
        vi = onnx.ValueInfoProto()
        vi.CopyFrom(declared[name]) if name in declared else setattr(vi, "name", name)
        m.graph.output.append(vi)
    return m, rest, plugins


def stitch(quantized: Path, original: Any, rest: list[Any], out: Path) -> None:
    """The quantized head and the original rest (plugins and what follows them, FP32) in one model, written to
    `out` with the original's inputs and outputs."""
    import onnx

    q = onnx.load(str(quantized))
    g = q.graph
    g.node.extend(rest)
    have = {t.name for t in g.initializer}
    used = {x for n in rest for x in n.input}
    g.initializer.extend(t for t in original.graph.initializer if t.name in used and t.name not in have)
    del g.output[:]
    g.output.extend(original.graph.output)
    known = {vi.name for vi in g.value_info}
    g.value_info.extend(vi for vi in original.graph.value_info if vi.name not in known)
    domains = {o.domain for o in q.opset_import}
    q.opset_import.extend(o for o in original.opset_import if o.domain not in domains)
    onnx.save(q, str(out))
