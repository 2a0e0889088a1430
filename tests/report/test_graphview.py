"""The report's graph view in headless Chromium: the demo detector (suites/shapes_detection.yaml's layerwise) and a
5,018-node model with a planted fault (tests/report/bigmodel.py), each drawn within 3 s with root cause #1 in view,
the whole graph folded on demand, colours switched between accumulated and local error, and a click on a node
leading to its row. Also, without a browser: what the graph costs results.json and the report."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT, write_suite
from tests.report import bigmodel
from tests.report.conftest import HOSTILE, load, typed
from tests.report.test_browser import ARTIFACTS, browser, console_errors, open_report  # noqa: F401 - the fixture
from tests.stages.layerwise.test_layerwise import plant, suite_text, to_fp16
from trtverify.cli.run import run_and_record
from trtverify.config.loader import load_suite
from trtverify.report import graphview
from trtverify.report.html import render
from trtverify.runner import RunOptions
from trtverify.util.fsutil import to_json

BIG_FAULT = bigmodel.block_node(3, 41, "fc2/MatMul")
LIMIT_MS = 3000


@pytest.fixture(scope="session")
def detector_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`trtverify run suites/shapes_detection.yaml --stage layerwise`: FP16 and INT8 QDQ candidates of the demo
    detector (passes; root causes: the nodes with the largest own error)."""
    out = tmp_path_factory.mktemp("detector") / "out"
    suite = load_suite(ROOT / "suites" / "shapes_detection.yaml")
    assert run_and_record(suite, out, RunOptions(stages=("layerwise",))).passed
    return out


@pytest.fixture(scope="session")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Layerwise of the 5,018-node model against its FP16 copy with one MatMul's weights x1.5 (one sample)."""
    tmp = tmp_path_factory.mktemp("big")
    assert bigmodel.write(tmp / "ref.onnx") == 5018
    plant(tmp / "ref.onnx", tmp / "cand.onnx", BIG_FAULT, 1.5)
    to_fp16(tmp / "cand.onnx", tmp / "cand.onnx")
    inputs = "  samples: 1\n  generate:\n    input: {shape: [2, 8], range: [-1, 1]}\n"
    text = suite_text("ref.onnx", {"fp16": "cand.onnx"}, inputs).replace("samples: 2", "samples: 1")
    results = run_and_record(load_suite(write_suite(tmp, text)), tmp / "out")  # writes report.html too
    assert results.stages[0].candidates[0].root_causes[0].node == BIG_FAULT
    return tmp / "out"


def test_the_graph_adds_a_few_percent_to_results_json_on_5000_nodes(big_run: Path):
    results = load(big_run)
    cand = results["stages"][0]["candidates"][0]
    assert len(cand["graph"]["topo"]) == 5018 and "unnamed" not in cand["graph"]
    with_graph = len(to_json(results))
    del cand["graph"]
    without = len(to_json(results))
    assert with_graph == (big_run / "results.json").stat().st_size
    assert with_graph / without < 1.05, (with_graph, without)  # measured: +3.6 % (161 KB of 4.5 MB)


def test_dagre_is_inlined_only_into_reports_with_a_graph(failing_run: Path):
    results = load(failing_run)
    with_graph = render(typed(results))
    for cand in results["stages"][0]["candidates"]:
        del cand["graph"]  # as results.json of an older version
    without = render(typed(results))
    assert "Chris Pettitt" in with_graph and 'class="graph-view"' in with_graph
    assert "Chris Pettitt" not in without and 'class="graph-view"' not in without and "dagre" not in without
    assert len(with_graph) - len(without) < 90_000  # dagre 49 KB, the view's script and this graph's data


def test_vendored_dagre_is_the_recorded_build_inlined_with_its_licence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    readme = (graphview.DAGRE_JS.parent / "README.md").read_text(encoding="utf-8")
    digest = hashlib.sha256(graphview.DAGRE_JS.read_bytes()).hexdigest()
    assert f"`dagre.min.js` | `{digest}`" in readme
    graphview.graph_js.cache_clear()
    js = graphview.graph_js()
    assert js.startswith("/*! dagre (@dagrejs/dagre 3.1.3") and "Permission is hereby granted" in js
    assert "sourceMappingURL" not in js and "LEGAL.txt" not in js and "var dagre=" in js
    bad = tmp_path / "graphview.js"
    bad.write_text('var s = "</script>";')
    monkeypatch.setattr(graphview, "GRAPH_JS", bad)
    graphview.graph_js.cache_clear()
    with pytest.raises(RuntimeError, match="cannot be inlined"):
        graphview.graph_js()
    monkeypatch.undo()
    graphview.graph_js.cache_clear()


def test_the_view_script_has_nothing_jinja_or_html_would_read():
    text = (ROOT / "trtverify" / "report" / "graphview.js").read_text(encoding="utf-8")
    assert not any(s in text for s in ("{{", "{%", "{#", "</script", "<!--", "innerHTML"))


# ---------------------------------------------------------------------------------------------- in Chromium
def _state(driver: Any, box: str) -> dict[str, Any]:
    """The view's last render time, what it shows, and where root cause #1 and the view are on the screen."""
    return driver.execute_script(
        """
        const box = document.getElementById(arguments[0]), svg = box.querySelector('svg.graph-svg');
        const rect = e => {
          const r = e.getBoundingClientRect();
          return {left: r.left, top: r.top, right: r.right, bottom: r.bottom};
        };
        const root = box.querySelector('.gv-node[data-rank="1"]');
        return {ms: +box.dataset.renderMs, init: +box.dataset.initMs, drawnAt: +box.dataset.drawnAt,
                items: +box.dataset.items,
                nodes: box.querySelectorAll('.gv-node').length, groups: box.querySelectorAll('.gv-group').length,
                svg: rect(svg), root: root && rect(root), rootTopo: root && root.dataset.topo,
                win: {w: window.innerWidth, h: window.innerHeight},
                status: box.querySelector('.gv-status').textContent};
        """,
        box,
    )


def _in_view(s: dict[str, Any]) -> bool:
    r, v, w = s["root"], s["svg"], s["win"]
    inside = r["left"] >= v["left"] and r["right"] <= v["right"] and r["top"] >= v["top"] and r["bottom"] <= v["bottom"]
    return inside and r["left"] >= 0 and r["top"] >= 0 and r["right"] <= w["w"] and r["bottom"] <= w["h"]


def _show(driver: Any, box: str) -> None:
    driver.execute_script("document.getElementById(arguments[0]).scrollIntoView({block: 'start'})", box)


def _fills(driver: Any, box: str) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.getElementById(arguments[0]).querySelectorAll('.gv-node > rect:first-of-type'))"
        ".map(r => r.getAttribute('fill'))",
        box,
    )


def _check_view(driver: Any, report: Path, cand: dict, shot: str) -> dict[str, Any]:
    """The default view, the whole graph, the colour switch and a click, on candidate 0 of `report`."""
    box = "lw-graph-0-0"
    console_errors(driver)
    open_report(driver, report)
    _show(driver, box)
    near = _state(driver, box)
    root = cand["root_causes"][0]
    assert near["init"] < LIMIT_MS and near["ms"] <= near["init"] and near["rootTopo"] == str(root["topo_index"]), near
    assert _in_view(near), near
    driver.save_screenshot(str(ARTIFACTS / f"{shot}.png"))
    # the whole graph, folded, root cause #1 still in view
    t = driver.execute_script(
        "const b = document.getElementById(arguments[0]), t0 = performance.now();"
        "b.querySelector('.gv-whole').click(); return performance.now() - t0;",
        box,
    )
    whole = _state(driver, box)
    assert t < LIMIT_MS and whole["ms"] < LIMIT_MS and whole["status"].startswith("Whole graph"), whole
    assert _in_view(whole), whole
    driver.save_screenshot(str(ARTIFACTS / f"{shot}-whole.png"))
    # local error instead of accumulated: the same nodes, other colours
    before = _fills(driver, box)
    driver.execute_script(
        "document.getElementById(arguments[0]).querySelector('input.gv-metric[value=local]').click()", box
    )
    after = _fills(driver, box)
    assert len(after) == len(before) and after != before
    # a click on root cause #1: its row in the table is the target, on screen
    driver.execute_script("document.getElementById(arguments[0]).querySelector('.gv-node[data-rank=\"1\"]')"
                          ".dispatchEvent(new MouseEvent('click', {bubbles: true}))", box)  # fmt: skip
    row = f"lw-c0-t{root['topo_index']}"
    assert driver.execute_script("return location.hash") == f"#{row}"
    top = driver.execute_script(
        "const r = document.getElementById(arguments[0]).getBoundingClientRect();"
        "return [r.top, r.bottom, window.innerHeight, document.querySelector(':target').id];",
        row,
    )
    assert 0 <= top[0] < top[2] and top[3] == row, top
    assert console_errors(driver) == []
    return {"near": near, "whole": whole, "click_ms": t}


@pytest.mark.browser
def test_demo_detector_graph_in_chromium(browser: Any, detector_run: Path):  # noqa: F811
    results = load(detector_run)
    cand = results["stages"][0]["candidates"][0]
    ARTIFACTS.mkdir(exist_ok=True)
    got = _check_view(browser, detector_run / "report.html", cand, "graphview_detector")
    # 37 nodes: all of them drawn in the default view; the whole graph folds them by name (stage1, ...)
    assert got["near"]["nodes"] == len(cand["graph"]["topo"]) == 37
    assert got["whole"]["groups"] > 0 and got["whole"]["items"] < 37
    # the INT8 candidate: its own root cause in view, INT8 and FP32 badges
    _show(browser, "lw-graph-0-1")
    int8 = _state(browser, "lw-graph-0-1")
    assert int8["ms"] < LIMIT_MS and _in_view(int8), int8
    badges = browser.execute_script(
        "return Array.from(document.querySelectorAll('#lw-graph-0-1 .gv-badge')).map(t => t.textContent)"
    )
    assert {"I8", "32"} <= set(badges)
    browser.save_screenshot(str(ARTIFACTS / "graphview_detector_int8.png"))


@pytest.mark.browser
def test_5000_node_graph_in_chromium(browser: Any, big_run: Path):  # noqa: F811
    cand = load(big_run)["stages"][0]["candidates"][0]
    got = _check_view(browser, big_run / "report.html", cand, "graphview_5000")
    # the neighbourhood only, and the whole graph folded into a few dozen groups and nodes
    assert 10 <= got["near"]["nodes"] <= 100 and got["near"]["groups"] == 0
    assert got["whole"]["items"] <= 150 and got["whole"]["groups"] >= 20
    # a group unfolds on a click
    box = "lw-graph-0-0"
    browser.execute_script("document.querySelector('#lw-graph-0-0 input.gv-metric[value=acc]').click()")
    items = got["whole"]["items"]
    browser.execute_script("document.getElementById(arguments[0]).querySelector('.gv-group')"
                           ".dispatchEvent(new MouseEvent('click', {bubbles: true}))", box)  # fmt: skip
    unfolded = _state(browser, box)
    assert unfolded["items"] > items and unfolded["ms"] < LIMIT_MS


@pytest.mark.browser
def test_hostile_names_stay_text_in_the_graph(browser: Any, hostile_run: Path):  # noqa: F811
    console_errors(browser)
    open_report(browser, hostile_run / "report.html")
    assert browser.execute_script("return typeof window.__pwned") == "undefined"
    titles = browser.execute_script(
        "return Array.from(document.querySelectorAll('#lw-graph-0-0 .gv-node > title')).map(t => t.textContent)"
    )
    assert len(titles) == 3 and all(any(t.startswith(name + "\n") for t in titles) for name in HOSTILE)
    assert console_errors(browser) == []
