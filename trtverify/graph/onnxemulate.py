"""Narrow float graphs on a CPU, as a GPU computes them: in FP32, every BF16/FP16 tensor rounded to its type.

ONNX Runtime's CPU provider runs almost no operator in BF16 (`Could not find an implementation for
Conv(22)` on AutoCast's BF16 output), so a BF16 candidate could not be compared at all; and it runs
many FP16 operators in FP32 inside, inserting casts and dropping the pairs between two such
operators, so an FP16 value a GPU would round (or overflow) goes on in FP32 on the CPU: an offset
of 300 added to and taken off small activations loses them in FP16 on a GPU (rel_l2 0.38 emulated)
and nothing on ONNX Runtime's CPU (0.0002). The emulation rewrites the graph:

- narrow constants (initializers, Constant nodes) become FP32 holding the same values (exact); a narrow weight
  left in its file (external data, or the .onnx file itself: lightmodel.py) is widened by a Cast when the graph
  runs instead, so no weight is copied;
- every tensor the graph types FP16 (a node's output, a Cast to it, a graph input) is computed in
  FP32 and cast to FP16 under its own name, so it holds what a GPU holds, FP16 type and all (exposed,
  graph outputs included); the graph's own readers take an FP32 twin of it;
- every tensor typed BF16, which numpy cannot hold, is computed in FP32 and rounded by a Cast to
  BF16 and back, under its own name, as FP32; graph inputs and outputs typed BF16 are declared FP32.
- so every reader gets the rounded value and every name still pairs with the reference.

What differs from a GPU: each operator computes in FP32 from rounded inputs and rounds its output
once, as a GPU's tensor-core kernels with FP32 accumulation do; kernels that also round inside
(per accumulator tile, inside reductions) can lose a little more. An FP16 overflow is inf, as on a
GPU. ONNX Runtime must run the result as written (graph optimisation off): an optimiser may drop a
Cast pair, and with it the rounding.
"""

from __future__ import annotations

from typing import Any

from trtverify.graph.onnxgraph import elem_types

BF16 = 16  # onnx.TensorProto.BFLOAT16
FP16 = 10  # onnx.TensorProto.FLOAT16
FLOAT = 1
SUFFIX = {BF16: "__bf16", FP16: "__fp16r"}


INTERNAL = tuple(f"{suffix}{tail}" for suffix in SUFFIX.values() for tail in ("_fp32", "_read", "_in", ""))


def internal(name: str) -> bool:
    """A tensor the emulation added (an FP32 value before its rounding, an FP32 twin, a rounding's middle)."""
    return name.endswith(INTERNAL)


def emulated_already(model: Any) -> bool:
    """A graph this module wrote (or one cut out of it, as the isolation models are): its rounding casts are
    there; emulating it again would round twice and tie the casts in a cycle."""
    marks = tuple(f"{suffix}_round" for suffix in SUFFIX.values())
    return any(n.op_type == "Cast" and n.name.endswith(marks) for n in model.graph.node)


def holds(model: Any, kinds: frozenset[int]) -> bool:
    """Does the graph type, store or cast anything as one of `kinds`, not emulated yet? (Reads no weights.)"""
    g = model.graph
    if emulated_already(model):
        return False
    if any(t.data_type in kinds for t in g.initializer):
        return True
    if any(vi.type.tensor_type.elem_type in kinds for vi in [*g.input, *g.output, *g.value_info]):
        return True
    for n in g.node:
        for a in n.attribute:
            if (a.name == "to" and a.i in kinds) or (a.name == "value" and a.t.data_type in kinds):
                return True
    return False


def _fp32_tensor(t: Any) -> Any:
    from onnx import numpy_helper

    arr = numpy_helper.to_array(t).astype("float32")
    out = numpy_helper.from_array(arr, t.name)
    return out


def emulate(model: Any, kinds: frozenset[int]) -> tuple[Any, int]:
    """(the FP32 model that rounds every tensor of a type in `kinds` to that type, how many tensors it rounds)."""
    import onnx
    from onnx import helper

    types = elem_types(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    stored: dict[str, int] = {}  # narrow weights left where they are (external data): read through a Cast
    for i, t in enumerate(list(g.initializer)):
        if t.data_type in kinds and t.data_location == onnx.TensorProto.EXTERNAL:
            stored[t.name] = t.data_type
        elif t.data_type in kinds:
            g.initializer[i].CopyFrom(_fp32_tensor(t))
    rounded = 0

    def rounding(src: str, dst: str, kind: int) -> list[Any]:
        """src (FP32) -> kind -> dst (FP32): the value rounded to `kind`."""
        mid = dst + SUFFIX[kind]
        return [
            helper.make_node("Cast", [src], [mid], name=f"{mid}_round", to=kind),
            helper.make_node("Cast", [mid], [dst], name=f"{dst}{SUFFIX[kind]}_back", to=FLOAT),
        ]  # `mid` ends with SUFFIX[kind]: the first node's name ends with SUFFIX[kind] + "_round"

    nodes: list[Any] = []
    # an FP16 tensor keeps its name and its FP16 type (exposed, it is what the candidate holds); the graph's own
    # readers take its FP32 twin. BF16, which numpy cannot hold, is rounded and kept FP32 under its name.
    read_as: dict[str, str] = {}

    def fp16_twin(name: str) -> Any:
        read_as[name] = f"{name}{SUFFIX[FP16]}_read"
        return helper.make_node("Cast", [name], [read_as[name]], name=f"{read_as[name]}_cast", to=FLOAT)

    widened = {t.name for t in g.initializer} - set(stored)  # now FP32 (below IR 4 also listed as graph inputs)
    inputs = {
        vi.name: vi.type.tensor_type.elem_type
        for vi in g.input
        if vi.type.tensor_type.elem_type in kinds and vi.name not in widened and vi.name not in stored
    }
    renamed_inputs: dict[str, str] = {}
    for name, kind in stored.items():  # exact widening, computed when the graph runs, never stored
        if kind == FP16:
            nodes.append(fp16_twin(name))
        else:
            renamed_inputs[name] = f"{name}{SUFFIX[kind]}_in"
            nodes.append(helper.make_node("Cast", [name], [renamed_inputs[name]], name=f"{name}_widen", to=FLOAT))
    for name, kind in inputs.items():
        if kind == FP16:
            nodes.append(fp16_twin(name))
        else:
            renamed_inputs[name] = f"{name}{SUFFIX[kind]}_in"
            nodes += rounding(name, renamed_inputs[name], kind)
            rounded += 1
    for node in g.node:
        n = onnx.NodeProto()
        n.CopyFrom(node)
        for k, x in enumerate(n.input):
            if x in renamed_inputs:
                n.input[k] = renamed_inputs[x]
        for a in n.attribute:
            if a.name == "value" and a.type == onnx.AttributeProto.TENSOR and a.t.data_type in kinds:
                a.t.CopyFrom(_fp32_tensor(a.t))
        cast_to = next((a.i for a in n.attribute if a.name == "to"), None) if n.op_type == "Cast" else None
        if cast_to in kinds:
            for a in n.attribute:
                if a.name == "to":
                    a.i = FLOAT
        after: list[Any] = []
        for k, o in enumerate(n.output):
            kind = cast_to if (k == 0 and cast_to in kinds) else types.get(o)
            if not o or kind not in kinds:
                continue
            n.output[k] = o + SUFFIX[kind] + "_fp32"
            if kind == FP16:  # the cast to FP16 is the rounding
                after.append(helper.make_node("Cast", [n.output[k]], [o], name=f"{o}{SUFFIX[kind]}_round", to=FP16))
                after.append(fp16_twin(o))
            else:
                after += rounding(n.output[k], o, kind)
            rounded += 1
        nodes += [n, *after]
    twins = set(read_as.values())
    for n in nodes:
        if n.op_type == "Cast" and n.output and n.output[0] in twins:
            continue
        for k, x in enumerate(n.input):
            if x in read_as:
                n.input[k] = read_as[x]
    del g.node[:]
    g.node.extend(nodes)
    for vi in [*g.input, *g.output]:
        if vi.type.tensor_type.elem_type in kinds - {FP16} or (
            vi.name in widened and vi.type.tensor_type.elem_type in kinds
        ):
            vi.type.tensor_type.elem_type = FLOAT
    kept = [vi for vi in g.value_info if vi.type.tensor_type.elem_type not in kinds - {FP16}]
    del g.value_info[:]
    g.value_info.extend(kept)
    return out, rounded
