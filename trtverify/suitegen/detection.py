"""`trtverify init` on a detector: which NMS ends the model and how its outputs hold the boxes, read from the graph
alone (nothing runs), for the suite's e2e example (task detection with the layout found, not classification).

An NMS is an ONNX NonMaxSuppression node (anywhere, subgraphs included: torchvision puts it inside an If) or a
TensorRT NMS plugin node. The layout is read from the graph outputs as the e2e stage's built-in layouts name them
(config/postprocess.py): `nms` (count, boxes, scores, classes: the NMS plugins' four outputs, or outputs of those
shapes), `mmdeploy` (dets [B, K, 5], labels [B, K]), `rows` ([B, K, 6] or [K, 6]), `torchvision` (boxes [K, 4],
scores [K], labels [K] of one image); outputs that fit none get a postprocess hook to write.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from trtverify.graph.onnxgraph import nested_nodes
from trtverify.graph.onnxinfo import TensorMeta

NMS_PLUGINS = {"EfficientNMS_TRT": "nms", "BatchedNMS_TRT": "nms", "BatchedNMSDynamic_TRT": "nms"}
NMS_PLUGINS["TRTBatchedNMS"] = "mmdeploy"
ROLES = {
    "nms": ("count", "boxes", "scores", "classes"),
    "mmdeploy": ("dets", "labels"),
    "torchvision": ("boxes", "scores", "labels"),
}


@dataclass(frozen=True)
class Detector:
    nms: str  # what the NMS is: "EfficientNMS_TRT node 'x'", "ONNX NonMaxSuppression"
    layout: str | None  # a built-in layout, or None: a hook decodes the outputs
    outputs: dict[str, str]  # role -> output name (layouts nms, mmdeploy)
    output: str | None  # the one output read (layout rows)
    why: str  # how the layout was found, or what the outputs are where none fits


def _floating(m: TensorMeta) -> bool:
    return "float" in m.dtype


def _integer(m: TensorMeta) -> bool:
    return m.dtype.startswith(("int", "uint"))


def _shape(m: TensorMeta) -> str:
    """'[?, 4]': a dynamic dimension as ?, whatever the exporter named it."""
    dims = ["?" if not (isinstance(d, int) and d > 0) else str(d) for d in m.shape or ()]
    return f"[{', '.join(dims)}]" if m.shape is not None else "[rank unknown]"


def _by_shape(outputs: list[TensorMeta]) -> tuple[str | None, dict[str, str], str | None, str]:
    """The built-in layout the graph outputs fit by shape and type: (layout, outputs, output, why)."""
    shaped = [m for m in outputs if m.shape is not None]
    rows = [m for m in shaped if _floating(m) and len(m.shape or ()) in (2, 3) and (m.shape or ())[-1] == 6]
    if len(rows) == 1:
        return "rows", {}, rows[0].name, f"output '{rows[0].name}' {_shape(rows[0])}: rows of 6"
    for dets in (m for m in shaped if _floating(m) and len(m.shape or ()) == 3 and (m.shape or ())[-1] == 5):
        labels = [m for m in shaped if _integer(m) and tuple(m.shape or ()) == tuple(dets.shape or ())[:2]]
        if len(labels) == 1:
            return "mmdeploy", {"dets": dets.name, "labels": labels[0].name}, None, "outputs dets [B, K, 5], labels"
    for boxes in (m for m in shaped if _floating(m) and len(m.shape or ()) == 3 and (m.shape or ())[-1] == 4):
        bk = tuple(boxes.shape or ())[:2]
        same = [m for m in shaped if m is not boxes and tuple(m.shape or ()) == bk]
        scores = [m for m in same if _floating(m)]
        classes = [m for m in same if _integer(m)] or [m for m in scores if "class" in m.name or "label" in m.name]
        scores = [m for m in scores if m not in classes]
        counts = [m for m in shaped if _integer(m) and tuple(m.shape or ()) in (bk[:1] + (1,), bk[:1])]
        if len(scores) == 1 and len(classes) == 1 and len(counts) == 1:
            names = (counts[0].name, boxes.name, scores[0].name, classes[0].name)
            return "nms", dict(zip(ROLES["nms"], names)), None, "outputs count, boxes [B, K, 4], scores, classes"
    for boxes in (m for m in shaped if _floating(m) and len(m.shape or ()) == 2 and (m.shape or ())[-1] == 4):
        k = (boxes.shape or ())[0]  # exporters name K differently per output: a dynamic K matches any
        same = [
            m
            for m in shaped
            if len(m.shape or ()) == 1
            and (not isinstance(k, int) or not isinstance(m.shape[0], int) or m.shape[0] == k)
        ]
        scores, labels = [m for m in same if _floating(m)], [m for m in same if _integer(m)]
        if len(scores) == 1 and len(labels) == 1:
            names = (boxes.name, scores[0].name, labels[0].name)
            why = "outputs boxes [K, 4], scores [K], labels [K] (torchvision's detection models, one image)"
            return "torchvision", dict(zip(ROLES["torchvision"], names)), None, why
    listed = ", ".join(f"{m.name} {_shape(m)}" for m in outputs)
    return None, {}, None, f"outputs {listed} fit no built-in layout"


def detector(model: Any, outputs: list[TensorMeta]) -> Detector | None:
    """The detector `model` (an onnx ModelProto, weights not needed) is, or None where no NMS is in it."""
    plugin = next((n for n in nested_nodes(model.graph) if n.op_type in NMS_PLUGINS), None)
    if plugin is not None:
        nms = f"{plugin.op_type} node '{plugin.name}'" if plugin.name else f"{plugin.op_type} node"
        layout = NMS_PLUGINS[plugin.op_type]
        produced = list(plugin.output)
        names = {m.name for m in outputs}
        if len(produced) >= len(ROLES[layout]) and all(p in names for p in produced[: len(ROLES[layout])]):
            roles = dict(zip(ROLES[layout], produced))
            return Detector(nms, layout, roles, None, f"the {plugin.op_type} node's outputs are the model's")
        layout_found, roles, output, why = _by_shape(outputs)
        return Detector(nms, layout_found, roles, output, why)
    if not any(n.op_type == "NonMaxSuppression" for n in nested_nodes(model.graph)):
        return None
    layout_found, roles, output, why = _by_shape(outputs)
    return Detector("ONNX NonMaxSuppression", layout_found, roles, output, why)


def e2e_lines(det: Detector, q: Any, size: tuple[int, int] | None) -> list[str]:
    """The commented e2e example of a detector (`q`: how init quotes a YAML scalar; `size`: the model input's
    height and width where it fixes them)."""
    resize = f"resize: [{size[0]}, {size[1]}], " if size else ""
    out = [
        f"  # e2e:                            # {det.nms} ends the model: COCO mAP on a validation set",
        "  #   task: detection",
        "  #   dataset: {coco: val/instances.json}   # COCO annotations; the images in val/images (or images:)",
        f"  #   preprocess: {{{resize}scale: 0.00392156862745098, layout: NCHW}}",
    ]
    if det.layout == "rows":
        out.append(f"  #   # layout found: {det.why}")
        out.append(f"  #   postprocess: {{layout: rows, output: {q(det.output)}}}")
    elif det.layout is not None:
        roles = ", ".join(f"{r}: {q(n)}" for r, n in det.outputs.items())
        out.append(f"  #   # layout found: {det.why}")
        out.append(f"  #   postprocess: {{layout: {det.layout}, outputs: {{{roles}}}}}")
    else:
        out.append(f"  #   # {det.why}: decode them in a hook, (outputs, image_sizes, input_size) -> [K, 6] per image")
        out.append('  #   postprocess: {hook: "my_postprocess:decode"}')
    out.append("  #   gates: [{metric: map, max_drop: 0.01}, {metric: ap50, max_drop: 0.01}]")
    return out
