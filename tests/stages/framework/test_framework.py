"""Stage `framework` end to end: real PyTorch, real ONNX Runtime, real files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.conftest import TINY_SUITE, run_cli, write_suite
from trtverify.config.loader import load_suite

pytest.importorskip("torch")


def scale_first_conv(src: Path, dst: Path, factor: float) -> str:
    model = onnx.load(str(src))
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    for init in model.graph.initializer:
        if init.name == conv.input[1]:
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(factor), init.name))
    onnx.save(model, str(dst))
    return conv.name


def results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def test_pass_writes_results_report_and_reference(tiny_suite: Path, tmp_path: Path):
    out = tmp_path / "out"
    r = run_cli("run", str(tiny_suite), "--out", str(out))
    assert r.code == 0, r.err
    assert "PASSED: suite 'tiny'" in r.out and "[PASSED ] framework" in r.out
    res = results(out)
    assert res["schema_version"] == 2 and res["passed"] is True and res["exit_code"] == 0 and res["complete"]
    stage = res["stages"][0]
    assert stage["name"] == "framework" and stage["status"] == "passed"
    names = {c["name"] for c in stage["checks"]}
    assert {
        "logits: cosine >= 0.99999",
        "logits: rel_l2 <= 0.0001",
        "logits: nonfinite_mismatch <= 0",
        "outputs compared",
    } <= names
    for c in stage["checks"]:
        assert set(c) >= {"name", "metric", "value", "threshold", "passed", "tensor"}
    row = stage["outputs"][0]
    assert row["tensor"] == "logits" and row["shape"] == [2, 5] and row["samples"] == 3
    assert set(row["metrics"]["rel_l2"]) >= {"worst", "min", "median", "mean", "max"}
    assert stage["reference"]["source"] == "pytorch" and stage["reference"]["saved"] is True
    assert {"pytorch_s", "onnxruntime_s", "compare_s"} <= set(stage["timings"])
    assert res["environment"]["libraries"]["onnxruntime"]
    html = (out / "report.html").read_text()
    assert (
        "PASSED" in html
        and "logits" in html
        and "<script src" not in html
        and "http" not in html.split("<body>")[1].split("sha256")[0]
    )
    assert (tiny_suite.parent / "refs" / "tiny" / "pytorch" / "manifest.json").exists()


def test_stored_reference_gates_without_torch(tiny_suite: Path, tmp_path: Path):
    assert run_cli("run", str(tiny_suite), "--out", str(tmp_path / "a")).code == 0
    r = run_cli("run", str(tiny_suite), "--out", str(tmp_path / "b"), block=("torch",))
    assert r.code == 0, r.err
    assert "stored PyTorch outputs" in r.out
    assert results(tmp_path / "b")["stages"][0]["reference"]["source"] == "stored"


def test_no_reference_and_no_torch_is_exit_3_with_the_fix(tiny_suite: Path, tmp_path: Path):
    r = run_cli("run", str(tiny_suite), "--out", str(tmp_path / "o"), block=("torch",))
    assert r.code == 3, r.out + r.err
    assert "pip install torch" in r.out
    assert results(tmp_path / "o")["stages"][0]["error"]["kind"] == "dependency"


def test_stale_reference_is_reported_and_not_used(tiny_suite: Path, tmp_path: Path):
    import torch

    assert run_cli("run", str(tiny_suite), "--out", str(tmp_path / "a")).code == 0
    weights = tiny_suite.parent / "tiny.pt"
    state = torch.load(weights, weights_only=True)
    state["fc.bias"] += 0.5
    torch.save(state, weights)
    # without torch the stale reference must not be used silently
    r = run_cli("run", str(tiny_suite), "--out", str(tmp_path / "b"), block=("torch",))
    assert r.code == 3 and "stale" in r.out and "weights:tiny.pt changed" in r.out
    # with torch: PyTorch runs, the new weights disagree with the ONNX model, the store is not rewritten
    r = run_cli("run", str(tiny_suite), "--out", str(tmp_path / "c"))
    assert r.code == 1 and "is stale and was NOT used" in r.out
    manifest = tiny_suite.parent / "refs" / "tiny" / "pytorch" / "manifest.json"
    before = manifest.read_text()
    r = run_cli("run", str(tiny_suite), "--out", str(tmp_path / "d"), "--update-reference")
    assert r.code == 1 and "rewritten" in r.out
    assert manifest.read_text() != before
    r = run_cli("run", str(tiny_suite), "--out", str(tmp_path / "e"), block=("torch",))
    assert "stored PyTorch outputs" in r.out


def test_conv_scaled_by_1_01_fails_and_names_the_output(tiny_suite: Path, tmp_path: Path):
    scale_first_conv(tiny_suite.parent / "tiny.onnx", tiny_suite.parent / "tiny.onnx", 1.01)
    r = run_cli("run", str(tiny_suite), "--out", str(tmp_path / "o"))
    assert r.code == 1, r.out + r.err
    assert "FAIL rel_l2 <= 0.0001 at logits (worst sample " in r.out and "FAILED: suite 'tiny'" in r.out
    res = results(tmp_path / "o")
    failed = [c for c in res["stages"][0]["checks"] if not c["passed"]]
    assert failed and all(c["tensor"] == "logits" for c in failed)
    rel = next(c for c in failed if c["metric"] == "rel_l2")
    assert 1e-3 < rel["value"] < 0.05


def test_deleted_model_is_exit_2_naming_the_file(tiny_suite: Path, tmp_path: Path):
    (tiny_suite.parent / "tiny.onnx").unlink()
    r = run_cli("run", str(tiny_suite), "--out", str(tmp_path / "o"))
    assert r.code == 2
    assert "suite.yaml:5: models.reference: file not found:" in r.err and "tiny.onnx" in r.err
    assert "Traceback" not in r.err


def test_per_output_override_and_stage_samples(tiny_dir: Path, tmp_path: Path):
    scale_first_conv(tiny_dir / "tiny.onnx", tiny_dir / "tiny.onnx", 1.01)
    text = TINY_SUITE.format(samples=4).replace(
        "    checks:\n      - {metric: cosine, min: 0.99999}\n      - {metric: rel_l2, max: 1.0e-4}\n",
        "    samples: 2\n    checks:\n      - {metric: rel_l2, max: 0.1}\n"
        "    outputs:\n      logits:\n        checks: [{metric: sqnr, min: 60}]\n",
    )
    r = run_cli("run", str(write_suite(tiny_dir, text)), "--out", str(tmp_path / "o"))
    assert r.code == 1, r.out + r.err
    stage = results(tmp_path / "o")["stages"][0]
    assert [c["name"] for c in stage["checks"] if not c["passed"]] == ["logits: sqnr >= 60"]
    assert stage["samples"] == 2


def test_unmatched_outputs_fail_unless_ignored_and_rename_pairs(tiny_dir: Path, tmp_path: Path):
    base = TINY_SUITE.format(samples=2).replace(
        'factory: "tinymodel:build", weights: tiny.pt, output_names: [logits]',
        'factory: "tinymodel:build_two_heads", output_names: [out, features]',
    )
    base = base.replace("reference: tiny.onnx", "reference: two_heads.onnx")
    # torch names 'out' but ONNX says 'logits': nothing pairs by position
    r = run_cli("run", str(write_suite(tiny_dir, base)), "--out", str(tmp_path / "a"))
    assert r.code == 1
    stage = results(tmp_path / "a")["stages"][0]
    assert stage["pairing"]["reference_only"] == ["out"] and stage["pairing"]["candidate_only"] == ["logits"]
    unmatched = next(c for c in stage["checks"] if c["metric"] == "unmatched")
    # the failure names them and the rename that would pair them
    assert unmatched["name"] == (
        "unmatched outputs (PyTorch only: out; ONNX only: logits; "
        "pair them with stages.framework.rename: {out: logits})"
    )
    assert not unmatched["passed"] and unmatched["detail"] == {"pytorch_only": ["out"], "onnx_only": ["logits"]}
    fixed = base.replace("  framework:\n", "  framework:\n    rename: {out: logits}\n")
    r = run_cli("run", str(write_suite(tiny_dir, fixed)), "--out", str(tmp_path / "b"))
    assert r.code == 0, r.out
    ignored = base.replace("  framework:\n", "  framework:\n    ignore: [out, logits]\n")
    r = run_cli("run", str(write_suite(tiny_dir, ignored)), "--out", str(tmp_path / "c"))
    stage = results(tmp_path / "c")["stages"][0]
    assert r.code == 0 and stage["pairing"]["ignored"] == ["out", "logits"]
    # only 'features' compared, and it matches
    assert [o["tensor"] for o in stage["outputs"]] == ["features"]


def test_zero_pairs_is_a_failure(tiny_dir: Path, tmp_path: Path):
    text = TINY_SUITE.format(samples=2).replace("output_names: [logits]", "output_names: [probabilities]")
    r = run_cli("run", str(write_suite(tiny_dir, text)), "--out", str(tmp_path / "o"))
    assert r.code == 1
    stage = results(tmp_path / "o")["stages"][0]
    assert next(c for c in stage["checks"] if c["name"] == "outputs compared")["passed"] is False


def test_hostile_names_are_escaped_in_the_report(tiny_dir: Path, tmp_path: Path):
    evil = "<script>alert(1)</script>"
    text = TINY_SUITE.format(samples=2).replace("output_names: [logits]", f"output_names: ['{evil}']")
    r = run_cli("run", str(write_suite(tiny_dir, text)), "--out", str(tmp_path / "o"))
    assert r.code == 1
    html = (tmp_path / "o" / "report.html").read_text()
    assert evil not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_a_crashing_stage_does_not_stop_the_others(tiny_suite: Path, tmp_path: Path, monkeypatch):
    """Plant a bug in a stage that runs first (no such bug exists to trigger for real)."""
    from trtverify.cli.run import run_and_record
    from trtverify.report.html import write_report
    from trtverify.runner import StagePlan
    from trtverify.stages.base import StageWork
    from trtverify.stages.layerwise import stage as layerwise_stage

    def crash(ctx):
        raise ZeroDivisionError("planted bug")

    monkeypatch.setattr(layerwise_stage, "run", crash)
    plans = [StagePlan("layerwise", StageWork()), StagePlan("framework", StageWork())]
    results = run_and_record(load_suite(tiny_suite), tmp_path / "o", plans=plans)
    by = {s.name: s for s in results.stages}
    assert by["layerwise"].status == "error" and "ZeroDivisionError: planted bug" in by["layerwise"].error.traceback
    assert by["framework"].status == "passed"
    assert results.exit_code == 4 and results.passed is False
    write_report(results, tmp_path / "o" / "report.html")
    assert "planted bug" in (tmp_path / "o" / "report.html").read_text()


def test_stage_option_validation(tiny_suite: Path, tmp_path: Path):
    r = run_cli("run", str(tiny_suite), "--stage", "nonsense", "--out", str(tmp_path / "o"))
    assert r.code == 2 and "no such stage" in r.err
