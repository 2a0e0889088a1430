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
from typing import Any, NamedTuple

from trtverify.report.kinds import with_layers
from trtverify.stages.base import StageResult
from trtverify.stages.layerwise.models import LayerwiseCandidate, LayerwiseResult, Row

# what may follow a node name inside a layer name derived from it ("Conv_myl0_1", "Conv + Relu", "Conv.1")
_BOUNDARY = re.compile(r"[^A-Za-z0-9]")


class Link(NamedTuple):
    id: str  # the target element's id, without "#"
    label: str


def row_id(candidate_index: int, topo_index: int, stage: int | None = None) -> str:
    """A layerwise row's id; `stage`: the stage's index where a shape sweep gives several layerwise stages."""
    return f"lw-c{candidate_index}-t{topo_index}" if stage is None else f"lw-s{stage}-c{candidate_index}-t{topo_index}"


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


def rows_by_node(candidates: Sequence[LayerwiseCandidate]) -> list[dict[str, list[Row]]]:
    """Per layerwise candidate: ONNX node -> the rows of the tensors it produces."""
    out: list[dict[str, list[Row]]] = []
    for cand in candidates:
        index: dict[str, list[Row]] = {}
        for row in cand.rows:
            if row.node:
                index.setdefault(row.node, []).append(row)
        out.append(index)
    return out


def build_links(stages: Sequence[StageResult]) -> tuple[dict[str, list[Link]], dict[str, list[Link]]]:
    """({layer id: links to layerwise rows}, {row id: links to build-log layers}) for one run's stages."""
    layerwise = next((s for s in stages if isinstance(s, LayerwiseResult)), None)
    buildlog: Any = with_layers(stages, "build")
    to_rows: dict[str, list[Link]] = {}
    to_layers: dict[str, list[Link]] = {}
    if layerwise is None or buildlog is None:
        return to_rows, to_layers
    candidates = layerwise.candidates or []
    by_node = rows_by_node(candidates)
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


def engine_layer_id(engine_index: int, row_index: int) -> str:
    return f"pf-e{engine_index}-l{row_index}"


class PerfLinks(NamedTuple):
    """Links of the perf stage's engine layers (`--exportLayerInfo` rows), by element id."""

    to_rows: dict[str, list[Link]]  # engine layer id -> layerwise rows of its ONNX nodes
    to_log: dict[str, list[Link]]  # engine layer id -> build-log layers of the same name or nodes
    back: dict[str, list[Link]]  # layerwise row id or build-log layer id -> engine layers


def engine_candidates(name: str, files: Sequence[str], models: Sequence[str], names: Sequence[str]) -> list[int]:
    """Indices of the layerwise candidates an engine was built from: the candidate of the same name, else those
    whose model file stem appears in one of the engine's file or folder names, else all."""
    if name in names:
        return [names.index(name)]
    hits = [
        i
        for i, m in enumerate(models)
        if (stem := PurePath(m).stem) and any(stem in PurePath(str(f)).name for f in files)
    ]
    return hits or list(range(len(models)))


def perf_links(stages: Sequence[StageResult]) -> PerfLinks:
    """Engine layers of the perf stage <-> layerwise rows (by the layer's ONNX nodes, as build-log layers are
    linked) and <-> build-log layers (same layer name, or an ONNX node in common; with a layerwise stage, only
    nodes that are layerwise rows count, and only logs of the engine's candidates)."""
    out = PerfLinks({}, {}, {})
    perf: Any = with_layers(stages, "engine")
    if perf is None or not perf.engines:
        return out
    layerwise = next((s for s in stages if isinstance(s, LayerwiseResult)), None)
    buildlog: Any = with_layers(stages, "build")
    candidates = layerwise.candidates or [] if layerwise is not None else []
    models, names = [c.model for c in candidates], [c.name for c in candidates]
    by_node = rows_by_node(candidates)
    all_nodes = {n for index in by_node for n in index}
    # build-log layers by name and by node: (log index, layer index, the log's candidates)
    log_by_name: dict[str, list[tuple[int, int]]] = {}
    log_by_node: dict[str, list[tuple[int, int]]] = {}
    log_cands: list[set[int]] = []
    logs = buildlog.logs or [] if buildlog is not None else []
    for li, log in enumerate(logs):
        log_cands.append(set(candidates_for_log(log.log, models)))
        for ki, layer in enumerate(log.layers):
            log_by_name.setdefault(layer.name, []).append((li, ki))
            nodes = layer_nodes(layer.name, layer.onnx_nodes, all_nodes) if candidates else set(layer.onnx_nodes)
            for n in nodes:
                log_by_node.setdefault(n, []).append((li, ki))
    for ei, engine in enumerate(perf.engines):
        cis = engine_candidates(engine.name, engine.files, models, names) if candidates else []
        for ri, layer in enumerate(engine.audit.rows):
            eid = engine_layer_id(ei, ri)
            label = f"{engine.name}: {layer.name}"
            for ci in cis:
                index = by_node[ci]
                for node in sorted(
                    layer_nodes(layer.name, layer.onnx_nodes, index), key=lambda n: index[n][0].topo_index
                ):
                    for row in index[node]:
                        rid = row_id(ci, row.topo_index)
                        out.to_rows.setdefault(eid, []).append(
                            Link(rid, f"{candidates[ci].name} #{row.topo_index} {row.op_type or ''}".rstrip())
                        )
                        out.back.setdefault(rid, []).append(Link(eid, label))
            nodes = layer_nodes(layer.name, layer.onnx_nodes, all_nodes) if candidates else set(layer.onnx_nodes)
            hits = list(log_by_name.get(layer.name, []))
            for n in sorted(nodes):
                hits += [h for h in log_by_node.get(n, []) if not cis or log_cands[h[0]] & set(cis)]
            for li, ki in sorted(set(hits)):
                lid = layer_id(li, ki)
                out.to_log.setdefault(eid, []).append(Link(lid, logs[li].layers[ki].name))
                out.back.setdefault(lid, []).append(Link(eid, label))
    return out
