"""Links between build-log engine layers and layerwise rows (the ONNX nodes they were built from).

A TensorRT layer names the ONNX nodes fused into it (`onnx_nodes`, from the log's layer
information), and its own name usually starts with the node it came from
("/features/block1/conv/Conv" -> "/features/block1/conv/Conv_myl0_1"). Ids are built from
positions, never from names: names are user data and may hold anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import PurePath
from typing import NamedTuple

from trtverify.stages.base import StageResult
from trtverify.stages.buildlog import BuildlogResult
from trtverify.stages.layerwise.models import LayerwiseResult, Row

# what may follow a node name inside a layer name derived from it ("Conv_myl0_1", "Conv + Relu", "Conv.1")
_BOUNDARY = re.compile(r"[^A-Za-z0-9]")


class Link(NamedTuple):
    id: str  # the target element's id, without "#"
    label: str


def row_id(candidate_index: int, topo_index: int) -> str:
    return f"lw-c{candidate_index}-t{topo_index}"


def layer_id(log_index: int, layer_index: int) -> str:
    return f"bl-l{log_index}-{layer_index}"


def prefix_node(layer_name: str, nodes: Iterable[str]) -> str | None:
    """The longest node name that `layer_name` starts with, followed by its end or a non-alphanumeric
    character (so node "/a/Conv" is not read into layer "/a/Conv2_myl0_3")."""
    best: str | None = None
    for node in nodes:
        if (
            node
            and layer_name.startswith(node)
            and (len(layer_name) == len(node) or _BOUNDARY.match(layer_name[len(node)]))
        ):
            if best is None or len(node) > len(best):
                best = node
    return best


def layer_nodes(name: str, onnx_nodes: Iterable[str], nodes: Iterable[str]) -> set[str]:
    """The nodes (out of `nodes`) a build-log layer holds: those it lists in onnx_nodes, plus the one its
    name derives from."""
    nodes = set(nodes)
    found = {n for n in onnx_nodes if n in nodes}
    by_name = prefix_node(name, nodes)
    if by_name is not None:
        found.add(by_name)
    return found


def candidates_for_log(log: str, models: Sequence[str]) -> list[int]:
    """Indices of the candidate models a build log belongs to: those whose file stem appears in the
    log's file name (fashion_cnn_int8_qdq.onnx -> fashion_cnn_int8_qdq__mark_all.log); all when none does."""
    log_stem = PurePath(str(log)).stem
    hits = [i for i, m in enumerate(models) if (stem := PurePath(m).stem) and stem in log_stem]
    return hits or list(range(len(models)))


def build_links(stages: Sequence[StageResult]) -> tuple[dict[str, list[Link]], dict[str, list[Link]]]:
    """({layer id: links to layerwise rows}, {row id: links to build-log layers}) for one run's stages."""
    layerwise = next((s for s in stages if isinstance(s, LayerwiseResult)), None)
    buildlog = next((s for s in stages if isinstance(s, BuildlogResult)), None)
    to_rows: dict[str, list[Link]] = {}
    to_layers: dict[str, list[Link]] = {}
    if layerwise is None or buildlog is None:
        return to_rows, to_layers
    candidates = layerwise.candidates or []
    by_node: list[dict[str, list[Row]]] = []
    for cand in candidates:
        index: dict[str, list[Row]] = {}
        for row in cand.rows:
            if row.node:
                index.setdefault(row.node, []).append(row)
        by_node.append(index)
    models = [c.model for c in candidates]
    for li, log in enumerate(buildlog.logs or []):
        for ci in candidates_for_log(log.log, models):
            cand, index = candidates[ci], by_node[ci]
            for ki, layer in enumerate(log.layers):
                lid = layer_id(li, ki)
                held = layer_nodes(layer.name, layer.onnx_nodes, index)
                for node in sorted(held, key=lambda n: index[n][0].topo_index):
                    for row in index[node]:
                        rid = row_id(ci, row.topo_index)
                        label = f"{cand.name} #{row.topo_index} {row.op_type or ''}".rstrip()
                        to_rows.setdefault(lid, []).append(Link(rid, label))
                        to_layers.setdefault(rid, []).append(Link(lid, layer.name))
    return to_rows, to_layers
