"""Plugin layers of an engine: which layers run a plugin, and what they and the reformat/copy layers next to them
cost.

TensorRT fuses nothing across a plugin: the layers on either side of it run as kernels of their own (a Myelin
region ends at it), and tensors are converted to and from the formats the plugin accepts (`Reformatting CopyNode
for Input Tensor 0 to P`). A plugin so costs its own time, the copies next to it, and the fusions it cut (the last
is `engine diff`'s, trtverify.engine.fusion).

A layer is a plugin layer when
- its `LayerType` (or `ParameterType`) names a plugin: `PluginV2` (TensorRT's name for IPluginV2 layers, as its
  verbose build log writes them: `Layer(PluginV2): ...`), `PluginV3`;
- or, where the export gives names only (`--profilingVerbosity=layer_names_only` or `none`, a `--dumpProfile`
  table, a names-only `--dumpLayerInfo`), its name does: an unnamed plugin layer (`(Unnamed Layer* 0)
  [PluginV2DynamicExt]`), TensorRT-LLM's layer names (`.../attention/PLUGIN_V2_0`), a name of TensorRT's plugin
  library (`EfficientNMS_TRT`, `ROIAlign_TRT`, `BatchedNMSDynamic_TRT`: they end in `_TRT`, also as
  `/model/EfficientNMS_TRT` or `EfficientNMS_TRT_276`), mmdeploy's plugins, or a plugin trtverify has a reference
  for (trtverify.plugins.registry);
- or its name matches a pattern given with `--plugin` (an op_type or a layer name; `*` and `?` as in a shell;
  `PPScatter` also matches the node names `PPScatter_0` and `PPScatter.0`). A reformat/copy layer is never one.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from typing import Any

from pydantic import Field

from trtverify.engine.exports import EngineLayer
from trtverify.graph.onnxgraph import reachable
from trtverify.plugins.registry import BUILTIN
from trtverify.util.record import Record

PLUGIN_TYPE = re.compile(r"plugin", re.I)
COPY_FOR = re.compile(r"^Reformatting CopyNode for (Input|Output) Tensor \d+ to (.+)$")
UNNAMED = re.compile(r"\[(Plugin[A-Za-z0-9]*)\]")  # "(Unnamed Layer* 0) [PluginV2DynamicExt]"
LLM = re.compile(r"^(PLUGIN_V\d+)(?:_\d+)?$")  # TensorRT-LLM: "<scope>/PLUGIN_V2_0"
TRT_LIBRARY = re.compile(r"^(\w+?_TRT)(?:[_.]\d+)?$")  # "EfficientNMS_TRT", "EfficientNMS_TRT_276"
MMDEPLOY = ("TRTBatchedNMS", "TRTBatchedRotatedNMS", "grid_sampler", "MMCVModulatedDeformConv2d",
            "MMCVMultiLevelRoiAlign")  # fmt: skip


class NextLayer(Record):
    """A reformat/copy layer next to a plugin layer."""

    name: str
    type: str
    side: str = Field(description="input: it converts a tensor the plugin reads; output: one the plugin writes")
    by: str = Field(
        description="how it was told: name (`Reformatting CopyNode for ... Tensor i to <plugin>`), tensor (it reads "
        "or writes the plugin's tensors, in an export that names them), order (it is next to the plugin in the "
        "engine's layer order: an export without tensor names)"
    )
    avg_ms: float | None


class PluginLayer(Record):
    """One plugin layer of the engine and what it costs."""

    name: str
    type: str
    plugin: str | None = Field(description="the plugin it runs, where its name tells (EfficientNMS_TRT, ...)")
    found_by: str = Field(description="layer type | name | --plugin (see docs/engine.md)")
    avg_ms: float | None
    share: float | None = Field(description="of the sum of per-layer average ms")
    next_to: list[NextLayer] = Field(description="the reformat/copy layers next to it, in the engine's layer order")
    next_to_ms: float | None = Field(description="their summed average ms")
    share_with_next_to: float | None = Field(description="the plugin and those layers, of the sum of per-layer ms")


def is_copy(layer: EngineLayer) -> bool:
    """A reformat or copy layer (LayerType Reformat, or a `Reformatting CopyNode` of any type, NoOp included)."""
    return layer.reformat or COPY_FOR.match(layer.name) is not None


def _tokens(layer: EngineLayer) -> list[str]:
    """The names a layer goes by: its name, its ONNX nodes, the parts of a fused name, and their last path
    component (`/model.22/EfficientNMS_TRT` -> `EfficientNMS_TRT`)."""
    names = [layer.name, *layer.onnx_nodes, *(p.strip() for p in layer.name.split(" + "))]
    out = []
    for n in names:
        out += [n, n.rsplit("/", 1)[-1]]
    return list(dict.fromkeys(t for t in out if t))


def known_plugin(layer: EngineLayer) -> str | None:
    """The plugin a layer's name says it runs, or None."""
    m = UNNAMED.search(layer.name)
    if m:
        return m.group(1)
    ops = (*MMDEPLOY, *BUILTIN)
    for t in _tokens(layer):
        m = LLM.match(t) or TRT_LIBRARY.match(t)
        if m:
            return m.group(1)
        hit = next((op for op in ops if t == op or re.fullmatch(re.escape(op) + r"[_.]\d+", t)), None)
        if hit:
            return hit
    return None


def pattern_op(pattern: str) -> str:
    """A `--plugin` value's op_type or layer-name pattern (`OP=module:callable`, layerwise's form, gives OP)."""
    return pattern.split("=", 1)[0].strip()


def matches(pattern: str, layer: EngineLayer) -> bool:
    """Whether a `--plugin` pattern names this layer (by op_type, layer name or ONNX node; `*`/`?` globs; `Op`
    also matches `Op_12` and `Op.12`)."""
    op = pattern_op(pattern)
    forms = (op, op + "_[0-9]*", op + ".[0-9]*")
    return bool(op) and any(fnmatch.fnmatchcase(t, f) for t in _tokens(layer) for f in forms)


def found_by(layer: EngineLayer, patterns: Sequence[str] = ()) -> tuple[str, str | None] | None:
    """(how the layer was told to be a plugin layer, the plugin it runs where known), or None: not a plugin layer."""
    types = f"{layer.type} {layer.raw.get('ParameterType', '')}"
    if PLUGIN_TYPE.search(types):
        return "layer type", known_plugin(layer)
    if is_copy(layer) or layer.name.startswith("{ForeignNode["):
        return None
    user = next((p for p in patterns if matches(p, layer)), None)
    if user is not None:
        return "--plugin", known_plugin(layer) or pattern_op(user)
    known = known_plugin(layer)
    return ("name", known) if known else None


def _tensor_names(items: Any) -> list[str]:
    if not isinstance(items, list):
        return []
    return [str(t["Name"]) for t in items if isinstance(t, dict) and isinstance(t.get("Name"), str)]


class Flow:
    """The engine's data flow where the export names each layer's input and output tensors (`--exportLayerInfo`
    with `--profilingVerbosity=detailed`); `known` is False otherwise."""

    def __init__(self, layers: list[EngineLayer]) -> None:
        self.inputs = [_tensor_names(layer.raw.get("Inputs")) for layer in layers]
        self.outputs = [_tensor_names(layer.raw.get("Outputs")) for layer in layers]
        self.producer: dict[str, int] = {t: i for i, names in enumerate(self.outputs) for t in names}
        self.consumers: dict[str, list[int]] = {}
        for i, names in enumerate(self.inputs):
            for t in names:
                self.consumers.setdefault(t, []).append(i)
        self.known = bool(self.producer) and bool(self.consumers)

    def upstream(self, i: int) -> set[int]:
        """Every layer whose output reaches layer i."""
        return reachable([i], lambda k: [self.producer[t] for t in self.inputs[k] if t in self.producer])

    def downstream(self, i: int) -> set[int]:
        """Every layer that reads what layer i writes, directly or not."""
        return reachable([i], lambda k: [c for t in self.outputs[k] for c in self.consumers.get(t, [])])


def next_to(i: int, layers: list[EngineLayer], flow: Flow) -> dict[int, tuple[str, str]]:
    """The reformat/copy layers next to layer i: index -> (side, by). Named for it always; then those that read its
    outputs or write its inputs (through chains of copies) where the export names tensors, else the copies right
    before and after it in the layer order."""
    out: dict[int, tuple[str, str]] = {}
    for j, layer in enumerate(layers):
        m = COPY_FOR.match(layer.name)
        if m and m.group(2) == layers[i].name:
            out[j] = ("input" if m.group(1) == "Input" else "output", "name")
    if flow.known:
        for side, step in (("output", flow.outputs), ("input", flow.inputs)):
            todo = [i]
            while todo:
                k = todo.pop()
                for t in step[k]:
                    near = flow.consumers.get(t, []) if side == "output" else [flow.producer.get(t, -1)]
                    for j in near:
                        if j >= 0 and j not in out and is_copy(layers[j]):
                            out[j] = (side, "tensor")
                            todo.append(j)
    else:
        for side, walk in (("input", range(i - 1, -1, -1)), ("output", range(i + 1, len(layers)))):
            for j in walk:
                if not is_copy(layers[j]):
                    break
                out.setdefault(j, (side, "order"))
    return dict(sorted(out.items()))


def _sum(values: list[float | None]) -> float | None:
    return sum(v or 0.0 for v in values) if any(v is not None for v in values) else None


def plugin_layers(layers: list[EngineLayer], total: float | None, patterns: Sequence[str] = ()) -> list[PluginLayer]:
    """The engine's plugin layers with their time, share and the reformat/copy layers next to them."""
    flow: Flow | None = None
    out = []
    for i, layer in enumerate(layers):
        found = found_by(layer, patterns)
        if found is None:
            continue
        flow = flow or Flow(layers)
        near = [
            NextLayer(name=layers[j].name, type=layers[j].type, side=side, by=by, avg_ms=layers[j].avg_ms)
            for j, (side, by) in next_to(i, layers, flow).items()
        ]
        near_ms = _sum([n.avg_ms for n in near])
        both = _sum([layer.avg_ms, near_ms])
        out.append(
            PluginLayer(
                name=layer.name,
                type=layer.type,
                plugin=found[1],
                found_by=found[0],
                avg_ms=layer.avg_ms,
                share=layer.avg_ms / total if total and layer.avg_ms is not None else None,
                next_to=near,
                next_to_ms=near_ms,
                share_with_next_to=both / total if total and both is not None else None,
            )
        )
    return out
