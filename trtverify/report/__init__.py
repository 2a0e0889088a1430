"""The HTML view of results.json (jinja2, autoescaped, self-contained: no network needed).

Charts are drawn by Chart.js (vendor/, inlined at render time); their data travels as JSON in
<script type="application/json"> blocks and is only ever put into the page as text.
"""

from __future__ import annotations

import functools
import json
import math
import re
from pathlib import Path
from typing import Any

from markupsafe import Markup, escape

from trtverify.fsutil import atomic_write_text, to_json
from trtverify.report.links import Link, build_links, layer_id, row_id

_HERE = Path(__file__).parent
_TEMPLATES = _HERE / "templates"
CHART_JS = _HERE / "vendor" / "chart.umd.min.js"

# the metrics shown for a layerwise row in tooltips and the table
ROW_METRICS = ("rel_l2", "cosine", "max_abs", "sqnr")
# what the layer-divergence chart can plot, and the axis label of each
PLOTTED = {"cosine": "1 − cosine", "rel_l2": "rel_l2"}


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if value == 0:
            return "0"
        if abs(value) >= 1e4 or abs(value) < 1e-3:
            return f"{value:.3e}"
        return f"{value:.6g}"
    return str(value)


def _num(value: Any) -> float | None:
    """A results.json number (non-finite ones are the strings 'nan', 'inf', '-inf') as a float; None if not a number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return None


def _sort_value(value: Any) -> str:
    """A cell's numeric sort key for the table script: JS Number() reads it; '' (nan, missing) sorts last."""
    v = _num(value)
    if v is None or math.isnan(v):
        return ""
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(v)


def _margin(check: dict[str, Any]) -> str:
    """How far a check's value is past its limit (failed) or from it (passed)."""
    v, t, op = _num(check.get("value")), _num(check.get("threshold")), check.get("op")
    if v is None or t is None or op not in ("<=", ">="):
        return ""
    if not math.isfinite(v):
        return "value not finite"
    over = v - t if op == "<=" else t - v  # > 0: beyond the limit
    if over <= 0:
        return f"headroom {_fmt(-over)}"
    text = f"{'over' if op == '<=' else 'under'} by {_fmt(over)}"
    if op == "<=" and t > 0:
        text += f" ({v / t:.3g}× the limit)"
    elif op == ">=" and str(check.get("metric", "")).startswith("cosine") and t < 1:
        text += f" (1 − cosine {(1 - v) / (1 - t):.3g}× the allowed)"
    return text


def _fmt_metric(metric: str, value: Any) -> str:
    """_fmt, with a cosine close to 1 shown to two significant digits of 1 - cosine (0.99999983, not 1)."""
    v = _num(value)
    if metric == "cosine" and v is not None and 0.99 < v < 1:
        return f"{v:.{min(12, 1 - math.floor(math.log10(1 - v)))}f}"
    return _fmt(value)


def _breakable(name: Any) -> Markup:
    """A name, escaped, with line-break opportunities after its path separators ('/features/<wbr>block1/<wbr>...')."""
    return Markup(str(escape(_fmt(name))).replace("/", "/<wbr>").replace(".", ".<wbr>"))


def _pow10(e: float) -> str:
    """10**e for a histogram edge: 1e-5, 3.2e-5, 1, 3.2."""
    k = math.floor(e)
    mant = f"{10.0 ** (e - k):.2g}"
    return mant if k == 0 else f"{mant}e{k}"


def _per_tensor_checks(stage: dict[str, Any], cand: str) -> dict[str, tuple[float, str]]:
    """{metric: (threshold on the plotted scale, check name)} of the candidate's per-tensor checks on cosine and rel_l2."""
    out: dict[str, tuple[float, str]] = {}
    for c in stage.get("checks") or []:
        name = str(c.get("name", ""))
        thr = _num(c.get("threshold"))
        if (
            name.startswith(f"{cand}: ")
            and name.endswith("(every tensor)")
            and c.get("metric") in PLOTTED
            and thr is not None
            and math.isfinite(thr)
        ):
            out.setdefault(c["metric"], (1.0 - thr if c["metric"] == "cosine" else thr, name))
    return out


def _series(rows: list[dict[str, Any]], metric: str, check: tuple[float, str] | None) -> dict[str, Any]:
    """One plottable metric of every row on a log axis: exact (zero) errors sit on a floor a decade below
    the smallest error, non-finite ones on a ceiling a decade above the largest."""
    values: list[float | None] = []
    for row in rows:
        v = _num((row.get("metrics") or {}).get(metric))
        values.append(1.0 - v if v is not None and metric == "cosine" else v)
    threshold = check[0] if check else None
    known = [v for v in values if v is not None and math.isfinite(v) and v > 0] + (
        [threshold] if threshold and threshold > 0 else []
    )
    ymin = 10.0 ** (math.floor(math.log10(min(known))) - 1) if known else 1e-12
    ymax = max(10.0 ** (math.ceil(math.log10(max(known))) + 1) if known else 1.0, ymin * 1e3)
    ys, notes = [], []
    for v in values:
        if v is None:
            y, note = ymax, "not computed, plotted at the top"
        elif math.isnan(v) or math.isinf(v):
            y, note = ymax, f"non-finite ({_fmt(v)}), plotted at the top"
        elif v == 0:
            y, note = ymin, "exact (0), plotted at the floor"
        elif v < ymin:  # 1 - cosine below zero: cosine rounded above 1
            y, note = ymin, "≤ 0 (rounding), plotted at the floor"
        else:
            y, note = v, ""
        ys.append(y)
        notes.append(note)
    label = PLOTTED[metric]
    return {
        "label": label,
        "threshold": threshold,
        "threshold_label": f"{label} = {_fmt(threshold)}" if threshold is not None else None,
        "check": check[1] if check else None,
        "ymin": ymin,
        "ymax": ymax,
        "ceiling_used": any(v is None or not math.isfinite(v) for v in values),
        "y": ys,
        "value": [_fmt(v) for v in values],
        "note": notes,
    }


def _histogram(h: dict[str, Any]) -> dict[str, Any]:
    """One suspect's error histogram as bars: exact zeros, then the log10 bins, then non-finite differences."""
    edges = [float(e) for e in h.get("log10_edges") or []]
    counts = [int(c) for c in h.get("counts") or []]
    labels, ranges, kinds, values = [], [], [], []
    if h.get("exact"):
        labels.append("0")
        ranges.append("exactly 0")
        kinds.append("exact")
        values.append(int(h["exact"]))
    for lo, hi, n in zip(edges, edges[1:], counts):
        labels.append(_pow10(lo))
        ranges.append(f"{_pow10(lo)} – {_pow10(hi)}")
        kinds.append("bin")
        values.append(n)
    if h.get("nonfinite"):
        labels.append("nan/inf")
        ranges.append("not finite")
        kinds.append("nonfinite")
        values.append(int(h["nonfinite"]))
    return {"labels": labels, "ranges": ranges, "kinds": kinds, "counts": values}


def _layerwise_view(
    stage: dict[str, Any], ci: int, cand: dict[str, Any], to_layers: dict[str, list[Link]]
) -> dict[str, Any]:
    """What the template and the chart need for one layerwise candidate."""
    rows = cand.get("rows") or []
    checks = _per_tensor_checks(stage, str(cand.get("name")))
    # plotted first: the metric of a per-tensor check, cosine before rel_l2; rel_l2 (no line) without one
    default = next((m for m in ("cosine", "rel_l2") if m in checks), "rel_l2")
    series = {
        m: _series(rows, m, checks.get(m))
        for m in PLOTTED
        if m == default or any(m in (r.get("metrics") or {}) for r in rows)
    }
    fd = cand.get("first_divergence") or {}
    rank_of = {(rc.get("topo_index"), rc.get("tensor")): rc.get("rank") for rc in cand.get("root_causes") or []}
    marks: dict[int, list[str]] = {}
    points, first, roots = [], None, []
    for i, row in enumerate(rows):
        topo = row.get("topo_index", i)
        m = row.get("metrics") or {}
        points.append(
            {
                "x": topo,
                "id": row_id(ci, topo),
                "tensor": str(row.get("tensor")),
                "node": str(row.get("node")),
                "op": str(row.get("op_type")),
                "passed": bool(row.get("passed")),
                "m": {k: _fmt_metric(k, m.get(k)) for k in ROW_METRICS},
            }
        )
        if fd and topo == fd.get("topo_index") and row.get("tensor") == fd.get("tensor"):
            first = i
            marks.setdefault(topo, []).append("first divergence")
        rank = rank_of.get((topo, row.get("tensor")))
        if rank is not None:
            roots.append({"i": i, "rank": rank})
            marks.setdefault(topo, []).append(f"root cause #{rank}")
    hists = []
    for h in cand.get("histograms") or []:
        topo = h.get("topo_index")
        hists.append(
            {
                "reason": h.get("reason", ""),
                "tensor": h.get("tensor"),
                "op_type": h.get("op_type"),
                "row": row_id(ci, topo) if isinstance(topo, int) else None,
                "exact": h.get("exact", 0),
                "nonfinite": h.get("nonfinite", 0),
                "sampled": h.get("sampled", h.get("total")),
                "total": h.get("total"),
                "chart": _histogram(h),
            }
        )
    roots.sort(key=lambda r: r["rank"])
    chart = {
        "default": default,
        "series": series,
        "points": points,
        "first": first,
        "roots": roots,
        "hists": [h["chart"] for h in hists],
    }
    ids = [row_id(ci, row.get("topo_index", i)) for i, row in enumerate(rows)]
    return {
        "chart": chart,
        "series": series[default],
        "hists": hists,
        "ids": ids,
        "marks": marks,
        "layers": [to_layers.get(rid, []) for rid in ids],
        "any_layers": any(rid in to_layers for rid in ids),
    }


@functools.lru_cache(maxsize=1)
def chart_js() -> str:
    """The bundled Chart.js, ready to sit inside <script>: nothing in it may end or re-open the element."""
    text = CHART_JS.read_text(encoding="utf-8")
    text = re.sub(r"\n//# sourceMappingURL=\S+\s*$", "\n", text)  # the map is not shipped
    bad = [s for s in ("</script", "<!--", "<script") if s in text.lower()]
    if bad:
        raise RuntimeError(f"{CHART_JS} contains {bad}: it cannot be inlined in a <script> element")
    return text


def render(results: dict[str, Any]) -> str:
    import jinja2

    # the values results.json holds (nan as "nan", numpy scalars as numbers), also when called in memory
    results = json.loads(to_json(results))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        autoescape=True,  # tensor and node names are user data: always escaped
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = _fmt
    env.filters["margin"] = _margin
    env.filters["sortv"] = _sort_value
    env.filters["brk"] = _breakable
    env.filters["metric"] = lambda value, name: _fmt_metric(name, value)
    stages = results.get("stages") or []
    to_rows, to_layers = build_links(stages)
    layerwise = {
        (si, ci): _layerwise_view(s, ci, c, to_layers)
        for si, s in enumerate(stages)
        if s.get("name") == "layerwise"
        for ci, c in enumerate(s.get("candidates") or [])
    }
    return env.get_template("report.html.j2").render(
        r=results,
        lw=layerwise,
        to_rows=to_rows,
        layer_id=layer_id,
        row_id=row_id,
        chart_js=Markup(chart_js()),
    )


def write_report(results: dict[str, Any], path: Path) -> Path:
    atomic_write_text(path, render(results))
    return path
