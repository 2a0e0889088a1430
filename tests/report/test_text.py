"""The terminal summary's FAIL lines: each names what its check is about (tensor, candidate, worst sample,
the findings or unmatched names behind it). Real runs in ONNX Runtime where a stage can be made to fail."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import ROOT, run_cli, write_suite
from tests.stages.layerwise.test_layerwise import CNN_INPUTS, plant, rename_outputs, suite_text
from trtverify.compare.checks import failed_check, limit_check
from trtverify.report.text import fail_line

DEMO = ROOT / "demo" / "fashion_mnist"
FP32 = DEMO / "fashion_cnn_fp32.onnx"


def _fails(out: str) -> list[str]:
    return [line.strip() for line in out.splitlines() if line.strip().startswith("FAIL ")]


def test_layerwise_without_pairs_names_the_unmatched_tensors_and_the_rename(tmp_path: Path):
    rename_outputs(FP32, tmp_path / "renamed.onnx", nodes_too=True)
    names_only = "    ignore: [logits]\n    pair_by_structure: false\n"  # structure would pair every tensor
    text = suite_text(str(FP32), {"r": "renamed.onnx"}, CNN_INPUTS, names_only)
    r = run_cli("run", str(write_suite(tmp_path, text)), "--out", str(tmp_path / "o"))
    assert r.code == 1, r.out + r.err
    line = next(f for f in _fails(r.out) if f.startswith("FAIL r: tensors compared"))
    assert line.startswith(
        "FAIL r: tensors compared: 0 (limit >= 1): only in the reference: /features/block1/conv/Conv_output_0, "
    )
    assert "only in r: x_/features/block1/conv/Conv_output_0, " in line and "and 8 more" in line
    assert (
        "pair them with stages.layerwise.rename: {/features/block1/conv/Conv_output_0: "
        "x_/features/block1/conv/Conv_output_0, " in line
    )
    assert "          r: unmatched tensors: only in the reference: " in r.out  # the stage block says it too


def test_layerwise_nonfinite_names_the_first_tensor(tmp_path: Path):
    # NaN weights in block2's Conv: every value of its output is NaN where the reference's is finite
    plant(FP32, tmp_path / "nan.onnx", "/features/block2/conv/Conv", factor=float("nan"))
    suite = write_suite(tmp_path, suite_text(str(FP32), {"nan": "nan.onnx"}, CNN_INPUTS))
    r = run_cli("run", str(suite), "--out", str(tmp_path / "o"))
    assert r.code == 1, r.out + r.err
    line = next(f for f in _fails(r.out) if f.startswith("FAIL nan: nonfinite_mismatch <= 0"))
    # which side holds them: the candidate
    assert line.endswith(
        "(limit <= 0): first at /features/block2/conv/Conv_output_0 "
        "(100352 non-finite values in the candidate where the reference's are finite)"
    )


def test_e2e_gate_names_the_candidate_values_and_worst_sample(tmp_path: Path):
    text = (
        f"name: gate\nmodels:\n  reference: {FP32}\n  candidates: {{int8: {DEMO / 'fashion_cnn_int8_qdq.onnx'}}}\n"
        "inputs: {generate: {input: {shape: [1, 1, 28, 28]}}}\n"
        f"stages:\n  e2e:\n    task: classification\n    dataset: {{npz: {DEMO / 'data' / 'test_subset.npz'}}}\n"
        "    preprocess: {scale: 0.00392156862745098}\n    batch_size: 500\n"
        "    gates: [{metric: accuracy, max_drop: 0.0001}]\n"
    )
    r = run_cli("run", str(write_suite(tmp_path, text)), "--out", str(tmp_path / "o"))
    assert r.code == 1, r.out + r.err
    stage = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]
    first = stage["candidates"][0]["worst"][0]["index"]
    check = next(c for c in stage["checks"] if not c["passed"])
    assert check["worst_sample"] == first and check["candidate"] == "int8"
    assert (
        f"FAIL int8: accuracy drop <= 0.0001: 5.000e-04 (limit <= 0.0001): reference 0.923 -> int8 0.9225; "
        f"worst sample {first}" in _fails(r.out)
    )


def test_checks_without_a_tensor_say_what_is_behind_them():
    findings = [
        {"kind": "calibration_cache_missing", "lines": [12, 40], "layers": [], "count": 2},
        {"kind": "int8_fallback", "lines": [7], "layers": ["conv1", "conv2", "conv3"], "count": 1},
    ]
    c = limit_check("b.log: no calibration findings (high/medium)", "buildlog", "calibration_findings", 3, 0, "<=",
                    detail={"findings": findings})  # fmt: skip
    assert fail_line(c) == (
        "FAIL b.log: no calibration findings (high/medium): 3 (limit <= 0): "
        "calibration_cache_missing x2 (line 12, 40); int8_fallback (line 7) at conv1, conv2..."
    )
    c = limit_check("b.log: fp16_weights_* count <= 0", "buildlog", "fp16_weights_*_count", 2, 0, "<=",
                    detail={"lines": [3, 9]})  # fmt: skip
    assert fail_line(c) == "FAIL b.log: fp16_weights_* count <= 0: 2 (limit <= 0): line 3, 9"
    c = limit_check("unmatched outputs", "framework", "unmatched", 1, 0, "<=", detail={"pytorch_only": ["aux"]})
    assert fail_line(c).endswith(": aux: pair them with stages.framework.rename or leave them out with ignore")
    c = failed_check("int8: map", "e2e", "map", {"reason": "metric 'map' not computed"}, candidate="int8")
    assert fail_line(c) == "FAIL int8: map: metric 'map' not computed"
    c = limit_check("int8 batch 1: measurement stable", "perf", "stable", 0.0, 1, ">=", candidate="int8",
                    detail={"window_cv": 0.12, "max_cv": 0.05, "runs": 40})  # fmt: skip
    assert fail_line(c).endswith(": window_cv 0.12 over max_cv 0.05 after 40 runs")
