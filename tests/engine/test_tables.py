"""Readers of trtexec's console tables and timing export (trtverify.engine.tables) on the real logs of
tests/data/trtexec_logs (provenance in its README) and the real --exportTimes file of tests/data/engine_exports:
the numbers below were read by eye from the files, not computed by the code."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import DATA, run_cli
from trtverify.engine.audit import audit
from trtverify.toolout.perfsummary import parse_perf_summary
from trtverify.toolout.tables import (
    parse_layer_listing,
    parse_layer_listings,
    parse_profile_table,
    parse_profile_tables,
    summarize_times,
)
from trtverify.util.errors import UsageError

LOGS = DATA / "trtexec_logs"
EXPORTS = DATA / "engine_exports"
TIMES = EXPORTS / "fp32" / "resnet.onnx.engine.timing.json"
ALL_LOGS = sorted(LOGS.glob("*.log"))

# file: (format, iterations, rows, Total (ms, avg ms, median ms), a named layer, its (avg ms, median ms, Time %))
PROFILES = {
    "05_trt713_multiline_profile_old_haxconn.log": (
        "right_aligned", 1514, 6, (5477.95, 3.62, None), "prob input reformatter 0", (3.33, None, 92.1)),
    "06_trt852_profile_old_median_haxconn.log": (
        "right_aligned", 4932, 4, (5469.61, 1.1090, 1.1033), "{ForeignNode[conv1/7x7_s2...loss3/classifier]}",
        (1.0320, 1.0321, 93.1)),
    "07_trt861_profile_columns_pointpillars_blog.log": (
        "columns", 1434, 28, (2309.39, 1.6105, 1.6100), "Conv_311 || Conv_308 || Conv_307", (0.0819, 0.0819, 5.1)),
    "08_trt86_profile_columns_uvit_trtllm2.log": (
        "columns", 41, 12, (3359.89, 81.9486, 79.3866), "{ForeignNode[UViTNet/CONSTANT_8...UViTNet/ELEMENTWISE_DIV_0]}",
        (81.6096, 79.3160, 99.6)),
    "12_trt1016_profile_columns_cookbook.log": (
        "columns", 18362, 15, (1529.13, 0.0833, 0.0804), "node_conv2d_myl0_1", (0.0105, 0.0098, 12.7)),
}  # fmt: skip

# file: (format, throughput qps, latency mean, latency p99, GPU compute mean, walltime s), as printed
SUMMARIES = {
    "05_trt713_multiline_profile_old_haxconn.log": ("trt7", None, None, None, 3.68068, None),
    "10_trt86_oneline_explanations_cookbook.log": ("oneline", 20565.7, 0.0537879, 0.0688477, 0.045442, 3.00014),
    "13_trt1016_oneline_cookbook.log": ("oneline", 15374.3, 0.0441053, 0.0512695, 0.0359588, 3.00013),
    "14_trt8x_oneline_info_prefix_aisbench.log": ("oneline", 120.699, 9.81005, 11.4742, 8.23978, 3.02405),
    "15_trt8x_oneline_noprefix_yolov9_mish.log": ("oneline", 347.915, 2.87257, 2.87744, 2.87257, 10.0082),
    "16_trt84_oneline_passed_metategra_pr952.log": ("oneline", 41087.7, 0.402238, 0.420288, 0.388221, 3.00119),
}


def test_the_corpus_has_at_least_twelve_logs_each_with_a_readme_row():
    readme = (LOGS / "README.md").read_text()
    assert len(ALL_LOGS) >= 12 and all(f"`{p.name}`" in readme for p in ALL_LOGS)
    covered = set(PROFILES) | set(SUMMARIES) | {"09_trt86_layerinfo_names_cookbook.log"}
    assert {p.name for p in ALL_LOGS if p.name >= "05"} <= covered | {"11_trt1016_layerinfo_detailed_cookbook.log"}


@pytest.mark.parametrize("name", list(PROFILES))
def test_profile_tables_of_real_logs(name: str):
    fmt, iterations, count, total, layer, (avg, median, pct) = PROFILES[name]
    table = parse_profile_table((LOGS / name).read_text())
    assert table is not None and table.format == fmt and table.iterations == iterations
    assert len(table.rows) == count and table.total is not None
    assert (table.total.total_ms, table.total.avg_ms, table.total.median_ms) == total
    row = next(r for r in table.rows if r.name == layer)
    assert (row.avg_ms, row.median_ms, row.percent) == (avg, median, pct)


@pytest.mark.parametrize("name", list(PROFILES))
def test_total_row_is_the_sum_of_the_rows_within_rounding(name: str):
    table = parse_profile_table((LOGS / name).read_text())
    assert table is not None and table.total is not None
    n = len(table.rows) + 1
    assert sum(r.total_ms for r in table.rows) == pytest.approx(table.total.total_ms, abs=0.005 * n)
    decimals = 2 if table.total.avg_ms == round(table.total.avg_ms, 2) and table.iterations == 1514 else 4
    assert sum(r.avg_ms for r in table.rows) == pytest.approx(table.total.avg_ms, abs=0.5 * 10**-decimals * n)
    assert sum(r.percent for r in table.rows) == pytest.approx(100.0, abs=0.05 * n)


def test_a_log_without_a_table_or_listing_gives_none():
    text = (LOGS / "01_trt10_oneline_issue4177.log").read_text()
    assert parse_profile_table(text) is None and parse_profile_tables(text) == []
    assert parse_layer_listing(text) is None


@pytest.mark.parametrize("name", list(SUMMARIES))
def test_performance_summaries_of_the_new_logs(name: str):
    fmt, qps, mean, p99, gpu, wall = SUMMARIES[name]
    perf = parse_perf_summary((LOGS / name).read_text())
    assert perf is not None and perf.format == fmt and perf.throughput_qps == qps and perf.walltime_s == wall
    assert perf.stats.get("latency", {}).get("mean") == mean and perf.stats.get("latency", {}).get("p99") == p99
    assert perf.stats["gpu_compute"]["mean"] == gpu


def test_layer_listing_names_only_trt86():
    listing = parse_layer_listing((LOGS / "09_trt86_layerinfo_names_cookbook.log").read_text())
    assert listing is not None and listing.format == "names" and len(listing.layers) == 15
    assert listing.layers[0].name == "Reformatting CopyNode for Input Tensor 0 to Conv-1 + ReLU-2"
    assert listing.layers[-1].name == "(Unnamed Layer* 32) [Shuffle]"
    assert listing.bindings == ["tensor-0", "tensor-15"]


def test_layer_listing_detailed_trt10():
    listing = parse_layer_listing((LOGS / "11_trt1016_layerinfo_detailed_cookbook.log").read_text())
    assert listing is not None and listing.format == "detailed" and len(listing.layers) == 9
    first = listing.layers[0]
    assert (first.name, first.type, first.precision) == ("node_conv2d + node_relu", "CaskConvolution", "FP32")
    gemm = next(x for x in listing.layers if x.name == "node_linear_myl4_0")
    assert gemm.type == "gemm" and gemm.onnx_nodes == ["node_linear", "node_relu_2"]
    assert listing.bindings == ["x", "y", "z"]


def test_build_log_engine_layer_information_is_read_by_the_shared_line_reader():
    text = (
        "[01/20/2024-19:48:39] [V] [TRT] Engine Layer Information:\n"
        "Layer(CaskConvolution): Conv_0 + Relu_1, Tactic: 0x000000000000001f, input[Float(1,3,224,224)] -> "
        "x[Half(1,64,112,112)]\n"
        "Layer(Reformat): Reformatting CopyNode for Input Tensor 0 to Conv_2, Tactic: 0x00000000000003e8, "
        "x[Half(1,64,112,112)] -> y[Int8(1,64,112,112)]\n"
        "[01/20/2024-19:48:39] [I] [TRT] done\n"
    )
    listing = parse_layer_listing(text)
    assert listing is not None and listing.format == "build_log"
    assert [(x.name, x.type, x.precision) for x in listing.layers] == [
        ("Conv_0 + Relu_1", "CaskConvolution", "FP16"),
        ("Reformatting CopyNode for Input Tensor 0 to Conv_2", "Reformat", "INT8"),
    ]
    listings = parse_layer_listings(text + text)
    assert len(listings) == 2


def test_export_times_summary_on_the_real_file():
    data = json.loads(TIMES.read_text())
    s = summarize_times(data, str(TIMES))
    assert s.inferences == 1600 == len(data)
    assert s.stats["latency"]["mean"] == pytest.approx(float(np.mean([d["latencyMs"] for d in data])), rel=1e-12)
    assert s.stats["gpu_compute"]["median"] == pytest.approx(float(np.median([d["computeMs"] for d in data])))
    enqueue = [d["endEnqMs"] - d["startEnqMs"] for d in data]  # this trtexec wrote no enqueueMs
    assert s.stats["enqueue"]["mean"] == pytest.approx(float(np.mean(enqueue)))
    assert s.stats["latency"]["min"] == min(d["latencyMs"] for d in data)
    assert s.stats["latency"]["min"] <= s.stats["latency"]["p90"] <= s.stats["latency"]["p99"]
    assert set(s.stats) == {"latency", "enqueue", "h2d", "gpu_compute", "d2h"}
    assert set(s.stats["d2h"]) == {"min", "max", "mean", "median", "p90", "p95", "p99"}


def test_export_times_of_older_versions_and_bad_input():
    old = [{"startComputeMs": 1.0, "endComputeMs": 3.0, "startH2dMs": 0.5, "endH2dMs": 1.0}]
    s = summarize_times(old)
    assert s.stats["gpu_compute"]["mean"] == 2.0 and "latency" not in s.stats and s.inferences == 1
    with pytest.raises(UsageError, match="x.json: no per-inference timings"):
        summarize_times([{"a": 1}], "x.json")
    with pytest.raises(UsageError, match="expected a JSON list"):
        summarize_times({"latencyMs": 1})


def test_audit_from_a_console_log_alone():
    a = audit([LOGS / "07_trt861_profile_columns_pointpillars_blog.log"])
    assert a.layers == 28 and a.precisions == {"unknown": 28} and a.reformat_layers == 3
    assert a.total_ms == pytest.approx(1.6105, abs=0.005)
    ppscatter = next(r for r in a.rows if r.name == "PPScatter_0")
    assert ppscatter.avg_ms == 0.0913 and ppscatter.share == pytest.approx(0.0913 / a.total_ms)
    assert a.files["console"]["profile_format"] == "columns" and a.files["console"]["profile_iterations"] == 1434
    assert {"top_layers", "myelin_regions", "reformat_time"} <= {f.kind for f in a.findings}
    names = audit([LOGS / "09_trt86_layerinfo_names_cookbook.log"])
    assert names.layers == 15 and names.total_ms is None and names.reformat_layers == 5
    detailed = audit([LOGS / "11_trt1016_layerinfo_detailed_cookbook.log"])
    assert detailed.layers == 9 and detailed.precisions["FP32"] >= 4


def test_json_exports_win_and_export_times_fill_performance(tmp_path: Path):
    a = audit([EXPORTS / "qat", LOGS / "07_trt861_profile_columns_pointpillars_blog.log"])
    assert a.layers == 37 and "console" not in a.files
    t = audit([LOGS / "09_trt86_layerinfo_names_cookbook.log", TIMES])
    assert t.performance is not None and t.performance.format == "export_times"
    assert t.performance.inferences == 1600 and t.files["times"] == str(TIMES)
    renamed = tmp_path / "run.json"  # told apart by content
    renamed.write_text(TIMES.read_text())
    assert audit([renamed]).performance.format == "export_times"
    both = audit([LOGS / "10_trt86_oneline_explanations_cookbook.log", TIMES])
    assert both.performance.format == "oneline"  # the console summary wins


def test_cli_audit_of_a_console_log_json_keys():
    r = run_cli("engine", "audit", str(LOGS / "12_trt1016_profile_columns_cookbook.log"), "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert data["layers"] == 15 and set(data["rows"][0]) == {
        "name",
        "type",
        "precision",
        "avg_ms",
        "share",
        "onnx_nodes",
        "reformat",
    }
    schema = json.loads(run_cli("schema", "--engine").out)["audit"]
    assert set(data) <= set(schema["properties"])


# fuzzing: never an exception other than UsageError, always bounded time
FUZZ = settings(max_examples=40, deadline=2000, suppress_health_check=[HealthCheck.too_slow])
LOG_TEXTS = [p.read_text() for p in ALL_LOGS]


def _read_all(text: str) -> None:
    t0 = time.perf_counter()
    parse_profile_tables(text)
    parse_layer_listings(text)
    parse_perf_summary(text)
    assert time.perf_counter() - t0 < 1.0


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("[]{}()+|.%:0123456789 \t\nTotalLayerTimems(Avg.Median)INFO/-_&")),
               max_size=3000))  # fmt: skip
def test_fuzz_random_text(text: str):
    _read_all(text)


@FUZZ
@given(
    st.integers(0, len(LOG_TEXTS) - 1), st.lists(st.tuples(st.sampled_from("ddt"), st.integers(0, 10**6)), max_size=8)
)
def test_fuzz_real_logs_with_lines_deleted_duplicated_truncated(which: int, edits: list[tuple[str, int]]):
    lines = LOG_TEXTS[which].split("\n")
    for op, k in edits:
        if not lines:
            break
        i = k % len(lines)
        if op == "d":
            del lines[i]
        elif k % 2:
            lines.insert(i, lines[i])
        else:
            lines[i] = lines[i][: k % (len(lines[i]) + 1)]
    _read_all("\n".join(lines))


JSON = st.recursive(
    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=5) | st.dictionaries(
        st.sampled_from(["latencyMs", "computeMs", "startEnqMs", "endEnqMs", "h2dMs", "x"]), kids, max_size=5),
    max_leaves=30,
)  # fmt: skip


@FUZZ
@given(JSON)
def test_fuzz_export_times_json(data):
    try:
        s = summarize_times(data)
    except UsageError:
        return
    assert s.inferences >= 1


def test_diff_of_two_console_logs_alone():
    """`engine diff` reads a console log's --dumpProfile table as `engine audit` does (no JSON exports needed):
    the totals are the tables' sums of layer averages and every layer of each appears in one row."""
    from trtverify.engine.diff import diff

    a, b = LOGS / "12_trt1016_profile_columns_cookbook.log", LOGS / "07_trt861_profile_columns_pointpillars_blog.log"
    d = diff([a], [b])
    ta = sum(r.avg_ms for r in parse_profile_table(a.read_text()).rows)
    tb = sum(r.avg_ms for r in parse_profile_table(b.read_text()).rows)
    assert d.total_a_ms == pytest.approx(ta) and d.total_b_ms == pytest.approx(tb)
    assert sum(len(r.a_layers) for r in d.rows) == 15 and sum(len(r.b_layers) for r in d.rows) == 28


def test_a_cut_summary_whose_numbers_are_a_lone_sign_or_exponent_is_read_without_a_crash():
    """The hostile-input fuzz spliced a '+' into a summary: `[-+0-9.eE]+` took it as a number and float('+')
    raised. A number is a number now; what is not one is left out."""
    from trtverify.toolout.perfsummary import parse_perf_summary

    text = (
        "[I] === Performance summary ===\n[I] Throughput: + qps\n"
        "[I] Latency: min = 1.5 ms, max = e ms, mean = +. ms, median = 2.0 ms\n[I] Total Host Walltime: - s\n"
    )
    summary = parse_perf_summary(text)
    assert summary is not None and summary.throughput_qps is None
    assert summary.stats["latency"] == {"min": 1.5, "median": 2.0}
