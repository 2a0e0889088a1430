"""report.html in a real browser: headless Chromium through Selenium, over file://, no network.

Needs Debian's chromium and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver) and the
selenium package; skipped without them, unless TRTVERIFY_REQUIRE_BROWSER=1 (CI), which fails instead.
"""

from __future__ import annotations

import importlib.util
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.report.conftest import FAULT, HOSTILE, HOSTILE_QUOTE, HOSTILE_SCRIPT, load, typed
from trtverify.report.html import write_report

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
ARTIFACTS = ROOT / "test-artifacts"


def _missing() -> str | None:
    for exe in (CHROMIUM, CHROMEDRIVER):
        if not exe.exists():
            return f"{exe} not found (apt-get install chromium chromium-driver)"
    if importlib.util.find_spec("selenium") is None:
        return "selenium is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    why = _missing()
    if why:
        if os.environ.get("TRTVERIFY_REQUIRE_BROWSER") == "1":
            pytest.fail(f"TRTVERIFY_REQUIRE_BROWSER=1 but {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = str(CHROMIUM)
    with tempfile.TemporaryDirectory(prefix="trtverify-chromium-") as profile:
        for arg in (
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--window-size=1366,900",
        ):
            opts.add_argument(arg)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # console messages, for console_errors()
        # an explicit driver: Selenium Manager never tries to download one
        driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=opts)
        try:
            yield driver
        finally:
            driver.quit()


def open_report(driver: Any, path: Path) -> None:
    driver.set_window_size(1366, 900)
    driver.get(path.resolve().as_uri())
    assert driver.execute_script("return typeof Chart") == "function", "Chart.js did not load"


def console_errors(driver: Any) -> list[str]:
    """Console errors since the last call (reading the log empties it)."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def visible_values(driver: Any, table_id: str, col: int) -> list[float | None]:
    return driver.execute_script(
        "return Array.from(document.getElementById(arguments[0]).tBodies[0].rows).filter(r => !r.hidden)"
        ".map(r => { const v = r.cells[arguments[1]].dataset.v; return v === '' ? null : Number(v); });",
        table_id,
        col,
    )


def chart_state(driver: Any, canvas_id: str) -> dict[str, Any]:
    """Per dataset kind: how many points, their x values; and whether the canvas has any ink."""
    return driver.execute_script(
        """
        const canvas = document.getElementById(arguments[0]), chart = Chart.getChart(canvas);
        if (!chart) return null;
        const kinds = {};
        for (const ds of chart.data.datasets) {
          const k = kinds[ds.kind] || (kinds[ds.kind] = {n: 0, x: [], y: [], rank: []});
          k.n += ds.data.length;
          for (const p of ds.data) { k.x.push(p.x); k.y.push(p.y); if (p.rank !== undefined) k.rank.push(p.rank); }
        }
        const px = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
        let ink = 0;
        for (let i = 3; i < px.length; i += 4) if (px[i] > 0) ink++;
        return {kinds: kinds, ink: ink, pixels: px.length / 4, rows: +canvas.dataset.rows,
                ytitle: chart.options.scales.y.title.text};
        """,
        canvas_id,
    )


def tooltip_of(driver: Any, canvas_id: str, kind: str, index: int) -> dict[str, Any]:
    """Open the tooltip of point `index` of the first dataset of `kind`, as a hover would; return its text."""
    return driver.execute_script(
        """
        const chart = Chart.getChart(document.getElementById(arguments[0]));
        const di = chart.data.datasets.findIndex(ds => ds.kind === arguments[1]);
        const el = chart.getDatasetMeta(di).data[arguments[2]];
        chart.tooltip.setActiveElements([{datasetIndex: di, index: arguments[2]}], {x: el.x, y: el.y});
        chart.update();
        const t = chart.tooltip;
        return {title: t.title, body: t.body.map(b => b.lines).flat(), raw: t.dataPoints.map(p => p.raw.tensor)};
        """,
        canvas_id,
        kind,
        index,
    )


def screenshot_section(driver: Any, element_id: str, path: Path, height: int = 2400) -> None:
    driver.set_window_size(1366, height)
    driver.execute_script("document.getElementById(arguments[0]).scrollIntoView()", element_id)
    driver.save_screenshot(str(path))
    driver.set_window_size(1366, 900)


def test_demo_report_charts_sorts_filters_and_links(browser: Any, demo_run: Path):
    results = load(demo_run)
    stage_names = [s["name"] for s in results["stages"]]
    si = stage_names.index("layerwise")
    cands = results["stages"][si]["candidates"]
    open_report(browser, demo_run / "report.html")
    ARTIFACTS.mkdir(exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "report.png"))
    assert browser.execute_script("return document.querySelector('.verdict .big').textContent") == "PASSED"

    for ci, cand in enumerate(cands):
        state = chart_state(browser, f"lw-chart-{si}-{ci}")
        assert state is not None, "no Chart.js instance on the canvas"
        assert state["kinds"]["rows"]["n"] == state["rows"] == len(cand["rows"])
        assert sorted(state["kinds"]["rows"]["x"]) == [r["topo_index"] for r in cand["rows"]]
        assert state["kinds"]["first"]["n"] == 0 and state["kinds"]["root"]["n"] == len(cand["root_causes"])
        assert state["kinds"]["threshold"]["n"] == 2 and state["ytitle"] == "1 − cosine (log)"
        assert state["ink"] > state["pixels"] * 0.02, "the chart canvas is (nearly) blank"
    hists = sum(len(c.get("histograms") or []) for c in cands)
    assert (
        browser.execute_script(
            "return Array.from(document.querySelectorAll('canvas.hist-chart')).filter(c => Chart.getChart(c)).length"
        )
        == hists
    )

    # click-to-sort: numeric on rel_l2 (column 5), ascending then descending
    table = f"lw-table-{si}-0"
    header = browser.find_element("css selector", f"#{table} thead th:nth-child(6)")
    assert header.text.startswith("rel_l2") and header.get_attribute("aria-sort") == "none"
    header.find_element("tag name", "button").click()
    asc = visible_values(browser, table, 5)
    assert asc == sorted(asc)
    assert visible_values(browser, table, 0) == [
        r["topo_index"] for r in sorted(cands[0]["rows"], key=lambda r: r["metrics"]["rel_l2"])
    ]
    assert header.get_attribute("aria-sort") == "ascending"
    assert browser.find_element("css selector", f"#{table} thead th:nth-child(1)").get_attribute("aria-sort") == "none"
    header.find_element("tag name", "button").click()
    assert (
        visible_values(browser, table, 5) == sorted(asc, reverse=True)
        and header.get_attribute("aria-sort") == "descending"
    )

    # filter box, then "failing only" (the demo passes: nothing left)
    box = browser.find_element("css selector", f'input.row-filter[data-table="{table}"]')
    box.send_keys("RELU")
    want = sum("relu" in " ".join([r["tensor"], r["node"], r["op_type"]]).lower() for r in cands[0]["rows"])
    assert 0 < want < len(cands[0]["rows"])
    assert len(visible_values(browser, table, 0)) == want
    count = browser.find_element("css selector", f'.row-count[data-table="{table}"]').text
    assert count == f"{want} of {len(cands[0]['rows'])} tensors shown"
    browser.find_element("css selector", f'input.row-failing[data-table="{table}"]').click()
    assert visible_values(browser, table, 0) == []
    browser.find_element("css selector", f'input.row-failing[data-table="{table}"]').click()
    box.clear()
    box.send_keys(" ")  # clear() sends no input event
    assert len(visible_values(browser, table, 0)) == len(cands[0]["rows"])

    # build-log layer -> layerwise row -> back, through the closed <details>
    log = results["stages"][stage_names.index("buildlog")]["logs"][0]
    k = next(i for i, layer in enumerate(log["layers"]) if layer["name"] == "/features/block1/conv/Conv_myl0_1")
    assert not browser.find_element("id", f"bl-l0-{k}").is_displayed()
    int8 = [c["name"] for c in cands].index("int8")
    row = browser.find_element("id", f"lw-c{int8}-t0")
    row.find_element("css selector", f'a[href="#bl-l0-{k}"]').click()
    layer_row = browser.find_element("id", f"bl-l0-{k}")
    assert layer_row.is_displayed() and browser.execute_script("return location.hash") == f"#bl-l0-{k}"
    layer_row.find_element("css selector", f'a[href="#lw-c{int8}-t0"]').click()
    assert browser.execute_script("return location.hash") == f"#lw-c{int8}-t0"
    screenshot_section(browser, "stage-layerwise", ARTIFACTS / "report-layerwise.png")


def test_failing_run_marks_first_divergence_and_root_causes(browser: Any, failing_run: Path):
    results = load(failing_run)
    cand = results["stages"][0]["candidates"][0]
    if not cand.get("histograms"):  # results written before histograms existed: add one by hand
        rc = cand["root_causes"][0]
        cand["histograms"] = [
            {
                "tensor": rc["tensor"],
                "node": rc["node"],
                "op_type": rc["op_type"],
                "topo_index": rc["topo_index"],
                "reason": "root cause #1",
                "log10_edges": [-4.0, -3.5, -3.0, -2.5],
                "counts": [5, 50, 9],
                "exact": 1,
                "nonfinite": 0,
                "sampled": 65,
                "total": 65,
            }
        ]
        write_report(typed(results), failing_run / "report.html")
    fd = cand["first_divergence"]
    open_report(browser, failing_run / "report.html")
    assert browser.execute_script("return document.querySelector('.verdict .big').textContent") == "FAILED"
    causes = browser.find_element("css selector", "ul.causes[aria-label='why']").text
    assert f"first divergence {fd['tensor']}" in causes and f"root cause #1 {FAULT}" in causes
    # the planted fault changed the Conv's weights: the lint against the reference says so, in the header
    lint = browser.find_element("css selector", "ul.lint-verdict").text
    assert f"constant_changed ×1, first at {FAULT}" in lint

    state = chart_state(browser, "lw-chart-0-0")
    kinds = state["kinds"]
    assert kinds["first"]["n"] == 1 and kinds["first"]["x"] == [fd["topo_index"]]
    assert kinds["root"]["n"] == len(cand["root_causes"]) > 0
    assert kinds["root"]["x"][0] == cand["root_causes"][0]["topo_index"] and kinds["root"]["rank"][0] == 1
    failed = [r for r in cand["rows"] if not r["passed"]]
    assert kinds["rows"]["n"] == len(cand["rows"]) and 0 < len(failed) < len(cand["rows"])
    assert kinds["threshold"]["y"] == pytest.approx([1 - 0.999] * 2)  # cosine >= 0.999, the stage default
    tip = tooltip_of(browser, "lw-chart-0-0", "first", 0)
    assert tip["title"] == [fd["tensor"]] and "▲ first divergence" in tip["body"]
    tip = tooltip_of(browser, "lw-chart-0-0", "root", 0)
    assert "◆ root cause #1" in tip["body"]
    hist = browser.execute_script(
        "return Array.from(document.querySelectorAll('canvas.hist-chart'))"
        ".map(c => Chart.getChart(c).data.datasets[0].data.length)"
    )
    assert len(hist) == len(cand["histograms"]) and all(n > 0 for n in hist)

    # the rel_l2 view: its own threshold line
    browser.find_element("css selector", 'input[type=radio][value="rel_l2"]').click()
    state = chart_state(browser, "lw-chart-0-0")
    assert state["ytitle"] == "rel_l2 (log)" and state["kinds"]["threshold"]["y"] == pytest.approx([0.01, 0.01])
    assert state["kinds"]["first"]["x"] == [fd["topo_index"]]
    assert browser.find_element("id", "lw-help-0-0").text.startswith("rel_l2 of every compared tensor")
    assert (
        "Dashed line: the per-tensor check cand: rel_l2 <= 0.01 (every tensor)."
        in browser.find_element("id", "lw-help-0-0").text
    )

    browser.find_element("css selector", "input.row-failing").click()
    assert visible_values(browser, "lw-table-0-0", 0) == [r["topo_index"] for r in failed]
    ARTIFACTS.mkdir(exist_ok=True)
    screenshot_section(browser, "lw-c0", ARTIFACTS / "report-failing.png", height=1400)


def test_hostile_names_stay_text_in_chromium(browser: Any, hostile_run: Path):
    cand = load(hostile_run)["stages"][0]["candidates"][0]
    open_report(browser, hostile_run / "report.html")
    assert browser.execute_script("return typeof window.__pwned") == "undefined"
    assert browser.execute_script("return document.querySelectorAll('img, b, object, iframe').length") == 0
    # Chart.js, the chart's data, the graph's data, dagre with the graph view, the line that draws the graph, the
    # page's own
    assert browser.execute_script("return document.scripts.length") == 6
    text = browser.execute_script("return document.getElementById('lw-table-0-0').tBodies[0].textContent")
    for name in HOSTILE:
        assert name in text
    tip = browser.execute_script(
        """
        const chart = Chart.getChart(document.getElementById('lw-chart-0-0'));
        const out = [];
        chart.data.datasets.forEach((ds, di) => { if (ds.kind !== 'rows') return; ds.data.forEach((p, j) => {
          const el = chart.getDatasetMeta(di).data[j];
          chart.tooltip.setActiveElements([{datasetIndex: di, index: j}], {x: el.x, y: el.y});
          chart.update();
          out.push({title: chart.tooltip.title, body: chart.tooltip.body.map(b => b.lines).flat()});
        }); });
        return out;
        """
    )
    titles = [t["title"][0] for t in tip]
    assert titles == [r["tensor"] for r in cand["rows"]]
    node_line = next(t for t in tip if t["title"] == [HOSTILE_SCRIPT])["body"][0]
    assert node_line.startswith(f"node {HOSTILE[0]} (MatMul)")
    assert any(f"node {HOSTILE_QUOTE} (Relu)" in t["body"][0] for t in tip)
    legend = browser.execute_script(
        "return Chart.getChart(document.getElementById('lw-chart-0-0')).legend.legendItems.map(i => i.text)"
    )
    assert "first divergence" in legend and "root causes (ranked)" in legend
    # the first divergence marker, over a tensor named like a script
    assert tooltip_of(browser, "lw-chart-0-0", "first", 0)["title"] == [HOSTILE_SCRIPT]
    assert browser.execute_script("return typeof window.__pwned") == "undefined"


def test_perf_demo_report_shows_the_perf_section_without_console_errors(browser: Any, perf_run: Path):
    stage = next(s for s in load(perf_run)["stages"] if s["name"] == "perf")
    console_errors(browser)
    open_report(browser, perf_run / "report.html")
    assert console_errors(browser) == []
    section = browser.find_element("id", "stage-perf")
    assert section.is_displayed()
    rows = browser.find_elements("css selector", "#pf-latency tbody tr")
    assert len(rows) == len(stage["rows"]) and all(r.is_displayed() for r in rows)
    # bars are drawn: the slowest fp32 layer fills its track, A and B bars of the qat diff have width
    widths = browser.execute_script(
        """
        const w = el => el.getBoundingClientRect().width;
        const track = document.querySelector('#pf-e0-layers .track');
        const fp32 = Array.from(document.querySelectorAll('#pf-e0-layers .bar')).map(w);
        const diff = Array.from(document.querySelectorAll('#pf-e2-diff tbody tr')).slice(0, 5)
          .map(tr => Array.from(tr.querySelectorAll('.bar')).map(w));
        return {track: w(track), max: Math.max(...fp32), diff: diff};
        """
    )
    assert widths["max"] == pytest.approx(widths["track"], abs=1)
    assert all(len(pair) == 2 and max(pair) > 0 for pair in widths["diff"])
    # an engine with a diff keeps its layer table closed; a finding's layer link opens it at the row
    table = browser.find_element("id", "pf-e2-layers")
    assert not table.is_displayed()
    browser.find_element("css selector", "#pf-e2 table.engine-findings a[href^='#pf-e2-l']").click()
    target = browser.execute_script("return location.hash").lstrip("#")
    assert target.startswith("pf-e2-l") and browser.find_element("id", target).is_displayed()
    ARTIFACTS.mkdir(exist_ok=True)
    browser.find_element("css selector", "a[href='#stage-perf']").click()
    screenshot_section(browser, "stage-perf", ARTIFACTS / "report-perf.png", height=2600)
    screenshot_section(browser, "pf-e2", ARTIFACTS / "report-perf-diff.png", height=1800)
    assert console_errors(browser) == []


def test_engine_layers_rows_and_log_layers_link_both_ways_in_chromium(browser: Any, linked_run: Path):
    """Hand-made engine exports named after the demo's ONNX nodes (no TensorRT engine can be built here)."""
    results = load(linked_run)
    names = [s["name"] for s in results["stages"]]
    int8 = [c["name"] for c in results["stages"][names.index("layerwise")]["candidates"]].index("int8")
    console_errors(browser)
    open_report(browser, linked_run / "report.html")
    # layerwise row -> engine layer (in a closed <details>) -> build-log layer -> back to the engine layer
    browser.find_element("id", f"lw-c{int8}-t3").find_element("css selector", 'a[href="#pf-e1-l4"]').click()
    layer = browser.find_element("id", "pf-e1-l4")
    assert layer.is_displayed() and "/features/block2/conv/Conv_myl0_6" in layer.text
    layer.find_element("css selector", 'a[href="#bl-l0-6"]').click()
    log_row = browser.find_element("id", "bl-l0-6")
    assert log_row.is_displayed() and browser.execute_script("return location.hash") == "#bl-l0-6"
    log_row.find_element("css selector", 'a[href="#pf-e1-l4"]').click()
    assert browser.execute_script("return location.hash") == "#pf-e1-l4"
    browser.find_element("id", "pf-e1-l4").find_element("css selector", f'a[href="#lw-c{int8}-t3"]').click()
    assert browser.find_element("id", f"lw-c{int8}-t3").is_displayed()
    assert console_errors(browser) == []


LONG = "StatefulPartitionedCall_functional_1_transformer_encoder_block_{i}_multi_head_attention_query_einsum_Einsum"


@pytest.fixture(scope="module")
def long_names_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Layerwise on a chain whose node and tensor names are 100+ characters without a '/' or '.' to break at (as
    exporters that flatten scopes with '_' write them), against ONNX Runtime's FP16 conversion of it."""
    import onnx
    from onnx import TensorProto, helper
    from onnxruntime.transformers.float16 import convert_float_to_float16

    from tests.conftest import run_cli

    tmp = tmp_path_factory.mktemp("long")
    nodes, prev = [], "input_ids_embedding_output"
    for i in range(6):
        out = LONG.format(i=i) + "_output_0"
        nodes.append(helper.make_node("Sigmoid" if i % 2 else "Relu", [prev], [out], name=LONG.format(i=i)))
        prev = out
    nodes.append(helper.make_node("Identity", [prev], ["logits"], name="final_identity"))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("input_ids_embedding_output", TensorProto.FLOAT, [1, 4, 768])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 4, 768])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(tmp / "long.onnx"))
    onnx.save(convert_float_to_float16(model, keep_io_types=True), str(tmp / "long_fp16.onnx"))
    r = run_cli("layerwise", str(tmp / "long.onnx"), str(tmp / "long_fp16.onnx"), "--out", str(tmp / "out"), "-q")
    assert r.code == 0, r.out + r.err
    return tmp / "out"


def test_long_tensor_names_wrap_instead_of_widening_a_1400_px_window(browser: Any, long_names_run: Path):
    """The tensor table overflowed a 1400 px window: a node name with no break opportunity set the width of its
    column. Every table, its folded parts opened, fits the window's width."""
    browser.set_window_size(1400, 900)
    browser.get((long_names_run / "report.html").resolve().as_uri())
    widths = browser.execute_script(
        """
        document.querySelectorAll('details').forEach(d => d.open = true);
        const de = document.documentElement;
        return {page: de.scrollWidth, window: de.clientWidth,
                tables: Array.from(document.querySelectorAll('table')).map(t => [t.id || t.className,
                                                                            Math.ceil(t.getBoundingClientRect().right)])};
        """
    )
    assert widths["window"] > 1300 and widths["page"] <= widths["window"], widths
    assert any(name.startswith("lw-table") for name, _ in widths["tables"]), widths
    assert [t for t in widths["tables"] if t[1] > widths["window"]] == [], widths
    ARTIFACTS.mkdir(exist_ok=True)
    browser.execute_script("document.querySelector('table.tensors').scrollIntoView()")
    browser.save_screenshot(str(ARTIFACTS / "report-long-names-1400.png"))
    browser.set_window_size(1366, 900)
