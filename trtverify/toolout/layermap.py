"""Captured tensors named by TensorRT (a fused layer's output, `(Unnamed Layer* 3) [Convolution]_output`, a debug
tensor of a fused layer) given their ONNX tensor's name through the engine's layer information: the JSON of
`trtexec --exportLayerInfo=FILE --profilingVerbosity=detailed` (the same as IEngineInspector's), whose layer records
name their output tensors (`Outputs[].Name`) and the ONNX nodes fused into them (`Metadata: [ONNX Layer: X]`, else
the parts of the fused name: toolout.layerinfo.nodes_of, which the engine audit reads them with too).

A TensorRT tensor maps to the output of the last (in the ONNX graph's order) of its layer's fused ONNX nodes: the
value a fused layer writes is what its last node computes. Where the node has several outputs, the layer's output
of the same position. A name as trtexec writes it into a debug-tensor file name (`safe_name`) is found too.
Reformat layers' tensors (a copy of a layer's input or output in another format) are not mapped. A name that already
is an ONNX tensor is kept; one whose ONNX tensor is captured under its own name, or claimed by an earlier layer,
stays unmapped (then compared as candidate-only), and is counted.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from trtverify.toolout.debugtensors import safe_name
from trtverify.toolout.layerinfo import nodes_of
from trtverify.util.errors import UsageError

LAYER_INFO = "layer_info.json"  # the name a kit folder holds it by


@dataclass
class LayerMap:
    """TensorRT tensor (or layer) name -> the ONNX node names of the layer that writes it, and its output position."""

    path: Path
    writers: dict[str, tuple[list[str], int]] = field(default_factory=dict)


def read_layer_map(path: Path) -> LayerMap:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the layer information ({exc.strerror or exc})") from None
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise UsageError(f"{path}: not a trtexec --exportLayerInfo JSON ({type(exc).__name__}: {exc})") from None
    layers = doc.get("Layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list):
        raise UsageError(f"{path}: no 'Layers' list: not a trtexec --exportLayerInfo / IEngineInspector file")
    out = LayerMap(Path(path))
    named_outputs = False
    for k, layer in enumerate(layers):
        if not isinstance(layer, dict):  # without --profilingVerbosity=detailed: names only
            continue
        name = layer.get("Name")
        outputs = layer.get("Outputs", [])
        if not isinstance(name, str) or not isinstance(outputs, list):
            raise UsageError(f"{path}: Layers[{k}]: expected {{'Name': str, 'Outputs': [...], ...}}")
        if layer.get("LayerType") == "Reformat" or name.startswith("Reformatting CopyNode"):
            continue  # a copy of another layer's input or output, in another format: its tensors stay unmapped
        nodes = nodes_of(name, layer)
        for pos, o in enumerate(outputs):
            if isinstance(o, dict) and isinstance(o.get("Name"), str):
                out.writers.setdefault(o["Name"], (nodes, pos))
                named_outputs = True
        out.writers.setdefault(name, (nodes, 0))
    if not named_outputs:
        raise UsageError(f"{path}: its layers name no output tensors: export it with --profilingVerbosity=detailed")
    return out


def onnx_names(
    captured: Sequence[str], lmap: LayerMap, nodes: Sequence[tuple[str, Sequence[str]]], tensors: set[str]
) -> tuple[dict[str, str], list[str]]:
    """({captured name: ONNX tensor} for the names mapped, [names not mapped]). `nodes`: the ONNX graph's (node
    name, outputs) in topological order; `tensors`: its tensor names. ONNX names are neither."""
    order = {n: (i, list(outs)) for i, (n, outs) in enumerate(nodes)}
    safe: dict[str, tuple[list[str], int]] = {}  # trtexec's debug-tensor files name tensors by genFilenameSafeString
    for k, v in lmap.writers.items():
        safe.setdefault(safe_name(k), v)
    taken = set(captured) & tensors
    mapped: dict[str, str] = {}
    unmapped: list[str] = []
    for name in captured:
        if name in tensors:
            continue
        writer = lmap.writers.get(name) or safe.get(name)
        known = [n for n in (writer[0] if writer else []) if n in order]
        if not known:
            unmapped.append(name)
            continue
        i, outs = order[max(known, key=lambda n: order[n][0])]
        outs = [o for o in outs if o]
        target = outs[writer[1]] if writer and writer[1] < len(outs) else (outs[0] if outs else None)  # type: ignore[index]
        if target is None or target in taken:
            unmapped.append(name)
            continue
        taken.add(target)
        mapped[name] = target
    return mapped, unmapped


__all__ = ["LAYER_INFO", "LayerMap", "onnx_names", "read_layer_map"]
