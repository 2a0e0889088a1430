"""The fusions a plugin cut (`engine diff` of a build with a plugin against one without it).

A unit of an engine is one layer, or the kernels of one TensorRT 10 Myelin graph (names ending in `_myl3_0`,
`_myl3_1`, ...); a `{ForeignNode[...]}` layer is a Myelin region as one layer. A unit F of build X is cut by a
plugin P of build Y when the ONNX nodes F runs as one unit are run in Y by two or more units (reformat/copy layers
and plugins left out), at least one of them before P and one after it: along the data flow where Y's export names
tensors (a piece upstream of P, a piece downstream of it), else by Y's layer order. F could not stay whole with P
between its nodes: P cut it.

The cost of a cut: Y's pieces, P, and the reformat/copy layers serving the pieces or next to P, against F and the
copies serving it (a plugin cutting two units is counted in each).
"""

from __future__ import annotations

import re

from pydantic import Field

from trtverify.engine.exports import EngineLayer
from trtverify.engine.plugins import Flow, is_copy, next_to
from trtverify.util.record import Record

MYELIN_GRAPH = re.compile(r"_myl(\d+)_\d+$")


class FusionCut(Record):
    """A layer (or Myelin region) of one build whose nodes run on both sides of a plugin in the other build."""

    plugins: list[str] = Field(description="the plugin layer(s) of `plugin_build` between the pieces")
    plugin_build: str = Field(description="A or B: the build with the plugin")
    fused: list[str] = Field(description="the layer of the other build (a Myelin graph: its kernels) that was whole")
    pieces: list[str] = Field(description="the layers of `plugin_build` that run its nodes, in their layer order")
    myelin: bool = Field(description="the fused unit is a Myelin region ({ForeignNode[...]} or a Myelin graph)")
    by: str = Field(description="tensor: told along the data flow; order: by the layer order (no tensor names)")
    fused_ms: float | None = Field(description="the fused unit and the reformat/copy layers serving it")
    cut_ms: float | None = Field(description="the pieces, the plugin(s), and the reformat/copy layers serving them")
    delta_ms: float | None = Field(description="cut_ms - fused_ms")
    copies: int = Field(description="reformat/copy layers counted in cut_ms")


def _units(layers: list[EngineLayer], skip: set[int]) -> list[list[int]]:
    units: list[list[int]] = []
    graphs: dict[str, int] = {}
    for i, layer in enumerate(layers):
        if i in skip:
            continue
        m = MYELIN_GRAPH.search(layer.name)
        if m and m.group(1) in graphs:
            units[graphs[m.group(1)]].append(i)
            continue
        if m:
            graphs[m.group(1)] = len(units)
        units.append([i])
    return units


def _myelin(layers: list[EngineLayer], unit: list[int]) -> bool:
    return any(
        layers[i].name.startswith("{ForeignNode[") or MYELIN_GRAPH.search(layers[i].name) or layers[i].type == "Myelin"
        for i in unit
    )


def _sum(layers: list[EngineLayer], idx: set[int]) -> float | None:
    values = [layers[i].avg_ms for i in idx]
    return sum(v or 0.0 for v in values) if any(v is not None for v in values) else None


def _serving(layers: list[EngineLayer], unit_idx: set[int]) -> set[int]:
    """The reformat/copy layers named for the unit's layers."""
    names = {layers[i].name for i in unit_idx}
    return {j for j, layer in enumerate(layers) if is_copy(layer) and layer.feeds in names}


def cuts(a: list[EngineLayer], b: list[EngineLayer], a_plugins: set[str], b_plugins: set[str]) -> list[FusionCut]:
    """Every unit of one build cut by a plugin of the other, A's units cut in B first."""
    out = []
    for x, y, x_plugins, y_plugins, build in ((a, b, a_plugins, b_plugins, "B"), (b, a, b_plugins, a_plugins, "A")):
        at = [i for i, layer in enumerate(y) if layer.name in y_plugins]
        if at:
            out += _cuts_by(x, y, at, build, x_plugins)
    return out


def _cuts_by(
    x: list[EngineLayer], y: list[EngineLayer], at: list[int], build: str, x_plugins: set[str]
) -> list[FusionCut]:
    y_units = _units(y, {i for i, layer in enumerate(y) if is_copy(layer)} | set(at))
    unit_of: dict[str, set[int]] = {}
    for u, members in enumerate(y_units):
        for i in members:
            for node in y[i].onnx_nodes:
                unit_of.setdefault(node, set()).add(u)
    flow = Flow(y)
    sides = {p: (flow.upstream(p), flow.downstream(p)) for p in at} if flow.known else {}
    x_skip = {i for i, layer in enumerate(x) if is_copy(layer) or layer.name in x_plugins}
    out = []
    for fused in _units(x, x_skip):
        pieces = sorted({u for i in fused for node in x[i].onnx_nodes for u in unit_of.get(node, ())})
        if len(pieces) < 2:
            continue
        between = []
        for p in at:
            if flow.known:
                up, down = sides[p]
                before = any(i in up for u in pieces for i in y_units[u])
                after = any(i in down for u in pieces for i in y_units[u])
            else:
                before = any(max(y_units[u]) < p for u in pieces)
                after = any(min(y_units[u]) > p for u in pieces)
            if before and after:
                between.append(p)
        if between:
            out.append(_cut(x, y, fused, [y_units[u] for u in pieces], between, build, flow))
    return out


def _cut(
    x: list[EngineLayer], y: list[EngineLayer], fused: list[int], pieces: list[list[int]], at: list[int], build: str,
    flow: Flow,
) -> FusionCut:  # fmt: skip
    fused_idx = set(fused) | _serving(x, set(fused))
    piece_idx = {i for piece in pieces for i in piece}
    near = {j for p in at for j in next_to(p, y, flow)}
    copies = _serving(y, piece_idx) | near
    fused_ms = _sum(x, fused_idx)
    cut_ms = _sum(y, piece_idx | set(at) | copies)
    return FusionCut(
        plugins=[y[p].name for p in at],
        plugin_build=build,
        fused=[x[i].name for i in fused],
        pieces=[y[i].name for i in sorted(piece_idx)],
        myelin=_myelin(x, fused),
        by="tensor" if flow.known else "order",
        fused_ms=fused_ms,
        cut_ms=cut_ms,
        delta_ms=cut_ms - fused_ms if cut_ms is not None and fused_ms is not None else None,
        copies=len(copies),
    )


def describe(c: FusionCut) -> str:
    """One line: which plugin cut what, into which pieces, at what cost."""
    other = "A" if c.plugin_build == "B" else "B"
    what = "Myelin region" if c.myelin else "fused layer"
    fused = " + ".join(c.fused) if len(c.fused) <= 3 else f"{c.fused[0]} ... {c.fused[-1]} ({len(c.fused)} kernels)"
    text = f"{', '.join(c.plugins)} in {c.plugin_build} cuts {other}'s {what} {fused} into {len(c.pieces)}: "
    text += " | ".join(c.pieces[:4]) + (" | ..." if len(c.pieces) > 4 else "")
    if c.fused_ms is not None and c.cut_ms is not None and c.delta_ms is not None:
        text += (
            f"; {c.fused_ms:.3f} ms in {other} -> {c.cut_ms:.3f} ms in {c.plugin_build} with the plugin and "
            f"{c.copies} reformat/copy layers ({c.delta_ms:+.3f} ms)"
        )
    else:
        text += "; no timing"
    if c.by == "order":
        text += " (told by layer order: the export names no tensors)"
    return text
