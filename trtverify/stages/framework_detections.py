"""The framework stage's detection outputs, compared box to box (PyTorch's detections against the export's in ONNX
Runtime, plugins included): NMS output orders boxes of near-equal scores by arithmetic the two runtimes do not share,
and a plugin's reference (e.g. EfficientNMS_TRT's) orders ties its own way, so index-by-index comparison would fail
a correct export. Layouts are recognised on the ONNX side (compare/detlayout.py); the checks are layerwise's FP32
defaults (stages.layerwise.detections); naming an output under stages.framework.outputs compares it elementwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from trtverify.compare.checks import CheckResult
from trtverify.compare.detections import DetectionError, DetectionStats
from trtverify.compare.detlayout import Layout, TensorInfo, paired_images, recognise
from trtverify.config.layerwise import detection_checks
from trtverify.graph.onnxgraph import GraphIndex
from trtverify.stages.layerwise.detections import judge
from trtverify.stages.layerwise.detmodels import DetectionRow

NAME = "framework"
IOU = 0.5


@dataclass(frozen=True)
class Group:
    onnx: Layout  # roles -> ONNX output names
    torch: Layout  # roles -> PyTorch output names


def groups(
    graph: GraphIndex, first: Mapping[str, np.ndarray], pairs: Sequence[tuple[str, str]], elementwise: set[str]
) -> list[Group]:
    """Detection layouts among the ONNX outputs (`first`: ONNX Runtime's first sample) that pair whole with PyTorch
    outputs (`pairs`: PyTorch name, ONNX name), none of them named in `elementwise`."""
    infos = []
    for name, value in first.items():
        p = graph.producers.get(name)
        slot = [o for o in graph.nodes[p.index].output].index(name) if p else 0
        infos.append(TensorInfo(name, tuple(np.shape(value)), str(np.asarray(value).dtype),
                                p.op_type if p else None, p.node if p else None, slot, True))  # fmt: skip
    to_torch = {c: r for r, c in pairs}
    out = []
    for lay in recognise(infos, first.get):
        if any(t not in to_torch or t in elementwise for t in lay.tensors):
            continue
        roles = {r: to_torch[t] if t is not None else None for r, t in lay.roles.items()}
        out.append(Group(lay, Layout(lay.kind, roles, lay.source)))
    return out


def compare(
    found: list[Group], torch_outs: list[dict[str, np.ndarray]], onnx_outs: list[dict[str, np.ndarray]]
) -> tuple[list[DetectionRow], list[CheckResult]]:
    rows, results = [], []
    checks = detection_checks("fp32")
    for g in found:
        stats = DetectionStats(iou=IOU)
        errors = []
        for si, (t_out, o_out) in enumerate(zip(torch_outs, onnx_outs)):
            try:
                stats.add(si, *paired_images(g.torch, t_out, g.onnx, o_out))
            except (DetectionError, KeyError) as exc:
                errors.append(f"sample {si}: {exc}")
        row, judged = judge(g.onnx, g.torch, stats, errors, checks, iou=IOU, samples=len(onnx_outs), stage=NAME)
        rows.append(row)
        results += judged
    return rows, results
