"""`trtverify engine diff A --vs B`: two builds of one model, layer groups lined up by the ONNX nodes they
implement (union of layers sharing a node, across both builds), so differently fused builds compare."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import Field

from trtverify.engine.audit import Audit, EngineFinding, audit_layers, engine_layers
from trtverify.engine.exports import EngineLayer
from trtverify.engine.fusion import FusionCut, cuts, describe
from trtverify.util.record import Record
from trtverify.util.words import count

RANKED = 5


class DiffRow(Record):
    a_layers: list[str]
    b_layers: list[str]
    onnx_nodes: list[str]
    a_ms: float
    b_ms: float
    delta_ms: float = Field(description="b_ms - a_ms")
    a_precision: list[str]
    b_precision: list[str]


class EngineDiff(Record):
    total_a_ms: float | None = Field(description="sum of A's layer times; null: A's files hold no timing")
    total_b_ms: float | None = Field(description="sum of B's layer times; null: B's files hold no timing")
    rows: list[DiffRow] = Field(description="every layer of A and of B in exactly one row; largest |delta| first")
    fusion_cuts: list[FusionCut] = Field(
        default_factory=list, description="layers or Myelin regions of one build cut by a plugin of the other"
    )
    findings: list[EngineFinding]


def _group_keys(layers: list[EngineLayer]) -> list[set[str]]:
    """The ONNX nodes each layer stands for (reformat layers: those of the layer they serve)."""
    by_name = {layer.name: layer for layer in layers}
    keys = []
    for layer in layers:
        target = by_name.get(layer.feeds or "") if layer.feeds else None
        nodes = set(target.onnx_nodes if target is not None else layer.onnx_nodes)
        keys.append(nodes or {f"<layer>{layer.name}"})
    return keys


def diff(a_paths: list[Path], b_paths: list[Path], plugins: Sequence[str] = ()) -> EngineDiff:
    """Two builds read from their files (exports, or a console log's listing and profile table); `plugins`:
    `--plugin` patterns (trtverify.engine.plugins)."""
    a, b = engine_layers(a_paths), engine_layers(b_paths)
    return diff_read(a[0], b[0], audit_layers(*a, plugins=plugins), audit_layers(*b, plugins=plugins))


def diff_read(a_layers: list[EngineLayer], b_layers: list[EngineLayer], a_audit: Audit, b_audit: Audit) -> EngineDiff:
    """Two builds already read and audited (the perf stage reads and audits each engine once)."""
    items = [("a", layer, key) for layer, key in zip(a_layers, _group_keys(a_layers))]
    items += [("b", layer, key) for layer, key in zip(b_layers, _group_keys(b_layers))]
    parent = list(range(len(items)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner: dict[str, int] = {}
    for i, (_, _, key) in enumerate(items):
        for node in key:
            if node in owner:
                parent[find(i)] = find(owner[node])
            else:
                owner[node] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(items)):
        groups.setdefault(find(i), []).append(i)
    rows = []
    for members in groups.values():
        a = [items[i][1] for i in members if items[i][0] == "a"]
        b = [items[i][1] for i in members if items[i][0] == "b"]
        nodes = sorted({n for i in members for n in items[i][2] if not n.startswith("<layer>")})
        a_ms = sum(layer.avg_ms or 0.0 for layer in a)
        b_ms = sum(layer.avg_ms or 0.0 for layer in b)
        rows.append(
            DiffRow(
                a_layers=[layer.name for layer in a],
                b_layers=[layer.name for layer in b],
                onnx_nodes=nodes,
                a_ms=a_ms,
                b_ms=b_ms,
                delta_ms=b_ms - a_ms,
                a_precision=sorted({layer.precision or "?" for layer in a}),
                b_precision=sorted({layer.precision or "?" for layer in b}),
            )
        )
    rows.sort(key=lambda r: -abs(r.delta_ms))
    total_a = _total(a_layers)
    total_b = _total(b_layers)
    cut = cuts(a_layers, b_layers, {p.name for p in a_audit.plugins}, {p.name for p in b_audit.plugins})
    found = _findings(a_audit, b_audit, rows, total_a, total_b) + _plugin_findings(a_audit, b_audit, cut)
    return EngineDiff(total_a_ms=total_a, total_b_ms=total_b, rows=rows, fusion_cuts=cut, findings=found)


def _plugin_findings(a: Audit, b: Audit, cut: list[FusionCut]) -> list[EngineFinding]:
    """Plugin layers only one build has (or not the same in both), and each fusion a plugin cut."""
    out = []
    na, nb = [p.name for p in a.plugins], [p.name for p in b.plugins]
    if na != nb:
        parts = []
        for build, audit in (("A", a), ("B", b)):
            for p in audit.plugins:
                if p.name not in (nb if build == "A" else na):
                    ms = f"{p.avg_ms:.3f} ms" if p.avg_ms is not None else "no timing"
                    near = f", {p.next_to_ms:.3f} ms" if p.next_to_ms is not None else ""
                    parts.append(f"{p.name} only in {build} ({ms}; {count(len(p.next_to), 'reformat/copy layer')} "
                                 f"next to it{near})")  # fmt: skip
        message = f"plugin layers {len(na)} -> {len(nb)}" + (": " + "; ".join(parts) if parts else "")
        out.append(EngineFinding(kind="plugins", severity="info", layers=list(dict.fromkeys(na + nb)),
                                 message=message))  # fmt: skip
    for c in cut:
        slower = c.delta_ms is not None and c.delta_ms > 0
        out.append(EngineFinding(kind="fusion_cut", severity="medium" if slower else "info",
                                 layers=c.plugins + c.fused + c.pieces, message=describe(c)))  # fmt: skip
    return out


def _total(layers: list[EngineLayer]) -> float | None:
    """The build's summed layer time; None when none of its layers is timed (no profile among its files): a
    build without timing is 'no timing', never 0 ms."""
    if not any(layer.avg_ms is not None for layer in layers):
        return None
    return sum(layer.avg_ms or 0.0 for layer in layers)


def _findings(a: Audit, b: Audit, rows: list[DiffRow], ta: float | None, tb: float | None) -> list[EngineFinding]:
    out = []
    if ta is None or tb is None or not ta:
        untimed = " and ".join(x for x, t in (("A", ta), ("B", tb)) if t is None) or "A"
        message = f"no time comparison: {untimed} has no timing (no profile or profile table among its files)"
        out.append(EngineFinding(kind="total", severity="info", layers=[], message=message))
        return out + _structure(a, b, rows, timed=False)
    faster = "faster" if tb < ta else "slower"
    out.append(
        EngineFinding(
            kind="total",
            severity="info" if tb <= ta else "medium",
            layers=[],
            message=f"B is {faster} than A: {tb:.3f} ms vs {ta:.3f} ms ({(tb - ta) / ta:+.1%})",
        )
    )
    return out + _structure(a, b, rows, timed=True)


def _structure(a: Audit, b: Audit, rows: list[DiffRow], timed: bool) -> list[EngineFinding]:
    """What changed besides the total: reformats, Q/DQ fusion, precision mix, and (timed builds) the groups whose
    time moved most."""
    out = []
    ra = sum(r.avg_ms or 0.0 for r in a.rows if r.reformat)
    rb = sum(r.avg_ms or 0.0 for r in b.rows if r.reformat)
    if a.reformat_layers != b.reformat_layers:
        out.append(
            EngineFinding(
                kind="reformats",
                severity="medium" if (rb > ra if timed else b.reformat_layers > a.reformat_layers) else "info",
                layers=[],
                message=f"reformat layers {a.reformat_layers} -> {b.reformat_layers}"
                + (f" ({ra:.3f} ms -> {rb:.3f} ms)" if timed else ""),
            )
        )
    for kind in ("qdq_unfused", "residual_add_high_precision"):
        fa = next((f for f in a.findings if f.kind == kind), None)
        fb = next((f for f in b.findings if f.kind == kind), None)
        na, nb = len(fa.layers) if fa else 0, len(fb.layers) if fb else 0
        if na != nb:
            severity = "medium" if nb > na else "info"
            message = f"{count(na, 'layer')} in A, {nb} in B"
            out.append(EngineFinding(kind=kind, severity=severity, layers=fb.layers if fb else [], message=message))
    if a.precisions != b.precisions:
        out.append(EngineFinding(kind="precision_mix", severity="info", layers=[],
                                 message=f"precision mix {a.precisions} -> {b.precisions}"))  # fmt: skip
    out += _io_changes(a, b)
    for r in rows[:RANKED] if timed else []:
        if abs(r.delta_ms) > 0:
            what = ", ".join(r.onnx_nodes[:4]) + (" ..." if len(r.onnx_nodes) > 4 else "")
            out.append(
                EngineFinding(
                    kind="group_delta",
                    severity="info",
                    layers=r.a_layers + r.b_layers,
                    message=f"{what}: {r.a_ms:.3f} ms ({'/'.join(r.a_precision)}) -> {r.b_ms:.3f} ms "
                    f"({'/'.join(r.b_precision)}), {r.delta_ms:+.3f} ms",
                )
            )
    return out


def _io_changes(a: Audit, b: Audit) -> list[EngineFinding]:
    """Inputs and outputs whose type or shape differs between the builds, where both exports say (TensorRT 11's
    `I/O Tensors`; TensorRT <= 10 lists names only), and tensors only one build has."""
    ia, ib = {t.name: t for t in a.io_tensors}, {t.name: t for t in b.io_tensors}
    if not ia or not ib:
        return []
    changes, names = [], []
    for name in [*ia, *(n for n in ib if n not in ia)]:
        ta, tb = ia.get(name), ib.get(name)
        if ta is None or tb is None:
            changes.append(f"{name}: only in {'B' if ta is None else 'A'}")
            names.append(name)
            continue
        for what in ("dtype", "dimensions"):
            va, vb = getattr(ta, what), getattr(tb, what)
            if va is not None and vb is not None and va != vb:
                changes.append(f"{name}: {va} -> {vb}")
                names.append(name)
    if not changes:
        return []
    return [EngineFinding(kind="io_changed", severity="medium", layers=list(dict.fromkeys(names)),
                          message="engine inputs/outputs changed: " + "; ".join(changes))]  # fmt: skip
