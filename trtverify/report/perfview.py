"""What the report's perf section shows: latency rows as text, each engine's precision mix, reformat share,
per-layer time bars and, against its `vs` engine, the layer diff as bars A against B.

Bar widths are numbers computed here; every name stays data for the autoescaped template.
"""

from __future__ import annotations

from typing import Any

from trtverify.config.findings import SEVERITY_RANK
from trtverify.engine.audit import Audit
from trtverify.engine.diff import EngineDiff
from trtverify.report.links import Link, PerfLinks, engine_layer_id
from trtverify.stages.perf import EngineEntry, PerfResult, PerfRow
from trtverify.util.words import count

MAX_DIFF_BARS = 40  # diff groups shown as bars, largest |delta| first
NOTICEABLE = 0.05  # a change against the baseline past this is coloured (slower red, faster green)
OPEN_LAYERS = 80  # an engine without a diff shows its layer bars open up to this many layers
# precisions with a colour of their own (CSS classes p-fp32 ...); anything else is p-other
PRECISION_CLASSES = ("FP32", "TF32", "BF16", "FP16", "FP8", "INT8", "INT4", "INT32", "INT64", "BOOL")
PRECISION_ORDER = {p: i for i, p in enumerate(PRECISION_CLASSES)}


def precision_class(precision: str | None) -> str:
    return f"p-{precision.lower()}" if precision in PRECISION_CLASSES else "p-other"


def _side_class(precisions: list[str]) -> str:
    return precision_class(precisions[0]) if len(set(precisions)) == 1 else "p-mixed"


def precision_mix(precisions: dict[str, int]) -> list[dict[str, Any]]:
    """Segments of the stacked bar, widest type first (FP32 ... INT4), then any other type by name."""
    total = sum(precisions.values()) or 1
    keys = sorted(precisions, key=lambda p: (PRECISION_ORDER.get(p, len(PRECISION_ORDER)), p))
    return [
        {"name": p, "count": precisions[p], "pct": 100.0 * precisions[p] / total, "cls": precision_class(p)}
        for p in keys
        if precisions[p] > 0
    ]


def reformat_share(a: Audit) -> dict[str, Any]:
    reformats = [r for r in a.rows if r.type == "Reformat"]
    ms = sum(r.avg_ms or 0.0 for r in reformats) if a.total_ms is not None else None
    share = ms / a.total_ms if ms is not None and a.total_ms else None
    return {"layers": a.reformat_layers, "ms": ms, "share": share}


def _layer_bars(a: Audit) -> list[dict[str, Any]]:
    top = max((r.avg_ms or 0.0 for r in a.rows), default=0.0)
    return [{"w": 100.0 * (r.avg_ms or 0.0) / top if top > 0 else 0.0, "cls": precision_class(r.precision)}
            for r in a.rows]  # fmt: skip


def _first_ids(a: Audit, ei: int) -> dict[str, str]:
    ids: dict[str, str] = {}
    for ri, r in enumerate(a.rows):
        ids.setdefault(r.name, engine_layer_id(ei, ri))
    return ids


def _diff_bars(d: EngineDiff, a_ids: dict[str, str], b_ids: dict[str, str]) -> dict[str, Any]:
    rows = sorted(d.rows, key=lambda r: -abs(r.delta_ms))
    shown = rows[:MAX_DIFF_BARS]
    top = max((max(r.a_ms, r.b_ms) for r in shown), default=0.0)
    bars = []
    for r in shown:
        bars.append(
            {
                "nodes": r.onnx_nodes,
                "a": [Link(a_ids.get(n, ""), n) for n in r.a_layers],
                "b": [Link(b_ids.get(n, ""), n) for n in r.b_layers],
                "a_ms": r.a_ms,
                "b_ms": r.b_ms,
                "a_w": 100.0 * r.a_ms / top if top > 0 else 0.0,
                "b_w": 100.0 * r.b_ms / top if top > 0 else 0.0,
                "a_prec": "/".join(r.a_precision) or "–",
                "b_prec": "/".join(r.b_precision) or "–",
                "a_cls": _side_class(r.a_precision),
                "b_cls": _side_class(r.b_precision),
                "delta": r.delta_ms,
                "slower": r.delta_ms > 0,
            }
        )
    findings = [f for f in d.findings if f.kind != "group_delta"]
    return {"bars": bars, "hidden": len(rows) - len(shown), "total": len(rows), "findings": findings}


def _findings(e: EngineEntry, ids: dict[str, str]) -> list[dict[str, Any]]:
    out = []
    for f in sorted(e.audit.findings, key=lambda f: SEVERITY_RANK.get(f.severity, len(SEVERITY_RANK))):
        links = [Link(ids.get(n, ""), n) for n in f.layers]
        out.append({"severity": f.severity, "kind": f.kind, "message": f.message, "layers": links})
    return out


def _ms(v: float | None) -> str:
    return f"{v:.3f}" if v is not None else "–"


def speedup_text(value: float | None, vs: str | None) -> str:
    return f"{value:.2f}× vs {vs}" if value is not None else (f"– (no comparable {vs})" if vs else "–")


def stable_text(r: PerfRow) -> str:
    s = r.stats
    if s is None:
        return "–"
    cv = f"window CV {s.window_cv:.1%}" if s.window_cv is not None else "window CV –"
    return f"{'yes' if s.stable else 'no'} ({count(s.runs, 'run')}, {cv})"


def baseline_view(r: PerfRow) -> dict[str, str]:
    """{state: css class, text}: a baseline measured elsewhere is shown as such, never as a failure."""
    b = r.baseline
    if b is None or b.state == "missing":
        return {"cls": "muted", "text": "no baseline", "title": ""}
    if b.state == "updated":
        return {"cls": "muted", "text": "stored by this run", "title": ""}
    if b.state == "not_comparable":
        return {"cls": "nc", "text": f"not comparable: {b.why or 'measured elsewhere'}",
                "title": f"baseline median {_ms(b.median_ms)} ms"}  # fmt: skip
    change = f"{b.change:+.1%}" if b.change is not None else "–"
    cls = ""
    if b.change is not None and abs(b.change) > NOTICEABLE:
        cls = "slower" if b.change > 0 else "faster"
    return {"cls": cls, "text": f"{_ms(b.median_ms)} ms, {change}", "title": "comparable: same environment"}


def _environments(stage: PerfResult) -> list[dict[str, Any]]:
    """Each environment the rows were measured in, with the models measured there."""
    envs: list[dict[str, Any]] = []
    for r in stage.rows or []:
        fp = {k: v for k, v in r.fingerprint.items() if v not in (None, "")}
        env = next((e for e in envs if e["fp"] == fp), None)
        if env is None:
            env = {"fp": fp, "models": [], "here": r.fingerprint == stage.fingerprint}
            envs.append(env)
        label = f"{r.model} ({r.backend})"
        if label not in env["models"]:
            env["models"].append(label)
    return envs


def perf_view(stage: PerfResult, links: PerfLinks) -> dict[str, Any]:
    """What the template needs for the perf stage."""
    engines = stage.engines or []
    index = {e.name: ei for ei, e in enumerate(engines)}
    ids = [_first_ids(e.audit, ei) for ei, e in enumerate(engines)]
    views = []
    for ei, e in enumerate(engines):
        layer_ids = [engine_layer_id(ei, ri) for ri in range(len(e.audit.rows))]
        diff = None
        if e.diff is not None:
            a_ids = ids[index[e.vs]] if e.vs in index else {}
            diff = _diff_bars(e.diff, a_ids, ids[ei])
        views.append(
            {
                "mix": precision_mix(e.audit.precisions),
                "reformat": reformat_share(e.audit),
                "findings": _findings(e, ids[ei]),
                "bars": _layer_bars(e.audit),
                "ids": layer_ids,
                "to_rows": [links.to_rows.get(i, []) for i in layer_ids],
                "to_log": [links.to_log.get(i, []) for i in layer_ids],
                "any_rows": any(i in links.to_rows for i in layer_ids),
                "any_log": any(i in links.to_log for i in layer_ids),
                "diff": diff,
                "vs_anchor": f"pf-e{index[e.vs]}" if e.vs in index else None,
            }
        )
    rows = [
        {
            "speedup": speedup_text(r.speedup, r.speedup_vs),
            "pytorch": f"{r.speedup_vs_pytorch:.2f}×" if r.speedup_vs_pytorch is not None else "–",
            "stable": stable_text(r),
            "unstable": r.stats is not None and not r.stats.stable,
            "baseline": baseline_view(r),
            "engine": f"pf-e{index[r.model]}" if r.role == "engine" and r.model in index else None,
        }
        for r in stage.rows or []
    ]
    return {
        "rows": rows,
        "engines": views,
        "environments": _environments(stage),
        "max_bars": MAX_DIFF_BARS,
        "open_layers": OPEN_LAYERS,
    }
