"""Static precision lint of a candidate ONNX model, before any engine is built.

A TensorRT build changes numbers the ONNX file does not show: `--fp16` (TensorRT <= 10)
converts FP32 weights to FP16, activations run in a narrower type, and a Q/DQ model runs
in INT8/FP8 only where a layer's inputs carry Q/DQ. This module finds, from the file
alone (and optionally the largest |activation| seen on the FP32 reference), the places
where that conversion overflows, underflows, loses precision or silently does not happen.

Pure onnx + numpy; findings are data, sorted high -> medium -> info, then graph order.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trtverify.config.findings import SEVERITY_RANK
from trtverify.graph.onnxgraph import QDQ_OPS, GraphIndex, elem_types, inferred
from trtverify.lint.findings import LintFinding
from trtverify.lint.graph_rules import activation_findings, coverage_findings, structure_findings
from trtverify.lint.ranges import QLINEAR_OPS, TARGETS, fp8_types, onnx_types
from trtverify.lint.reference_constants import reference_constant_findings, same_as_reference
from trtverify.lint.shapes import shape_baking_findings
from trtverify.lint.weights import (
    initializer_findings,
    per_tensor_scale_findings,
    qdq_param_findings,
    quantized_weight_findings,
)
from trtverify.util.errors import UsageError, unknown

if TYPE_CHECKING:
    import onnx

    from trtverify.graph.lightmodel import LightModel

    ModelLike = onnx.ModelProto | Path | str | LightModel


def _light(model: ModelLike) -> LightModel | None:
    """A path becomes a weightless model (lightmodel.py): the lint reads each weight it judges from its file, one
    tensor at a time, never the whole model into Python. An onnx.ModelProto is used as given."""
    from trtverify.graph.lightmodel import LightModel

    if isinstance(model, LightModel):
        return model
    if isinstance(model, (str, Path)):
        path = Path(model)
        try:
            return LightModel(path)
        except FileNotFoundError as exc:
            raise UsageError(f"{path}: file not found") from exc
        except IsADirectoryError as exc:
            raise UsageError(f"{path}: is a folder, expected an ONNX model") from exc
        except ValueError as exc:  # external data outside the model's folder; a truncated or garbled file
            why = str(exc) if "external data" in str(exc) else f"not a readable ONNX model ({exc})"
            raise UsageError(f"{path}: {why}") from exc
        except Exception as exc:  # malformed protobuf: the file is not an ONNX model
            raise UsageError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc})") from exc
    return None


def _as_model(model: ModelLike) -> onnx.ModelProto:
    light = _light(model)
    return light.model if light is not None else model  # type: ignore[return-value]


def _index(model: ModelLike) -> tuple[onnx.ModelProto, GraphIndex]:
    light = _light(model)
    if light is not None:
        return light.model, light.info
    return model, GraphIndex.from_model(model)  # type: ignore[arg-type,return-value]


def _typed(model: ModelLike) -> tuple[onnx.ModelProto, GraphIndex, Any]:
    """(model, index, the model after shape inference). A LightModel infers once, whatever reads it after (the
    lint, the per-node precisions, the shape lint): each node's types are read once per run."""
    light = _light(model)
    if light is not None:
        return light.model, light.info, light.inferred
    m, g = _index(model)
    return m, g, inferred(m)


# what a candidate computes in, loosest last (a mixed candidate gets the defaults of its loosest part)
LOOSEST_LAST = ("fp32", "tf32", "fp16", "bf16", "int8", "fp8", "int4")


def precision_parts(model: ModelLike) -> list[str]:
    """What a model computes and stores in, read from its types and its Q/DQ, loosest first: e.g. ['int8',
    'fp16'] for ModelOpt's INT8 with its FP16 rest, ['int4', 'fp16'] for weight-only INT4 blocks, ['fp16'] for
    AutoCast, ['int8'] for ONNX Runtime's quantize_static (its rest FP32), ['fp32'] for the reference."""
    import onnx

    T = onnx.TensorProto
    m = _as_model(model)
    g = m.graph
    types: set[int] = {t.data_type for t in g.initializer}
    for vi in [*g.input, *g.output, *g.value_info]:
        types.add(vi.type.tensor_type.elem_type)
    constants = {t.name: t.data_type for t in g.initializer}
    quantized: set[str] = set()
    int4 = onnx_types("INT4", "UINT4")
    for node in g.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                types.add(a.t.data_type)
                if node.op_type == "Constant" and node.output:
                    constants[node.output[0]] = a.t.data_type
            elif a.name in ("to", "output_dtype") and a.type == onnx.AttributeProto.INT:
                types.add(int(a.i))
    for node in g.node:
        if node.op_type in QLINEAR_OPS:
            quantized.add("int8")
        if node.op_type not in QDQ_OPS:
            continue
        stored = {constants.get(i) for i in node.input[:3] if i} | {
            int(a.i) for a in node.attribute if a.name == "output_dtype" and a.type == onnx.AttributeProto.INT
        }
        if stored & fp8_types():
            quantized.add("fp8")
        elif stored & int4:
            quantized.add("int4")
        else:
            quantized.add("int8")  # int8/uint8 (uint8 is QuantizeLinear's default)
    floats = [p for p, t in (("bf16", T.BFLOAT16), ("fp16", T.FLOAT16)) if t in types]
    parts = sorted(quantized, key=LOOSEST_LAST.index, reverse=True) + floats
    return parts or ["fp32"]


def node_precisions(model: ModelLike) -> dict[str, str]:
    """What each compute node of a candidate runs in, read once from its types and Q/DQ: 'INT8', 'FP8' or 'INT4'
    for a Conv/Gemm/MatMul reading a DequantizeLinear of that type (INT4: weight-only blocks), else the type of its
    float output ('FP16', 'BF16', 'FP32'). Q/DQ, Cast and shape plumbing are left out."""
    from trtverify.graph.onnxgraph import CAST_OPS, SHAPE_OPS
    from trtverify.lint.ranges import COMPUTE_OPS

    m, g, inf = _typed(model)
    types = tensor_types(m, g, inf)
    names = {1: "FP32", 10: "FP16", 16: "BF16", 11: "FP64"}
    int4, fp8 = onnx_types("INT4", "UINT4"), fp8_types()
    live = set(g.value_tensors())
    out: dict[str, str] = {}
    for i, node in enumerate(g.nodes):
        if node.op_type in QDQ_OPS or node.op_type in CAST_OPS or node.op_type in SHAPE_OPS:
            continue
        if not any(o in live for o in node.output):
            continue
        kind = None
        if node.op_type in COMPUTE_OPS:
            for x in node.input:
                p = g.producers.get(x)
                if p is None or p.op_type != "DequantizeLinear":
                    continue
                dq = g.nodes[p.index]
                stored = {types.get(t) for t in dq.input[:3] if t}
                q = g.producers.get(dq.input[0])
                if q is not None and q.op_type == "QuantizeLinear":
                    stored |= {types.get(t) for t in g.nodes[q.index].input[1:3] if t}
                kind = "FP8" if stored & fp8 else "INT4" if stored & int4 else "INT8"
                break
        if kind is None:
            kind = next((names[types[o]] for o in node.output if types.get(o) in names), "FP32")
        out[g.label(i)] = kind
    return out


def precision_label(parts: list[str]) -> str:
    """'int8+fp16', 'fp16', 'fp32'."""
    return "+".join(parts)


def target_precision(model: ModelLike) -> str:
    """The lint's target: the loosest type a model is meant for (fp8 > int8 > fp16 > bf16 > fp32). INT4
    weight-only blocks quantise no activation: their lint target is the float rest the activations run in."""
    parts = [p for p in precision_parts(model) if p != "int4"] or ["fp32"]
    return parts[0] if parts[0] in TARGETS else "fp32"


def tensor_types(model: onnx.ModelProto, g: GraphIndex, inferred_model: Any = None) -> dict[str, int]:
    """Element type of every tensor: the constants' (Constant nodes' scalar forms included), then what the model
    declares or shape inference gives (`inferred_model`: inferred already)."""
    return {**{name: t.data_type for name, t in g.constants.items()}, **elem_types(model, inferred_model)}


def narrow_tensors(model: onnx.ModelProto, g: GraphIndex, types: dict[str, int] | None = None) -> dict[str, str]:
    """Tensors the graph holds in a narrow float type ('fp16', 'bf16'): typed so, or read by a Cast to that type
    (the value is lowered there, so its range matters there)."""
    import onnx

    kinds = {onnx.TensorProto.FLOAT16: "fp16", onnx.TensorProto.BFLOAT16: "bf16"}
    types = tensor_types(model, g) if types is None else types
    out = {name: kinds[t] for name, t in types.items() if t in kinds}
    for node in g.nodes:
        if node.op_type == "Cast" and node.input:
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if to in kinds:
                out.setdefault(node.input[0], kinds[to])
    return out


def baked_shapes(model: ModelLike) -> list[LintFinding]:
    """The `shape_baked` findings of `model` alone (the framework stage asks when an export gives another shape)."""
    m, g, inf = _typed(model)
    return [f for _, f in sorted(shape_baking_findings(m, g, inf), key=lambda pf: pf[0])]


def lint_candidate(
    model: ModelLike,
    *,
    target: str | None = None,
    activation_max: Mapping[str, float] | None = None,
    reference: ModelLike | GraphIndex | None = None,
    strongly_typed: bool = False,
) -> list[LintFinding]:
    """Precision findings of `model` (an onnx.ModelProto or a path) built for `target` (auto-detected when None).

    `activation_max`: tensor name -> largest |x| seen when running the FP32 reference.
    `reference`: the FP32 model the candidate was converted from; every candidate constant is compared with its
    counterpart there (a converter that clipped a value to the type's range leaves it looking in range).
    `strongly_typed`: the build runs the graph's own types (TensorRT 11, TensorRT-RTX, `--stronglyTyped`, ONNX
    Runtime): a value is judged against a narrow range only where the graph computes or stores it in that type
    (`narrow_tensors`); a node kept in FP32 has no FP16 finding. False: a weakly typed TensorRT <= 10 build,
    whose precision flags may lower every FP32 layer to the target.
    Only the main graph is inspected; If/Loop/Scan bodies are reported once as skipped.
    """
    m, g, inf = _typed(model)
    if target is None:
        target = target_precision(m)
    elif target not in TARGETS:
        raise UsageError(unknown("lint target", target, list(TARGETS)))
    narrow = narrow_tensors(m, g, tensor_types(m, g, inf)) if strongly_typed else None
    found, unread = initializer_findings(g, target, narrow)
    qdq, unread_q = qdq_param_findings(g)
    found += qdq
    found += quantized_weight_findings(g)
    found += per_tensor_scale_findings(g)
    if target in ("int8", "fp8"):
        found += coverage_findings(g, target)
    if activation_max:
        found += activation_findings(g, target, activation_max, narrow)
    found += structure_findings(g, unread + unread_q)
    found += shape_baking_findings(m, g, inf)
    if reference is not None:
        ref_index = reference if isinstance(reference, GraphIndex) else _index(reference)[1]
        found += reference_constant_findings(ref_index, g)
        # lint what the candidate changed: a non-finite constant the reference holds as it is (a mask's -inf fill
        # kept in FP32) is the reference's, and reaches the reference's outputs the same way
        nonfinite = {f.tensor for _, f in found if f.kind == "nonfinite_initializer" and f.tensor}
        own = same_as_reference(ref_index, g, nonfinite) if nonfinite else set()
        found = [(p, f) for p, f in found if not (f.kind == "nonfinite_initializer" and f.tensor in own)]
    found.sort(key=lambda pf: (SEVERITY_RANK[pf[1].severity], pf[0], pf[1].kind, pf[1].tensor or ""))
    return [f for _, f in found]
