"""Links between build-log engine layers and layerwise rows (the ONNX nodes they were built from).

A TensorRT layer names the ONNX nodes fused into it (`onnx_nodes`, from the log's layer
information), and its own name usually starts with the node it came from
("/features/block1/conv/Conv" -> "/features/block1/conv/Conv_myl0_1"). Ids are built from
positions, never from names: names are user data and may hold anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import PurePath
from typing import Any, NamedTuple

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


def layer_nodes(layer: Mapping[str, Any], nodes: Iterable[str]) -> set[str]:
    """The nodes (out of `nodes`) a build-log layer holds: those it lists in onnx_nodes, plus the one its name derives from."""
    nodes = set(nodes)
    found = {n for n in layer.get("onnx_nodes") or [] if n in nodes}
    by_name = prefix_node(str(layer.get("name") or ""), nodes)
    if by_name is not None:
        found.add(by_name)
    return found


def candidates_for_log(log: str, candidates: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indices of the candidates a build log belongs to: those whose model file stem appears in the
    log's file name (fashion_cnn_int8_qdq.onnx -> fashion_cnn_int8_qdq__mark_all.log); all when none does."""
    log_stem = PurePath(str(log)).stem
    hits = [
        i for i, c in enumerate(candidates) if (stem := PurePath(str(c.get("model") or "")).stem) and stem in log_stem
    ]
    return hits or list(range(len(candidates)))


def build_links(stages: Sequence[Mapping[str, Any]]) -> tuple[dict[str, list[Link]], dict[str, list[Link]]]:
    """({layer id: links to layerwise rows}, {row id: links to build-log layers}) for one run's stages."""
    layerwise = next((s for s in stages if s.get("name") == "layerwise"), None)
    buildlog = next((s for s in stages if s.get("name") == "buildlog"), None)
    to_rows: dict[str, list[Link]] = {}
    to_layers: dict[str, list[Link]] = {}
    if layerwise is None or buildlog is None:
        return to_rows, to_layers
    candidates = layerwise.get("candidates") or []
    by_node: list[dict[str, list[dict[str, Any]]]] = []
    for cand in candidates:
        index: dict[str, list[dict[str, Any]]] = {}
        for row in cand.get("rows") or []:
            if row.get("node"):
                index.setdefault(row["node"], []).append(row)
        by_node.append(index)
    for li, log in enumerate(buildlog.get("logs") or []):
        for ci in candidates_for_log(log.get("log", ""), candidates):
            cand, index = candidates[ci], by_node[ci]
            for ki, layer in enumerate(log.get("layers") or []):
                lid = layer_id(li, ki)
                for node in sorted(layer_nodes(layer, index), key=lambda n: index[n][0]["topo_index"]):
                    for row in index[node]:
                        rid = row_id(ci, row["topo_index"])
                        to_rows.setdefault(lid, []).append(
                            Link(rid, f"{cand.get('name')} #{row['topo_index']} {row.get('op_type') or ''}".rstrip())
                        )
                        to_layers.setdefault(rid, []).append(Link(lid, str(layer.get("name"))))
    return to_rows, to_layers
