"""Audit `buildlog` on real TensorRT-RTX logs, `trtverify parse-log`, and gates on findings."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import DATA, ROOT, run_cli, write_suite
from trtverify.buildlog.parser import parse_file
from trtverify.config.findings import CATEGORIES, KINDS

LOGS = DATA / "buildlogs"
RTX = LOGS / "rtx"


def test_every_emitted_kind_is_in_the_catalog():
    seen = set()
    for path in list(LOGS.glob("*.log")) + list(RTX.glob("*.log")):
        for f in parse_file(path).findings:
            seen.add((f.kind, f.category))
            assert KINDS.get(f.kind) == f.category, (path.name, f.kind, f.category)
    assert {c for _, c in seen} <= set(CATEGORIES)
    assert len(seen) >= 15


def test_demo_suite_buildlog_stage(tmp_path: Path):
    r = run_cli("run", str(ROOT / "suites" / "fashion_mnist.yaml"), "--stage", "buildlog", "--out", str(tmp_path / "o"))
    assert r.code == 0, r.out + r.err
    stage = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]
    log = stage["logs"][0]
    assert log["version"] == "1.7.1.116" and log["layers"]
    kinds = {f["kind"] for f in log["findings"]}
    # every Conv reads INT8 inputs and INT8 weights: INT8, even where Myelin writes an FP32 copy for a marked output
    assert "layer_precision_fallback" not in kinds
    convs = [layer for layer in log["layers"] if layer["type"] == "correlation"]
    assert len(convs) == 4 and {layer["precision"] for layer in convs} == {"INT8"}
    changed = {c["layer"] for c in log["against"]["layers_changed"]}
    assert "/features/block1/conv/Conv_myl0_1" in changed
    html = (tmp_path / "o" / "report.html").read_text()
    assert "timing_cache" in html and "Conv_myl0_1" in html
    # the context block (the product's version, the model) in results.json and in the report; evidence per finding
    assert "1.7.1.116" in [t["value"] for t in log["context"]["tools"]]
    assert all(f["evidence"] and f["evidence"][0]["line"] == f["lines"][0] for f in log["findings"])
    assert 'class="notes log-context"' in html and "1.7.1.116" in html and 'class="evidence"' in html


def test_gates_fail_on_and_max(tmp_path: Path):
    log = LOGS / "trt8_4_fp16_subnormal_per_weight_frigate5268.log"
    base = (
        f"name: g\nmodels: {{reference: {ROOT / 'demo/fashion_mnist/fashion_cnn_fp32.onnx'}}}\ninputs: "
        f"{{generate: {{input: {{shape: [1, 1, 28, 28]}}}}}}\nstages:\n  buildlog:\n    logs: [{log}]\n"
    )
    r = run_cli(
        "run", str(write_suite(tmp_path, base + "    max: {'fp16_weights_*': 0}\n")), "--out", str(tmp_path / "a")
    )
    assert r.code == 1 and "FAIL trt8_4_fp16_subnormal_per_weight_frigate5268.log: fp16_weights_* count <= 0" in r.out
    r = run_cli("run", str(write_suite(tmp_path, base + "    fail_on: [calibration]\n")), "--out", str(tmp_path / "b"))
    assert r.code == 0, r.out
    r = run_cli(
        "run", str(write_suite(tmp_path, base + "    fail_on: [fp16_wieghts_*]\n")), "--out", str(tmp_path / "c")
    )
    assert r.code == 2 and "stages.buildlog.fail_on[0]: unknown finding category or kind 'fp16_wieghts_*'" in r.err
    r = run_cli(
        "run",
        str(write_suite(tmp_path, base.replace(f"    logs: [{log}]\n", "    fail_on: [build]\n"))),
        "--out",
        str(tmp_path / "d"),
    )
    assert r.code == 1 and "FAIL build logs read" in r.out  # nothing to read is never a pass


def test_parse_log_command():
    r = run_cli("parse-log", str(LOGS / "trt8_6_int8_missing_scale_softmax_nvtrt3659.log"))
    assert r.code == 0 and "calibration/missing_scale x6" in r.out
    r = run_cli(
        "parse-log",
        str(RTX / "fashion_cnn_int8_qdq__mark_all.log"),
        "--json",
        "--against",
        str(RTX / "fashion_cnn_fp32__mark_all.log"),
    )
    data = json.loads(r.out)
    assert data["version"] == "1.7.1.116" and data["against"]["layers_changed"]
    r = run_cli("parse-log", "no_such.log")
    assert r.code == 2
