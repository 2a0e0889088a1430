"""Engine audit and diff on real trtexec exports (tests/data/engine_exports, with their provenance): the facts the
source states must come out of the tool."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.conftest import DATA, run_cli
from trtverify.engine.audit import audit
from trtverify.engine.diff import diff
from trtverify.engine.exports import read_layer_info, type_of
from trtverify.util.errors import UsageError

EXPORTS = DATA / "engine_exports"
FACTS = {  # build: (engine layers, Reformat layers, sum of per-layer averageMs), from the source's README
    "fp32": (32, 1, 2.124),
    "fp16": (36, 2, 1.017),
    "qat": (37, 12, 1.096),
    "qat-residual": (26, 3, 0.731),
    "qat-residual-qgap": (24, 1, 0.673),
}


@pytest.mark.parametrize("build", list(FACTS))
def test_audit_counts_and_totals_match_the_source(build: str):
    a = audit([EXPORTS / build])
    layers, reformats, total = FACTS[build]
    assert (a.layers, a.reformat_layers) == (layers, reformats)
    assert a.total_ms == pytest.approx(total, abs=5e-4)
    assert sum(a.precisions.values()) == layers and all(r.avg_ms is not None for r in a.rows)
    assert sum(r.share or 0 for r in a.rows) == pytest.approx(1.0)


def test_precision_per_layer_from_weights_and_output_formats():
    assert type_of("Row major linear FP32") == "FP32"
    assert type_of("Thirty-two wide channel vectorized row major Int8 format") == "INT8"
    assert type_of("Channel major FP16 format where channel % 8 == 0") == "FP16"
    assert audit([EXPORTS / "fp32"]).precisions == {"FP32": 32}
    qat = {r.name: r for r in audit([EXPORTS / "qat"]).rows}
    conv = qat["conv1.weight + QuantizeLinear_7 + Conv_9"]
    assert conv.precision == "INT8" and conv.onnx_nodes == ["conv1.weight", "QuantizeLinear_7", "Conv_9"]
    assert qat["MaxPool_12"].precision == "FP32"


def test_audit_of_the_plain_qat_engine_names_its_reformats_and_unfused_residual_adds():
    a = audit([EXPORTS / "qat"])
    kinds = {f.kind: f for f in a.findings}
    assert kinds["reformat_time"].severity == "medium" and len(kinds["reformat_time"].layers) == 12
    assert "0.279 ms, 25.4%" in kinds["reformat_time"].message
    assert len(kinds["qdq_unfused"].layers) == 9
    assert len(kinds["residual_add_high_precision"].layers) == 8
    assert "qdq_unfused" not in {f.kind for f in audit([EXPORTS / "qat-residual-qgap"]).findings}


def test_diff_says_qat_is_slower_than_fp16_and_why_and_what_qdq_on_the_adds_changed():
    d = diff([EXPORTS / "fp16"], [EXPORTS / "qat"])
    msgs = {f.kind: f.message for f in d.findings}
    assert msgs["total"].startswith("B is slower than A: 1.096 ms vs 1.017 ms")
    assert msgs["reformats"].startswith("reformat layers 2 -> 12")
    assert (
        msgs["qdq_unfused"] == "0 layers in A, 9 in B"
        and msgs["residual_add_high_precision"] == "0 layers in A, 8 in B"
    )
    d = diff([EXPORTS / "qat"], [EXPORTS / "qat-residual"])
    msgs = {f.kind: f.message for f in d.findings}
    assert msgs["total"].startswith("B is faster than A: 0.731 ms vs 1.096 ms")
    assert msgs["reformats"].startswith("reformat layers 12 -> 3")
    # every layer of A and of B in exactly one row
    a_names = [n for r in d.rows for n in r.a_layers]
    b_names = [n for r in d.rows for n in r.b_layers]
    assert sorted(a_names) == sorted(r.name for r in audit([EXPORTS / "qat"]).rows)
    assert sorted(b_names) == sorted(r.name for r in audit([EXPORTS / "qat-residual"]).rows)
    assert sum(r.a_ms for r in d.rows) == pytest.approx(d.total_a_ms)


def test_commands_json_and_text(tmp_path: Path):
    r = run_cli("engine", "audit", str(EXPORTS / "qat"), "--json")
    assert r.code == 0, r.err
    data = json.loads(r.out)
    assert {"layers", "reformat_layers", "total_ms", "precisions", "rows", "findings"} <= set(data)
    assert set(data["rows"][0]) == {"name", "type", "precision", "avg_ms", "share", "onnx_nodes", "reformat"}
    r = run_cli("engine", "diff", str(EXPORTS / "fp16"), "--vs", str(EXPORTS / "qat"))
    assert r.code == 0 and "B is slower than A" in r.out
    (tmp_path / "x.json").write_text("{not json")
    r = run_cli("engine", "audit", str(tmp_path / "x.json"))
    assert r.code == 2 and "x.json" in r.err


def test_bad_exports_are_clear_errors(tmp_path: Path):
    (tmp_path / "l.json").write_text(json.dumps({"Nope": []}))
    with pytest.raises(UsageError, match="no 'Layers' list"):
        read_layer_info(tmp_path / "l.json")


def test_audit_and_diff_of_a_100_layer_engine_under_a_second(tmp_path: Path):
    """A 111-layer engine made by repeating the real QAT export's layers (names made unique)."""
    info = json.loads(next((EXPORTS / "qat").glob("*graph.json")).read_text())
    prof = json.loads(next((EXPORTS / "qat").glob("*profile.json")).read_text())
    layers, times = [], [prof[0]]
    for k in range(3):
        for layer in info["Layers"]:
            layers.append({**layer, "Name": f"{layer['Name']}#{k}"})
        times += [{**t, "name": f"{t['name']}#{k}"} for t in prof[1:]]
    (tmp_path / "big.graph.json").write_text(json.dumps({"Layers": layers, "Bindings": info["Bindings"]}))
    (tmp_path / "big.profile.json").write_text(json.dumps(times))
    t0 = time.perf_counter()
    a = audit([tmp_path])
    diff([tmp_path], [EXPORTS / "qat"])
    assert a.layers == 111 and time.perf_counter() - t0 < 1.0


LOGS = DATA / "trtexec_logs"
PERF = {  # file: (format, throughput qps, latency mean ms, latency p99 ms, GPU compute mean ms), as printed
    "01_trt10_oneline_issue4177.log": ("oneline", 130.298, 7.60628, 12.9675, 7.58404),
    "02_trt84_oneline_p99_yolov7pr329.log": ("oneline", 716.632, 1.38629, 1.55853, 1.38629),
    "03_trt7_multiline_issue2054.log": ("trt7", 0.0, 1.66069, 1.67065, None),
    "04_trt7x_end_to_end_issue1221.log": ("oneline", 1.57184, 636.196, 638.123, None),
}


@pytest.mark.parametrize("name", list(PERF))
def test_performance_summary_of_real_trtexec_logs(name: str):
    from trtverify.toolout.perfsummary import parse_perf_summary

    fmt, qps, mean, p99, gpu = PERF[name]
    perf = parse_perf_summary((LOGS / name).read_text())
    assert perf is not None and perf.format == fmt
    assert perf.throughput_qps == qps
    assert perf.stats["latency"]["mean"] == mean and perf.stats["latency"]["p99"] == p99
    assert perf.stats.get("gpu_compute", {}).get("mean") == gpu


def test_audit_reads_a_log_beside_the_exports(tmp_path: Path):
    a = audit([EXPORTS / "qat", LOGS / "01_trt10_oneline_issue4177.log"])
    assert a.layers == 37 and a.performance is not None and a.performance.throughput_qps == 130.298
    only = audit([LOGS / "03_trt7_multiline_issue2054.log"])
    assert only.layers == 0 and only.performance is not None and only.performance.walltime_s == 3.00461
    r = run_cli("engine", "audit", str(LOGS / "01_trt10_oneline_issue4177.log"))
    assert r.code == 0 and "throughput 130.298 qps, latency mean 7.60628 ms, p99 12.9675 ms" in r.out


def test_engine_json_schema_documents_the_stable_keys():
    r = run_cli("schema", "--engine")
    assert r.code == 0, r.err
    schemas = json.loads(r.out)
    audit_keys = set(schemas["audit"]["properties"])
    assert {"layers", "reformat_layers", "total_ms", "precisions", "rows", "findings"} <= audit_keys
    assert {"total_a_ms", "total_b_ms", "rows", "findings"} <= set(schemas["diff"]["properties"])
    data = json.loads(run_cli("engine", "audit", str(EXPORTS / "fp16"), "--json").out)
    assert set(data) <= audit_keys


def test_diff_with_several_files_after_vs_gives_each_build_its_own_files(tmp_path):
    """Issue 29 item 2: `engine diff a.graph.json a.profile.json --vs b.graph.json b.profile.json` moved
    b.profile.json into build A and reported B at 0.000 ms. Now --vs takes several files; a build with no timing
    says so, never 0.000 ms."""
    import json

    from tests.conftest import ROOT, run_cli

    e = ROOT / "tests" / "data" / "engine_exports"
    a = [str(e / "fp16" / f"resnet.onnx.engine.{k}.json") for k in ("graph", "profile")]
    b = [str(e / "qat" / f"resnet-qat.onnx.engine.{k}.json") for k in ("graph", "profile")]
    r = run_cli("engine", "diff", *a, "--vs", *b, "--json")
    assert r.code == 0, r.err
    files = json.loads(r.out)
    folders = json.loads(run_cli("engine", "diff", str(e / "fp16"), "--vs", str(e / "qat"), "--json").out)
    assert (files["total_a_ms"], files["total_b_ms"]) == (folders["total_a_ms"], folders["total_b_ms"])
    assert files["total_b_ms"] > files["total_a_ms"] > 0  # the QAT build's own profile: slower
    r = run_cli("engine", "diff", *a, "--vs", b[0])  # B: its layer listing alone
    assert r.code == 0 and "B no timing" in r.out and "0.000 ms" not in r.out.splitlines()[0], r.out
    assert "no time comparison: B has no timing" in r.out
