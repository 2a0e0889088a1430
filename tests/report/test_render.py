"""report.html as rendered from real results.json files (no browser: see test_browser.py for that)."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from pathlib import Path

import pytest

from tests.report.conftest import HOSTILE, load, typed
from trtverify.compare.checks import CheckResult
from trtverify.report import html as report
from trtverify.report.format import margin
from trtverify.report.html import render as render_typed


def render(results: dict) -> str:
    return render_typed(typed(results))


BLOB = re.compile(r'<script type="application/json" id="(lw-data-[^"]+)">(.*?)</script>', re.S)


def blobs(html: str) -> dict[str, dict]:
    return {k: json.loads(v) for k, v in BLOB.findall(html)}


def row_html(html: str, element_id: str) -> str:
    m = re.search(rf'<tr id="{re.escape(element_id)}"[^>]*>(.*?)</tr>', html, re.S)
    assert m, f"no row {element_id}"
    return m.group(1)


@pytest.fixture(scope="module")
def demo(demo_run: Path) -> dict:
    return load(demo_run)


def test_chart_data_is_embedded_per_candidate(demo: dict):
    html = render(demo)
    data = blobs(html)
    layerwise = next(s for s in demo["stages"] if s["name"] == "layerwise")
    si = demo["stages"].index(layerwise)
    assert set(data) == {f"lw-data-{si}-{ci}" for ci in range(len(layerwise["candidates"]))}
    for ci, (cand, limit) in enumerate(
        zip(layerwise["candidates"], (0.9999, 0.97))
    ):  # fp16, int8: cosine checks in the suite
        d = data[f"lw-data-{si}-{ci}"]
        rows = cand["rows"]
        assert d["default"] == "cosine" and [p["x"] for p in d["points"]] == [r["topo_index"] for r in rows]
        assert [p["tensor"] for p in d["points"]] == [r["tensor"] for r in rows]
        cos = d["series"]["cosine"]
        assert (
            cos["threshold"] == pytest.approx(1 - limit)
            and cos["check"] == f"{cand['name']}: cosine >= {limit:g} (every tensor)"
        )
        for y, r in zip(cos["y"], rows):
            err = 1 - r["metrics"]["cosine"]
            assert y == pytest.approx(err) if err > cos["ymin"] else y == cos["ymin"]
        assert d["series"]["rel_l2"]["y"] == pytest.approx([r["metrics"]["rel_l2"] for r in rows])
        # the suite checks rel_l2 per tensor only for int8 (its INT8 defaults)
        assert d["series"]["rel_l2"]["threshold"] == (None if cand["name"] == "fp16" else pytest.approx(0.25))
        assert d["first"] is None  # the demo passes
        assert [(d["points"][x["i"]]["x"], x["rank"]) for x in d["roots"]] == [
            (rc["topo_index"], rc["rank"]) for rc in cand["root_causes"]
        ]
        assert f'data-rows="{len(rows)}"' in html


def test_buildlog_layers_link_to_layerwise_rows_and_back(demo: dict):
    html = render(demo)
    stages = [s["name"] for s in demo["stages"]]
    cands = [c["name"] for c in demo["stages"][stages.index("layerwise")]["candidates"]]
    int8 = cands.index("int8")
    log = demo["stages"][stages.index("buildlog")]["logs"][0]
    k = next(i for i, layer in enumerate(log["layers"]) if layer["name"] == "/features/block1/conv/Conv_myl0_1")
    conv = next(
        r
        for r in demo["stages"][stages.index("layerwise")]["candidates"][int8]["rows"]
        if r["node"] == "/features/block1/conv/Conv"
    )
    rid = f"lw-c{int8}-t{conv['topo_index']}"
    assert f'href="#{rid}"' in row_html(html, f"bl-l0-{k}")
    assert f'href="#bl-l0-{k}"' in row_html(html, rid)
    # the log is the INT8 engine's (its file name says so): no fp16 row links to it
    fp16 = cands.index("fp16")
    assert 'href="#bl-' not in row_html(html, f"lw-c{fp16}-t{conv['topo_index']}")
    linked = re.findall(r'<tr id="bl-l0-\d+">.*?</tr>', html, re.S)
    assert len(linked) == len(log["layers"]) and not any(f'href="#lw-c{fp16}-' in t for t in linked)


def test_no_external_resources(demo: dict):
    html = render(demo)
    assert not re.search(r"""\b(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I)
    assert not re.search(r"<(?:link|iframe|img|object|embed)\b", html, re.I)
    css = html[html.index("<style>") : html.index("</style>")]
    assert "@import" not in css and "url(" not in css
    assert "<script src" not in html and html.count("<script") == html.count("</script>")
    assert "Chart.js v4" in html  # the library is inline


def test_print_css(demo: dict):
    html = render(demo)
    css = html[html.index("@media print") : html.index("</style>")]
    assert re.search(r"nav\.top, \.controls[^{]*\{ display: none !important; \}", css)
    assert "tr, .card, figure { break-inside: avoid; }" in css and "thead { display: table-header-group; }" in css


def test_stages_that_did_not_run_and_empty_parts_render(demo: dict):
    old = copy.deepcopy(demo)
    for s in old["stages"]:
        for c in s.get("candidates", []):
            c["histograms"] = []
            c["lint"] = []
            c["root_causes"] = []
    old["stages"] = [s for s in old["stages"] if s["name"] != "buildlog"]
    e2e = next(i for i, s in enumerate(old["stages"]) if s["name"] == "e2e")
    old["stages"][e2e] = {
        "name": "e2e",
        "status": "error",
        "duration_s": 0.1,
        "checks": [],
        "notes": [],
        "timings": {},
        "error": {"kind": "internal", "message": "ValueError: boom", "traceback": "Traceback: boom", "exit_code": 4},
    }
    old["passed"] = False
    html = render(old)
    assert "ValueError: boom" in html and 'class="hist-chart"' not in html and 'href="#bl-' not in html
    assert html.count('class="lw-chart"') == 2
    # a run that stopped in its first stage
    bare = dict(old, stages=[old["stages"][e2e]], complete=False, exit_code=None)
    assert "ValueError: boom" in render(bare) and "incomplete run" in render(bare)


def test_histograms_become_bar_charts(demo: dict):
    r = copy.deepcopy(demo)
    si = next(i for i, s in enumerate(r["stages"]) if s["name"] == "layerwise")
    cand = r["stages"][si]["candidates"][1]
    row = cand["rows"][3]
    cand["histograms"] = [
        {
            "tensor": row["tensor"],
            "node": row["node"],
            "op_type": row["op_type"],
            "topo_index": 3,
            "reason": "root cause #9",
            "log10_edges": [-5.0, -4.5, -4.0],
            "counts": [3, 7],
            "exact": 2,
            "nonfinite": 1,
            "sampled": 13,
            "total": 13,
        }
    ]
    html = render(r)
    h = blobs(html)[f"lw-data-{si}-1"]["hists"]
    assert h == [
        {
            "labels": ["0", "1e-5", "3.2e-5", "nan/inf"],
            "counts": [2, 3, 7, 1],
            "kinds": ["exact", "bin", "bin", "nonfinite"],
            "ranges": ["exactly 0", "1e-5 – 3.2e-5", "3.2e-5 – 1e-4", "not finite"],
        }
    ]
    assert f'data-src="lw-data-{si}-1" data-hist="0"' in html and "root cause #9" in html
    assert f'<a href="#lw-c1-t3"><code>{row["tensor"]}</code></a>' in html


def test_exact_and_nonfinite_errors_sit_on_the_axis_ends(demo: dict):
    r = copy.deepcopy(demo)
    si = next(i for i, s in enumerate(r["stages"]) if s["name"] == "layerwise")
    rows = r["stages"][si]["candidates"][0]["rows"]
    rows[0]["metrics"].update(rel_l2=0.0, cosine=1.0)
    rows[1]["metrics"].update(rel_l2="nan", cosine="nan")
    rows[2]["metrics"].update(rel_l2=float("inf"), cosine=1.0000001)  # in memory: a float, not yet "inf"
    d = blobs(render(r))[f"lw-data-{si}-0"]
    for key in ("cosine", "rel_l2"):
        s = d["series"][key]
        assert s["y"][0] == s["ymin"] and "exact" in s["note"][0]
        assert s["y"][1] == s["ymax"] and "non-finite" in s["note"][1]
        assert all(s["ymin"] <= y <= s["ymax"] and math.isfinite(y) for y in s["y"])
    assert d["series"]["rel_l2"]["y"][2] == d["series"]["rel_l2"]["ymax"] and d["series"]["rel_l2"]["value"][2] == "inf"
    assert (
        d["series"]["cosine"]["y"][2] == d["series"]["cosine"]["ymin"]
        and "rounding" in d["series"]["cosine"]["note"][2]
    )
    assert d["points"][1]["m"]["rel_l2"] == "nan"


def test_hostile_names_are_escaped_everywhere(hostile_run: Path):
    html = (hostile_run / "report.html").read_text(encoding="utf-8")
    for name in HOSTILE:
        assert name not in html
    # outside the bundled libraries (minified code compares `a<b`): no markup of the names
    pages = re.sub(r"<script>.*?</script>", "", html, flags=re.S)
    assert not re.search(r"<(img|b)\b", pages, re.I) and 'onerror="' not in html
    # Chart.js, the chart's data, the graph's data, dagre with the graph view, the line that draws the graph, the
    # page script
    assert html.count("<script") == html.count("</script>") == 6
    # the data blocks give the names back unchanged
    d = blobs(html)["lw-data-0-0"]
    graph = json.loads(
        re.search(r'<script type="application/json" id="lw-graph-0-0-data">(.*?)</script>', html).group(1)
    )
    assert {n[0] for n in graph["nodes"]} == set(HOSTILE)
    assert {p["tensor"] for p in d["points"]} >= set(HOSTILE[1:]) and HOSTILE[0] in {p["node"] for p in d["points"]}
    # and the escaped text is what the table shows
    assert "&lt;/script&gt;&lt;script&gt;window.__pwned=2&lt;/script&gt;" in html
    assert "&#34;&#39;&amp;&lt;b&gt;bold&lt;/b&gt;" in html


@pytest.mark.parametrize(
    ("check", "text"),
    [
        (
            {"value": 0.05, "threshold": 0.01, "op": "<=", "metric": "rel_l2", "passed": False},
            "over by 0.04 (5× the limit)",
        ),
        (
            {"value": 0.98, "threshold": 0.99, "op": ">=", "metric": "cosine", "passed": False},
            "under by 0.01 (1 − cosine 2× the allowed)",
        ),
        ({"value": 0.5, "threshold": 0.85, "op": ">=", "metric": "accuracy", "passed": False}, "under by 0.35"),
        ({"value": 0.002, "threshold": 0.01, "op": "<=", "metric": "rel_l2", "passed": True}, "headroom 0.008"),
        ({"value": "nan", "threshold": 0.01, "op": "<=", "metric": "rel_l2", "passed": False}, "value not finite"),
        ({"value": 1.0, "threshold": 1.0, "op": "==", "metric": "x", "passed": True}, ""),
    ],
)
def test_margin(check: dict, text: str):
    assert margin(CheckResult(name="c", stage="layerwise", **check)) == text


def test_vendored_chart_js_is_the_recorded_build_and_guarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    readme = (Path(report.__file__).parent / "vendor" / "README.md").read_text()
    digest = hashlib.sha256(report.CHART_JS.read_bytes()).hexdigest()
    assert f"`chart.umd.min.js` | `{digest}`" in readme
    assert "sourceMappingURL" not in report.chart_js()
    bad = tmp_path / "chart.js"
    bad.write_text('var s = "</scr" + "ipt>"; var t = "</script>";')
    monkeypatch.setattr(report, "CHART_JS", bad)
    report.chart_js.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="cannot be inlined"):
            report.chart_js()
    finally:
        report.chart_js.cache_clear()


def test_the_compiled_template_is_kept_for_the_next_run_and_remade_after_an_edit(demo: dict, tmp_path, monkeypatch):
    import shutil

    import jinja2

    from trtverify.report import html

    templates = tmp_path / "templates"
    shutil.copytree(html._TEMPLATES, templates)
    monkeypatch.setattr(html, "_TEMPLATES", templates)
    monkeypatch.setenv("TRTVERIFY_CACHE_DIR", str(tmp_path / "cache"))
    compiled: list[str] = []
    real = jinja2.Environment.compile

    def counting(self, source, name=None, filename=None, raw=False, defer_init=False):
        compiled.append(name)
        return real(self, source, name, filename, raw, defer_init)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    results = typed(demo)
    first = html.render(results)
    assert "report.html.j2" in compiled and list((tmp_path / "cache" / "templates").iterdir())
    compiled.clear()
    assert html.render(results) == first and compiled == []  # read back, not compiled
    page = templates / "report.html.j2"
    page.write_text(page.read_text(encoding="utf-8").replace("</body>", "<!-- edited --></body>"), encoding="utf-8")
    assert "<!-- edited -->" in html.render(results) and "report.html.j2" in compiled


def test_a_cache_folder_others_may_write_is_not_used(tmp_path, monkeypatch):
    import os

    from trtverify.util.fsutil import user_cache_dir

    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "templates").mkdir()
    os.chmod(shared / "templates", 0o777)  # what it holds is loaded as code: another user could plant it
    monkeypatch.setenv("TRTVERIFY_CACHE_DIR", str(shared))
    assert user_cache_dir("templates") is None
    monkeypatch.setenv("TRTVERIFY_CACHE_DIR", "")
    assert user_cache_dir("templates") is None  # empty: caching off
    monkeypatch.setenv("TRTVERIFY_CACHE_DIR", str(tmp_path / "mine"))
    made = user_cache_dir("templates")
    assert made is not None and (made.stat().st_mode & 0o777) == 0o700
    # a folder above it that others may write: they could swap ours for theirs after the check
    opened = tmp_path / "open"
    opened.mkdir()
    os.chmod(opened, 0o777)
    monkeypatch.setenv("TRTVERIFY_CACHE_DIR", str(opened / "cache"))
    assert user_cache_dir("templates") is None
    os.chmod(opened, 0o1777)  # sticky, as /tmp: others cannot rename what is ours
    assert user_cache_dir("templates") is not None
    # no home known (HOME unset, no passwd entry): no cache, never a './~' folder in the working directory
    monkeypatch.delenv("TRTVERIFY_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setattr(os.path, "expanduser", lambda p: p)
    monkeypatch.chdir(tmp_path)
    assert user_cache_dir("templates") is None and not (tmp_path / "~").exists()
