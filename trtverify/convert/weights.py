"""Weights held in Constant nodes, made initializers before quantizing.

Exporters such as Paddle2ONNX write every weight as a Constant node (PP-OCRv4's recognizer: 420 Constant nodes, no
initializer). Quantizers treat a Constant node's output as an activation: ONNX Runtime's quantize_static gives it
one QuantizeLinear scale even with per_channel=True (and ModelOpt's INT8 did the same), so output channels whose
ranges differ 1000x share one scale and the small ones become zero. As initializers, the weights are quantized per
channel like any other.
"""

from __future__ import annotations

from typing import Any

# inputs that are weights: (op_type, input position)
WEIGHT_INPUTS = {("Conv", 1), ("ConvTranspose", 1), ("Gemm", 1), ("MatMul", 1), ("Conv", 2), ("ConvTranspose", 2),
                 ("Gemm", 2)}  # fmt: skip


def constants_to_initializers(model: Any, dry: bool = False) -> int:
    """Turn the Constant nodes whose only readers take them as weights into initializers, in place; how many
    (`dry`: count them, change nothing)."""
    from onnx import helper, numpy_helper

    g = model.graph
    readers: dict[str, list[tuple[str, int]]] = {}
    for n in g.node:
        for pos, x in enumerate(n.input):
            if x:
                readers.setdefault(x, []).append((n.op_type, pos))
    outputs = {o.name for o in g.output}
    moved = []
    for n in g.node:
        if n.op_type != "Constant" or len(n.output) != 1 or n.output[0] in outputs:
            continue
        uses = readers.get(n.output[0], [])
        value = next((a for a in n.attribute if a.name == "value"), None)
        if not uses or value is None or not all(u in WEIGHT_INPUTS for u in uses):
            continue
        if dry:
            moved.append(n)
            continue
        t = numpy_helper.from_array(numpy_helper.to_array(helper.get_attribute_value(value)), n.output[0])
        g.initializer.append(t)
        moved.append(n)
    for n in moved if not dry else []:
        g.node.remove(n)
    return len(moved)


def has_constant_weights(path: Any) -> bool:
    """Whether weights of the model at `path` are Constant nodes, read from its graph alone (weights not loaded:
    Constant nodes carry their values in the graph)."""
    from trtverify.graph.onnxwire import weightless

    return constants_to_initializers(weightless(path)[0], dry=True) > 0
