"""The perf stage in report.html, the terminal summary and JUnit, from a real perf_demo run (five ResNet TensorRT
builds read from trtexec exports, the Fashion-MNIST CNN measured under ONNX Runtime)."""

from __future__ import annotations

import copy
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.report.conftest import HOSTILE, HOSTILE_IMG, HOSTILE_QUOTE, HOSTILE_SCRIPT, load, typed
from trtverify.report.html import render as render_typed
from trtverify.report.junit import junit_xml
from trtverify.report.perfview import MAX_DIFF_BARS
from trtverify.report.text import run_summary


def render(results: dict) -> str:
    return render_typed(typed(results))


def perf_of(results: dict) -> dict:
    return next(s for s in results["stages"] if s["name"] == "perf")


def section(html: str, element_id: str) -> str:
    """The HTML of <section id=element_id> up to the next section of the same kind (or the stage's checks)."""
    start = html.index(f'<section class="engine" id="{element_id}">')
    end = min(
        i for i in (html.find('<section class="engine"', start + 1), html.find('id="checks-perf"', start)) if i > 0
    )
    return html[start:end]


def table(html: str, element_id: str) -> str:
    m = re.search(rf'<table[^>]*id="{re.escape(element_id)}"[^>]*>(.*?)</table>', html, re.S)
    assert m, f"no table {element_id}"
    return m.group(1)


@pytest.fixture(scope="module")
def demo(perf_run: Path) -> dict:
    return load(perf_run)


def test_latency_table_has_every_row_with_its_speedup_and_baseline(demo: dict):
    html = render(demo)
    stage = perf_of(demo)
    body = table(html, "pf-latency")
    rows = re.findall(r'<tr id="pf-r\d+">(.*?)</tr>', body, re.S)
    assert len(rows) == len(stage["rows"]) == 10  # reference, fp16, int8 at batch 1 and 32; four engines
    by = {(r["role"], r["model"], r["batch"]): html_row for r, html_row in zip(stage["rows"], rows)}
    fp16 = by[("engine", "fp16", 32)]
    assert "2.31× vs fp32" in fp16 and 'href="#pf-e1"' in fp16 and "trtexec latency median" in fp16
    assert "0.862" in fp16 and "36,972" in fp16  # median ms, samples/s
    qat = by[("engine", "qat", 32)]
    assert "0.98× vs fp16" in qat
    cand = by[("candidate", "int8", 1)]
    # stable or not depends on the machine's load: the cell says which, with the runs and the window CV
    stable = "yes" if stage["rows"][rows.index(cand)]["stats"]["stable"] else "no"
    assert "vs reference" in cand and re.search(stable + r" \(\d+ runs, window CV [\d.]+%\)", cand)
    assert all("no baseline" in r for r in rows)  # the demo's copy stores none
    # where the rows were measured: this machine, and the A100 the engines were built on
    env = html[html.index('<ul class="notes pf-env">') :]
    assert "NVIDIA A100 80GB PCIe" in env[: env.index("</ul>")]


def test_a_baseline_from_elsewhere_is_shown_as_not_comparable_not_as_a_failure(demo: dict):
    r = copy.deepcopy(demo)
    rows = perf_of(r)["rows"]
    why = "measured elsewhere: gpu NVIDIA A100 80GB PCIe -> NVIDIA H100"
    rows[0]["baseline"] = {"state": "not_comparable", "median_ms": 0.5, "why": why}
    rows[1]["baseline"] = {"state": "comparable", "median_ms": 1.0, "change": 0.25}
    rows[2]["baseline"] = {"state": "updated", "median_ms": rows[2]["median_ms"]}
    rows[3]["baseline"] = {"state": "comparable", "median_ms": 1.0, "change": 0.001}
    body = table(render(r), "pf-latency")
    first, second, third, fourth = re.findall(r'<tr id="pf-r\d+">(.*?)</tr>', body, re.S)[:4]
    cell = re.search(r'<td class="baseline ([^"]*)"[^>]*>(.*?)</td>', first, re.S)
    assert cell and cell.group(1) == "nc" and cell.group(2) == f"not comparable: {why.replace('>', '&gt;')}"
    # the baseline cell is no failure (the stability cell may be, when the machine is busy: not what this tests)
    assert "fail-val" not in cell.group(0) and "bad" not in cell.group(0)
    assert re.search(r'<td class="baseline slower"[^>]*>1.000 ms, \+25\.0%</td>', second)
    assert "stored by this run" in third
    assert re.search(r'<td class="baseline "[^>]*>1.000 ms, \+0\.1%</td>', fourth)  # within noise: no colour


def test_engines_show_precision_mix_reformats_findings_and_layer_bars(demo: dict):
    html = render(demo)
    engines = perf_of(demo)["engines"]
    assert [e["name"] for e in engines] == ["fp32", "fp16", "qat", "qat_residual"]
    qat = section(html, "pf-e2")
    # precision mix: one segment per precision, widths summing to 100 %
    mix = re.search(r'<div class="mix"[^>]*>(.*?)</div>', qat, re.S).group(1)
    segs = re.findall(r'<span class="(p-[a-z0-9]+)" style="width: ([\d.]+)%" title="([^"]+)">', mix)
    assert [(c, t) for c, _, t in segs] == [("p-fp32", "FP32: 2"), ("p-fp16", "FP16: 3"), ("p-int8", "INT8: 32")]
    assert sum(float(w) for _, w, _ in segs) == pytest.approx(100, abs=0.05)
    assert "12 layers, 0.279 ms = 25.4% of the engine's time" in qat
    # findings, medium first, their layers linked to the layer rows
    kinds = re.findall(r'<tr class="sev-(\w+)"><td>\w+</td><td><code>(\w+)</code>', qat)
    assert kinds[:3] == [
        ("medium", "reformat_time"),
        ("medium", "qdq_unfused"),
        ("medium", "residual_add_high_precision"),
    ]
    assert all(sev == "info" for sev, _ in kinds[3:])
    layer_ids = set(re.findall(r'<tr id="(pf-e2-l\d+)">', qat))
    assert len(layer_ids) == len(engines[2]["audit"]["rows"]) == 37
    assert set(re.findall(r'href="#(pf-e2-l\d+)"', qat)) <= layer_ids
    # an engine without a diff: its own per-layer bars, open, the slowest one full width
    fp32 = section(html, "pf-e0")
    assert '<details class="engine-layers" open>' in fp32 and 'id="pf-e0-diff"' not in fp32
    widths = [float(w) for w in re.findall(r'<span class="bar p-fp32" style="width: ([\d.]+)%">', fp32)]
    assert len(widths) == 32 and max(widths) == 100.0
    assert "24.6%" in fp32  # Conv_0 + Relu_1, the share of the slowest layer


def test_diff_bars_put_a_against_b_largest_delta_first_and_say_what_is_hidden(demo: dict):
    html = render(demo)
    engines = perf_of(demo)["engines"]
    qat = section(html, "pf-e2")  # qat against fp16: 58 groups
    assert len(engines[2]["diff"]["rows"]) == 58
    bars = re.findall(r"<tr>\s*<td class=\"name\">(.*?)</tr>", table(qat, "pf-e2-diff"), re.S)
    assert len(bars) == MAX_DIFF_BARS
    assert f"{58 - MAX_DIFF_BARS} more groups with a smaller |Δ| are not shown (all 58" in qat
    deltas = [float(d) for d in re.findall(r'<td class="num (?:slower|faster)">([+-][\d.]+)</td>', qat)]
    assert deltas == sorted(deltas, key=lambda d: -abs(d)) and deltas[0] == pytest.approx(0.202, abs=1e-3)
    first = bars[0]
    assert "Conv_9" in first and '0.000 ms <span class="muted">–' in first and "0.202 ms" in first
    # A's layers link into the fp16 engine's table, B's into this one's
    assert re.search(r'B: <a href="#pf-e2-l\d+">conv1.weight \+ QuantizeLinear_7 \+ Conv_9</a>', first)
    assert re.search(r'A: <a href="#pf-e1-l\d+">', bars[1])
    # the diff's verdict and reasons above the bars
    assert "B is slower than A: 1.096 ms vs 1.017 ms (+7.8%)" in qat
    assert "<code>qdq_unfused</code>: 0 layers in A, 9 in B" in qat


def test_hostile_engine_and_layer_names_are_escaped(demo: dict):
    r = copy.deepcopy(demo)
    stage = perf_of(r)
    eng = stage["engines"][2]
    eng["name"] = HOSTILE_QUOTE
    eng["audit"]["rows"][0]["name"] = HOSTILE_SCRIPT
    eng["audit"]["rows"][0]["onnx_nodes"] = [HOSTILE_IMG]
    eng["audit"]["rows"][1]["precision"] = HOSTILE_IMG
    eng["audit"]["precisions"][HOSTILE_IMG] = 1
    eng["audit"]["findings"][0]["layers"] = [HOSTILE_SCRIPT]
    eng["audit"]["findings"][0]["message"] = HOSTILE_SCRIPT
    eng["diff"]["rows"][0]["onnx_nodes"] = [HOSTILE_IMG]
    eng["diff"]["rows"][0]["b_layers"] = [HOSTILE_SCRIPT]
    eng["diff"]["rows"][0]["b_precision"] = [HOSTILE_QUOTE]
    stage["engines"][3]["vs"] = HOSTILE_QUOTE
    for row in stage["rows"]:
        if row["model"] == "qat":
            row["model"] = HOSTILE_QUOTE
            row["median_from"] = HOSTILE_IMG
    stage["rows"][0]["baseline"] = {"state": "not_comparable", "median_ms": 1.0, "why": HOSTILE_SCRIPT}
    html = render(r)
    for name in HOSTILE:
        assert name not in html
    assert not re.search(r"<(img|b)\b", html, re.I) and 'onerror="' not in html
    assert html.count("<script") == html.count("</script>") == 2  # Chart.js and the page script
    assert "&lt;/script&gt;&lt;script&gt;window.__pwned=2&lt;/script&gt;" in html
    assert "&#34;&#39;&amp;&lt;b&gt;bold&lt;/b&gt;" in html
    assert 'class="p-other"' in html  # an unknown precision gets no class of its own
    # the hostile layer still has its anchor, and the finding links to it
    assert '<a href="#pf-e2-l0" title="&lt;/script&gt;' in html


def test_terminal_summary_of_the_perf_stage(demo: dict):
    lines = run_summary(typed(demo))
    start = next(i for i, line in enumerate(lines) if line.startswith("[PASSED ] perf:"))
    block = lines[start + 1 : start + 40]
    table_at = next(i for i, line in enumerate(block) if line.split()[:2] == ["model", "batch"])
    head = block[table_at]
    assert head.split() == ["model", "batch", "median", "ms", "p99", "ms", "samples/s", "speed-up", "baseline"]
    rows = block[table_at + 1 : table_at + 11]
    assert [r.split()[0] for r in rows] == ["reference"] * 2 + ["fp16"] * 2 + ["int8"] * 2 + [
        "fp32", "fp16", "qat", "qat_residual"
    ]  # fmt: skip
    assert "2.31x fp32" in rows[7] and "(trtexec)" in rows[7] and rows[7].rstrip().endswith("no baseline")
    engines = [
        line.strip() for line in block[table_at + 11 :] if line.startswith(" " * 10 + "engine") or "  vs " in line
    ]
    assert engines[0].startswith("engine fp32: 32 layers (FP32 32), reformats 1 = 0.045 ms (2.1%), total 2.124 ms")
    qat = next(i for i, line in enumerate(engines) if line.startswith("engine qat:"))
    assert "medium: reformat_time, qdq_unfused, residual_add_high_precision" in engines[qat]
    assert engines[qat + 1].startswith("vs fp16: B is slower than A: 1.096 ms vs 1.017 ms (+7.8%); reformats:")
    assert "qdq_unfused: 0 layers in A, 9 in B" in engines[qat + 1]
    assert len(engines) == 7  # four engines, three diffs
    assert all(len(line) < 200 for line in block)


def test_perf_checks_are_junit_test_cases(demo: dict):
    r = copy.deepcopy(demo)
    checks = perf_of(r)["checks"]
    checks[1].update(passed=False, value=1.2)  # as if fp16 missed its min_speedup
    root = ET.fromstring(junit_xml(typed(r)))
    suite = root.find("testsuite[@name='perf_demo.perf']")
    assert suite is not None and suite.get("tests") == str(len(checks)) and suite.get("failures") == "1"
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == [c["name"] for c in checks]
    assert {c.get("classname") for c in cases} == {"perf_demo.perf"}
    failure = cases[1].find("failure")
    assert failure is not None and failure.get("message") == "speedup = 1.2, limit >= 1.5"


def test_a_perf_stage_without_rows_or_engines_renders(demo: dict):
    r = copy.deepcopy(demo)
    stage = perf_of(r)
    stage.update(rows=None, engines=None, status="error", checks=[])
    stage["error"] = {"kind": "user", "message": "stages.perf: no engine files", "exit_code": 2}
    r["passed"] = False
    html = render(r)
    assert "stages.perf: no engine files" in html and 'id="pf-latency"' not in html
    assert any("user error" in line for line in run_summary(typed(r)))
    r = copy.deepcopy(demo)
    perf_of(r)["engines"] = None
    perf_of(r)["rows"] = [row for row in perf_of(r)["rows"] if row["role"] != "engine"]
    html = render(r)
    assert 'id="pf-latency"' in html and '<section class="engine"' not in html
