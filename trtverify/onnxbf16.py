"""BF16 graphs on a CPU that has no BF16 kernels: computed in FP32, every BF16 tensor rounded to BF16.

ONNX Runtime's CPU provider runs almost no operator in BF16 (`Could not find an implementation for
Conv(22)` on AutoCast's BF16 output), so a BF16 candidate could not be compared at all. The
emulation rewrites the graph:

- BF16 constants (initializers, Constant nodes) become FP32 holding the same values (exact: every
  BF16 value is an FP32 value);
- every tensor the graph types BF16 (a node's output, a Cast to BF16, a graph input) is computed in
  FP32 and then rounded to BF16 by a Cast to BF16 and back, under its own name, so every reader
  gets the BF16 value and every name still pairs with the reference;
- graph inputs and outputs typed BF16 are declared FP32 (fed and read as FP32).

What differs from a GPU: each operator computes in FP32 from BF16-rounded inputs and rounds its
output once; a GPU's BF16 kernels also round at their own points (inside a reduction, or per
accumulator tile), so a GPU can lose a little more. Overflow is the same (BF16 has FP32's range).
ONNX Runtime must run the result as written (graph optimisation off): an optimiser may drop a
Cast pair, and with it the rounding.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

BF16 = 16  # onnx.TensorProto.BFLOAT16
FLOAT = 1
SUFFIX = "__bf16"


def holds_bf16(model: Any) -> bool:
    """Does the graph type, store or cast anything as BF16? (Reads no weight values.)"""
    g = model.graph
    if any(t.data_type == BF16 for t in g.initializer):
        return True
    if any(vi.type.tensor_type.elem_type == BF16 for vi in [*g.input, *g.output, *g.value_info]):
        return True
    for n in g.node:
        for a in n.attribute:
            if (a.name == "to" and a.i == BF16) or (a.name == "value" and a.t.data_type == BF16):
                return True
    return False


def _fp32_tensor(t: Any) -> Any:
    from onnx import numpy_helper

    arr = numpy_helper.to_array(t).astype("float32")
    out = numpy_helper.from_array(arr, t.name)
    return out


def _types(model: Any) -> dict[str, int]:
    import onnx

    try:
        g = onnx.shape_inference.infer_shapes(model, strict_mode=False).graph
    except Exception:  # noqa: BLE001 - the declared types are enough for a graph inference cannot read
        g = model.graph
    types = {t.name: t.data_type for t in g.initializer}
    for vi in [*g.input, *g.output, *g.value_info]:
        if vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


def emulate_bf16(model: Any) -> tuple[Any, int]:
    """(the FP32 model that rounds every BF16 tensor to BF16, how many tensors it rounds)."""
    import onnx
    from onnx import helper

    types = _types(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    for i, t in enumerate(list(g.initializer)):
        if t.data_type == BF16:
            g.initializer[i].CopyFrom(_fp32_tensor(t))
    rounded = 0

    def rounding(src: str, dst: str) -> list[Any]:
        """src (FP32) -> BF16 -> dst (FP32): the value rounded to BF16."""
        mid = dst + SUFFIX
        return [
            helper.make_node("Cast", [src], [mid], name=f"{mid}_round", to=BF16),
            helper.make_node("Cast", [mid], [dst], name=f"{dst}{SUFFIX}_back", to=FLOAT),
        ]

    nodes: list[Any] = []
    inputs = [vi.name for vi in g.input if vi.type.tensor_type.elem_type == BF16]
    renamed_inputs = {name: f"{name}{SUFFIX}_in" for name in inputs}
    for name, inner in renamed_inputs.items():
        nodes += rounding(name, inner)
        rounded += 1
    for node in g.node:
        n = onnx.NodeProto()
        n.CopyFrom(node)
        for k, x in enumerate(n.input):
            if x in renamed_inputs:
                n.input[k] = renamed_inputs[x]
        for a in n.attribute:
            if a.name == "value" and a.type == onnx.AttributeProto.TENSOR and a.t.data_type == BF16:
                a.t.CopyFrom(_fp32_tensor(a.t))
        after: list[Any] = []
        if n.op_type == "Cast" and any(a.name == "to" and a.i == BF16 for a in n.attribute):
            for a in n.attribute:
                if a.name == "to":
                    a.i = FLOAT
        for k, o in enumerate(n.output):
            if o and (types.get(o) == BF16 or (n.op_type == "Cast" and k == 0 and _was_bf16_cast(node))):
                n.output[k] = o + SUFFIX + "_fp32"
                after += rounding(n.output[k], o)
                rounded += 1
        nodes += [n, *after]
    del g.node[:]
    g.node.extend(nodes)
    for vi in [*g.input, *g.output]:
        if vi.type.tensor_type.elem_type == BF16:
            vi.type.tensor_type.elem_type = FLOAT
    kept = [vi for vi in g.value_info if vi.type.tensor_type.elem_type != BF16]
    del g.value_info[:]
    g.value_info.extend(kept)
    return out, rounded


def _was_bf16_cast(node: Any) -> bool:
    return any(a.name == "to" and a.i == BF16 for a in node.attribute)


def write_emulated(path: Path, folder: Path) -> tuple[Path, int]:
    """The emulated twin of the BF16 model at `path`, written in `folder`."""
    import onnx

    model, rounded = emulate_bf16(onnx.load(str(path)))
    target = folder / f"{path.stem}.bf16-emulated.onnx"
    onnx.save(model, str(target))
    return target, rounded
