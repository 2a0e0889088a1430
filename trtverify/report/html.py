"""The HTML view of results.json (jinja2, autoescaped, self-contained: no network needed).

Charts are drawn by Chart.js (vendor/, inlined at render time); their data travels as JSON in
<script type="application/json"> blocks and is only ever put into the page as text.
"""

from __future__ import annotations

import functools
import html
import math
import re
from pathlib import Path
from typing import Any

from markupsafe import Markup

from trtverify.compare.checks import nonfinite_words
from trtverify.config.registry import STAGES
from trtverify.report.format import breakable, fmt, fmt_metric, margin, num, pow10, sort_value
from trtverify.report.graphview import graph_data, graph_js
from trtverify.report.kinds import with_layers
from trtverify.report.links import Link, build_links, engine_layer_id, layer_id, perf_links, row_id
from trtverify.report.text import cause_text, divergence_text, high_lint, latency_text
from trtverify.results.models import Results
from trtverify.stages.layerwise.models import LayerwiseCandidate, LayerwiseResult, Row, SuspectHistogram
from trtverify.util.fsutil import WriteError, atomic_write, atomic_write_text, user_cache_dir
from trtverify.util.words import count, plural

_HERE = Path(__file__).parent
_TEMPLATES = _HERE / "templates"
CHART_JS = _HERE / "vendor" / "chart.umd.min.js"

# the metrics shown for a layerwise row in tooltips and the table
ROW_METRICS = ("rel_l2", "cosine", "max_abs", "sqnr")
# what the layer-divergence chart can plot, and the axis label of each
PLOTTED = {"cosine": "1 − cosine", "rel_l2": "rel_l2"}


def _per_tensor_checks(stage: LayerwiseResult, cand: str) -> dict[str, tuple[float, str]]:
    """{metric: (threshold on the plotted scale, check name)} of the candidate's per-tensor checks on
    cosine and rel_l2 (the stage's checks of the candidate on those metrics are its every-tensor checks)."""
    out: dict[str, tuple[float, str]] = {}
    for c in stage.checks:
        thr = num(c.threshold)
        if c.candidate == cand and c.metric in PLOTTED and thr is not None and math.isfinite(thr):
            out.setdefault(c.metric, (1.0 - thr if c.metric == "cosine" else thr, c.name))
    return out


def _series(rows: list[Row], metric: str, check: tuple[float, str] | None) -> dict[str, Any]:
    """One plottable metric of every row on a log axis: exact (zero) errors sit on a floor a decade below
    the smallest error, non-finite ones on a ceiling a decade above the largest."""
    values: list[float | None] = []
    for row in rows:
        v = num(row.metrics.get(metric))
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
            y, note = ymax, f"non-finite ({fmt(v)}), plotted at the top"
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
        "threshold_label": f"{label} = {fmt(threshold)}" if threshold is not None else None,
        "check": check[1] if check else None,
        "ymin": ymin,
        "ymax": ymax,
        "ceiling_used": any(v is None or not math.isfinite(v) for v in values),
        "y": ys,
        "value": [fmt(v) for v in values],
        "note": notes,
    }


def _histogram(h: SuspectHistogram) -> dict[str, Any]:
    """One suspect's error histogram as bars: exact zeros, then the log10 bins, then non-finite differences."""
    labels, ranges, kinds, values = [], [], [], []
    if h.exact:
        labels.append("0")
        ranges.append("exactly 0")
        kinds.append("exact")
        values.append(h.exact)
    for lo, hi, n in zip(h.log10_edges, h.log10_edges[1:], h.counts):
        labels.append(pow10(lo))
        ranges.append(f"{pow10(lo)} – {pow10(hi)}")
        kinds.append("bin")
        values.append(n)
    if h.nonfinite:
        labels.append("nan/inf")
        ranges.append("not finite")
        kinds.append("nonfinite")
        values.append(h.nonfinite)
    return {"labels": labels, "ranges": ranges, "kinds": kinds, "counts": values}


def _layerwise_view(
    stage: LayerwiseResult,
    ci: int,
    cand: LayerwiseCandidate,
    to_layers: dict[str, list[Link]],
    si: int | None = None,
) -> dict[str, Any]:
    """What the template and the chart need for one layerwise candidate."""
    rows = cand.rows
    checks = _per_tensor_checks(stage, cand.name)
    # plotted first: the metric of a per-tensor check, cosine before rel_l2; rel_l2 (no line) without one
    default = next((m for m in ("cosine", "rel_l2") if m in checks), "rel_l2")
    series = {m: _series(rows, m, checks.get(m)) for m in PLOTTED if m == default or any(m in r.metrics for r in rows)}
    fd = cand.first_divergence
    rank_of = {(rc.topo_index, rc.tensor): rc.rank for rc in cand.root_causes}
    marks: dict[int, list[str]] = {}
    points, first, roots = [], None, []
    for i, row in enumerate(rows):
        topo = row.topo_index
        points.append(
            {
                "x": topo,
                "id": row_id(ci, topo, si),
                "tensor": row.tensor,
                "node": str(row.node),
                "op": str(row.op_type),
                "passed": row.passed,
                "m": {k: fmt_metric(k, row.metrics.get(k)) for k in ROW_METRICS},
            }
        )
        if fd is not None and topo == fd.topo_index and row.tensor == fd.tensor:
            first = i
            marks.setdefault(topo, []).append("first divergence")
        rank = rank_of.get((topo, row.tensor))
        if rank is not None:
            roots.append({"i": i, "rank": rank})
            marks.setdefault(topo, []).append(f"root cause #{rank}")
    hists = [
        {
            "reason": h.reason,
            "tensor": h.tensor,
            "op_type": h.op_type,
            "row": row_id(ci, h.topo_index, si),
            "exact": h.exact,
            "nonfinite": h.nonfinite,
            "sampled": h.sampled,
            "total": h.total,
            "chart": _histogram(h),
        }
        for h in cand.histograms
    ]
    roots.sort(key=lambda r: r["rank"])
    chart = {
        "default": default,
        "series": series,
        "points": points,
        "first": first,
        "roots": roots,
        "hists": [h["chart"] for h in hists],
    }
    ids = [row_id(ci, row.topo_index, si) for row in rows]
    return {
        "chart": chart,
        "series": series[default],
        "hists": hists,
        "ids": ids,
        "marks": marks,
        "layers": [to_layers.get(rid, []) for rid in ids],
        "any_layers": any(rid in to_layers for rid in ids),
        "graph": graph_data(cand, row_id(ci, 0, si)[:-1]),  # row ids end in the topological index
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


def _fields(record: Any) -> dict[str, Any]:
    """A record's fields as the JSON shows them (for tables whose columns are the fields)."""
    return record.model_dump(by_alias=True)


def _worst_first(rows: list[Any]) -> list[Any]:
    """Per-class rows of a candidate (reference, candidate and delta_<value>), the largest drop first, ties in
    class order; rows without a finite delta last."""

    def drop(row: Any) -> tuple[bool, float]:
        d = num(next((v for k, v in row if k.startswith("delta_")), None))
        return (d is None or not math.isfinite(d), d if d is not None and math.isfinite(d) else 0.0)

    return sorted(rows, key=drop)


def _loader() -> Any:
    """The templates' loader: each compiled template is kept between runs in this user's cache folder (compiling
    the report's costs 0.1-0.2 s of every run). Its key is a hash of the template's text, its path, Jinja's and
    Python's versions, so an edit or an upgrade compiles anew. Marshal, as Python's own bytecode cache; never
    pickle (Jinja's own bytecode cache pickles its checksum). No cache folder: compiled each run, as before."""
    import hashlib
    import marshal
    import sys
    import types

    import jinja2

    from trtverify import __version__

    folder = user_cache_dir("templates")

    class CachedLoader(jinja2.FileSystemLoader):
        def load(self, environment: Any, name: str, globals: Any = None) -> Any:
            source, filename, uptodate = self.get_source(environment, name)
            options = (environment.trim_blocks, environment.lstrip_blocks, environment.autoescape)
            # the compiler also reads which filters and tests exist and what each is passed (context, environment)
            passed = sorted(
                (kind, k, str(getattr(f, "jinja_pass_arg", None)))
                for kind, table in (("filter", environment.filters), ("test", environment.tests))
                for k, f in table.items()
            )
            parts = [jinja2.__version__, sys.version, __version__, repr(options), repr(passed), filename or name]
            key = hashlib.sha256("\0".join([*parts, source]).encode()).hexdigest()
            path = folder / f"{key}.marshal" if folder is not None else None
            code = None
            if path is not None:
                try:
                    code = marshal.loads(path.read_bytes())
                except (OSError, EOFError, ValueError, TypeError):
                    code = None
                if not isinstance(code, types.CodeType):  # a file that is not a compiled template: compile it
                    code = None
            if code is None:
                code = environment.compile(source, name, filename)
                if path is not None:
                    try:
                        atomic_write(path, lambda fh: fh.write(marshal.dumps(code)))
                    except WriteError:
                        pass  # a full or read-only cache costs a compile, nothing else
            return environment.template_class.from_code(environment, code, environment.make_globals(globals), uptodate)

    return CachedLoader(str(_TEMPLATES))


def environment() -> Any:
    """The reports' Jinja environment (a suite's report and the index of several): autoescaped, strict, with
    every filter the templates use."""
    import jinja2

    env = jinja2.Environment(
        loader=_loader(),
        autoescape=True,  # tensor and node names are user data: always escaped
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = fmt
    env.filters["margin"] = margin
    env.filters["sortv"] = sort_value
    env.filters["brk"] = breakable
    env.filters["metric"] = lambda value, name: fmt_metric(name, value)
    env.filters["fields"] = _fields
    env.filters["worst_first"] = _worst_first
    # a stage's anchor: its name, and its shape set in a sweep (several stages of one name)
    env.filters["anchor"] = lambda s: s.name + (f"-{re.sub(r'[^A-Za-z0-9_-]', '_', s.shape)}" if s.shape else "")
    env.filters["titled"] = lambda s: f"{s.name} at {s.shape}" if s.shape else s.name
    env.filters["cause"] = cause_text
    env.filters["divergence"] = divergence_text
    env.filters["latency_text"] = latency_text
    env.filters["repair_chart"] = repair_chart
    env.filters["ms"] = lambda v: f"{v:.3f}" if isinstance(v, (int, float)) and math.isfinite(v) else fmt(v)
    env.filters["rate"] = lambda v: f"{v:,.0f}" if isinstance(v, (int, float)) and math.isfinite(v) else fmt(v)
    env.filters["nonfinite"] = nonfinite_words  # {{ n | nonfinite(ref_only, cand_only) }}: which side holds them
    env.filters["counted"] = count  # {{ n | counted("tensor") }}: 1 tensor, 2 tensors
    env.filters["plural"] = plural  # {{ "check" | plural(n) }}
    env.filters["pct"] = lambda v: f"{v:.1%}" if isinstance(v, (int, float)) and math.isfinite(v) else fmt(v)
    return env


def render(results: Results) -> str:
    env = environment()
    stages = results.stages
    to_rows, to_layers = build_links(stages)
    engine_links = perf_links(stages)
    for rid, links in engine_links.back.items():
        if rid.startswith("lw-"):  # layerwise rows list build-log and engine layers in one column
            to_layers[rid] = to_layers.get(rid, []) + links
    timed = with_layers(stages, "engine")  # the stage that timed engines (perf): its view, by its index
    perf = {si: _perf_view(s, engine_links) for si, s in enumerate(stages) if s is timed}
    layerwise = {
        (si, ci): _layerwise_view(s, ci, c, to_layers, si if s.shape else None)
        for si, s in enumerate(stages)
        if isinstance(s, LayerwiseResult)
        for ci, c in enumerate(s.candidates or [])
    }
    return env.get_template("report.html.j2").render(
        r=results,
        lw=layerwise,
        pf=perf,
        to_rows=to_rows,
        to_engine=engine_links.back,
        layer_id=layer_id,
        engine_layer_id=engine_layer_id,
        row_id=row_id,
        high_lint=high_lint(results),
        chart_js=Markup(chart_js()),
        graph_js=Markup(graph_js()) if any(v["graph"] for v in layerwise.values()) else "",
        # each stage's own templates, by name (its registry entry's `partial` and `causes`)
        partials={e.name: e.partial for e in STAGES.entries() if e.partial is not None},
        causes={e.name: e.causes for e in STAGES.entries() if e.causes is not None},
    )


def _perf_view(stage: Any, links: Any) -> dict[str, Any]:
    from trtverify.report.perfview import perf_view  # with the engine audit's modules: only for a perf stage

    return perf_view(stage, links)


def write_report(results: Results, path: Path) -> Path:
    atomic_write_text(path, render(results))
    return path


def repair_chart(points: list[Any]) -> Markup:
    """An inline SVG of every tensor's rel_l2 before (nothing kept) and after the repair, log scale, with the kept
    nodes marked; non-finite or uncompared values sit on the ceiling. Built here, escaped here."""
    if not points:
        return Markup("")
    w, h, left, top, bottom = 720, 220, 46, 10, 24
    lo, hi = -7.0, 1.0
    n = max(len(points) - 1, 1)

    def x(i: int) -> float:
        return left + (w - left - 10) * i / n

    def y(v: float | None) -> float:
        lg = hi if v is None or not math.isfinite(v) else max(lo, min(hi, math.log10(v) if v > 0 else lo))
        return top + (h - top - bottom) * (hi - lg) / (hi - lo)

    parts = [f'<svg class="repair-chart" viewBox="0 0 {w} {h}" role="img" aria-label="rel_l2 before and after">']
    for e in range(int(lo), int(hi) + 1):
        yy = y(10.0**e)
        parts.append(f'<line x1="{left}" x2="{w - 10}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="#ddd"/>')
        parts.append(f'<text x="{left - 4}" y="{yy + 4:.1f}" font-size="10" text-anchor="end">1e{e}</text>')
    for p in points:
        if p.kept:
            xx = x(p.index)
            label = html.escape(f"kept in FP32: {p.node}")
            parts.append(
                f'<line x1="{xx:.1f}" x2="{xx:.1f}" y1="{top}" y2="{h - bottom}" stroke="#2a7" stroke-dasharray="3 2">'
                f"<title>{label}</title></line>"
            )
    for key, colour in (("before", "#c33"), ("after", "#36c")):
        coords = " ".join(f"{x(p.index):.1f},{y(getattr(p, key)):.1f}" for p in points)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>')
        for p in points:
            tip = html.escape(f"{key}: {p.tensor} ({p.node}) rel_l2 {getattr(p, key)}")
            cx, cy = x(p.index), y(getattr(p, key))
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2" fill="{colour}"><title>{tip}</title></circle>')
    parts.append(f'<text x="{left}" y="{h - 6}" font-size="10">tensors in topological order</text>')
    parts.append(f'<text x="{w - 10}" y="{h - 6}" font-size="10" text-anchor="end" fill="#c33">before</text>')
    parts.append(f'<text x="{w - 60}" y="{h - 6}" font-size="10" text-anchor="end" fill="#36c">after</text>')
    parts.append("</svg>")
    return Markup("".join(parts))
