"""The captured demo (suites/shapes_captured.yaml): the shapes detector's FP16 tensors, computed on an NVIDIA H200 and
written by Polygraphy's own RunResults.save (demo/shapes_captured/README.md), compared layer by layer (with the
outputs-only capture and the kit's consistency feeds) and on validation images (stage e2e) here; the interpreter
bench/gpu_capture.py made them with, against ONNX Runtime on the CPU; and a planted FP16 overflow found in a capture
as in trtverify's emulation (bench/gpu_capture_demo.py)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, main_in_process

BUNDLE = ROOT / "demo" / "shapes_captured"
CAPTURE = BUNDLE / "kit" / "captured" / "h200_fp16.json"
CONSISTENCY = (
    "repeated iterations identical (determinism)",
    "duplicated rows of one batch identical",
    "repeated batch rows equal the single row",
    "marking every tensor left the outputs unchanged",
)
# the tensor of the detector's deepest stage, where a planted FP16 overflow goes
DEEP = "/stage3/stage3.1/stage3.1.2/Relu_output_0"


@pytest.fixture
def demo_copy(tmp_path: Path) -> Path:
    """The suite, the detector's reference and the bundle, copied with the same relative layout."""
    (tmp_path / "suites").mkdir()
    shutil.copy(ROOT / "suites" / "shapes_captured.yaml", tmp_path / "suites")
    (tmp_path / "demo" / "shapes").mkdir(parents=True)
    for f in ("shapes_fp32.onnx", "shapes_decode.py"):  # the reference, and the e2e stage's postprocess
        shutil.copy(ROOT / "demo" / "shapes" / f, tmp_path / "demo" / "shapes")
    shutil.copytree(ROOT / "demo" / "shapes" / "val", tmp_path / "demo" / "shapes" / "val")
    shutil.copytree(BUNDLE, tmp_path / "demo" / "shapes_captured")
    return tmp_path / "suites" / "shapes_captured.yaml"


def _stage(out: Path, name: str) -> dict:
    res = json.loads((out / "results.json").read_text())
    return next(s for s in res["stages"] if s["name"] == name)


def _candidate(out: Path) -> dict:
    return _stage(out, "layerwise")["candidates"][0]


def test_bundle_is_small_and_says_where_it_was_made():
    size = sum(f.stat().st_size for f in BUNDLE.rglob("*") if f.is_file())
    assert size < 3_000_000, size
    readme = (BUNDLE / "README.md").read_text()
    for fact in ("NVIDIA H200", "torch 2.11.0+cu130", "2026-11-28", "bench/gpu_capture_demo.py", "RunResults.save"):
        assert fact in readme, fact


def test_captured_demo_passes_with_the_fused_tensors_counted(tmp_path, demo_copy, capsys, monkeypatch):
    r = main_in_process(["run", str(demo_copy), "--out", str(tmp_path / "out")], capsys, monkeypatch)
    assert r.code == 0, r.out + r.err
    c = _candidate(tmp_path / "out")
    assert c["backend"] == "captured" and c["precision"] == "fp16" and c["checks_source"] == "default for fp16"
    assert "runner torch-cuda-fp16, 4 iterations" in c["emulation"]  # the feed, then the 3 consistency feeds
    assert c["paired"]["reference_tensors"] == 37 and c["paired"]["paired"] == 24
    assert len(c["unmatched"]["reference_only"]) == 13  # the Conv outputs only a Relu reads (README)
    assert all(t.endswith("Conv_output_0") for t in c["unmatched"]["reference_only"])
    assert c["first_divergence"] is None
    rel = {row["tensor"]: row["metrics"]["rel_l2"] for row in c["rows"]}
    # real FP16 arithmetic: every tensor off the FP32 reference, none by more than the FP16 defaults allow
    assert all(0 < v < 0.1 for v in rel.values()), rel
    assert {"heatmap", "wh", "offset"} <= rel.keys()
    # the GPU's consistency: repeats and duplicated rows bitwise, the repeated batch and the outputs-only capture
    # within the tolerance (bench/results/gpu_captures.md gives the figures)
    checks = {ch["name"]: ch for s in json.loads((tmp_path / "out" / "results.json").read_text())["stages"]
              for ch in s["checks"]}  # fmt: skip
    for name in CONSISTENCY:
        assert checks[f"h200_fp16: {name}"]["passed"], name
    assert checks["h200_fp16: repeated iterations identical (determinism)"]["value"] == 0
    assert 0 < checks["h200_fp16: repeated batch rows equal the single row"]["value"] < 5e-3
    # e2e on the GPU's validation outputs, with the task's gates
    e2e = _stage(tmp_path / "out", "e2e")
    gates = [ch for ch in e2e["checks"] if ch["candidate"] == "h200_fp16_e2e"]
    assert e2e["status"] == "passed" and len(gates) == 4 and all(ch["passed"] for ch in gates)
    assert next(ch for ch in e2e["checks"] if ch["metric"] == "samples")["value"] == 16


def test_planted_fp16_overflow_is_the_first_divergence(tmp_path, demo_copy, capsys, monkeypatch):
    """A captured tensor overflowing FP16 (inf where the reference has finite values) is found as the first
    divergence. The file is rewritten with Polygraphy's own load and save, as a capture of a broken engine."""
    pytest.importorskip("polygraphy")
    import numpy as np
    from polygraphy.comparator import RunResults

    path = demo_copy.parents[1] / "demo" / "shapes_captured" / "kit" / "captured" / "h200_fp16.json"
    results = RunResults.load(str(path))
    runner, iterations = next(iter(results.items()))
    arr = np.array(iterations[0][DEEP])
    arr.reshape(-1)[:: arr.size // 20] = np.float16(np.inf)
    iterations[0][DEEP] = arr
    RunResults([(runner, iterations)]).save(str(path))
    argv = ["run", str(demo_copy), "--stage", "layerwise", "--out", str(tmp_path / "out")]
    r = main_in_process(argv, capsys, monkeypatch)
    assert r.code == 1, r.out + r.err
    c = _candidate(tmp_path / "out")
    assert c["first_divergence"]["tensor"] == DEEP
    assert c["first_divergence"]["nonfinite_mismatch"] > 0


def test_kit_is_what_trtverify_capture_writes_from_its_feed(tmp_path, capsys, monkeypatch):
    """A user's round trip (docs/captured.md) starts with `trtverify capture` on the kit's feed and the demo suite: the
    same digests (feeds, consistency feeds, validation batches), so the bundled captures compare against that kit."""
    model, feed = ROOT / "demo" / "shapes" / "shapes_fp32.onnx", BUNDLE / "kit" / "inputs.npz"
    argv = ["capture", str(model), "--inputs", str(feed), "--suite", str(ROOT / "suites" / "shapes_captured.yaml"),
            "--out", str(tmp_path / "kit")]  # fmt: skip
    r = main_in_process(argv, capsys, monkeypatch)
    assert r.code == 0, r.out + r.err
    mine = json.loads((tmp_path / "kit" / "manifest.json").read_text())
    bundled = json.loads((BUNDLE / "kit" / "manifest.json").read_text())
    for key in ("digest", "reference_sha256", "capture_digest"):
        assert mine[key] == bundled[key], key
    assert mine["e2e"]["digest"] == bundled["e2e"]["digest"] and len(bundled["e2e"]["batches"]) == 2
    readme = (tmp_path / "kit" / "README.md").read_text()
    assert "## Validation batches" in readme and "No validation batches" not in readme


def test_gpu_capture_interpreter_equals_onnxruntime_on_every_tensor():
    """bench/gpu_capture.py's interpreter (which computed the GPU captures) in FP32 on the CPU against ONNX Runtime,
    every tensor of both demo models, the demo's real rows; and the tensors it leaves out of the demo capture."""
    pytest.importorskip("torch")
    import onnx

    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu_capture
    finally:
        sys.path.remove(str(ROOT / "bench"))
    got = gpu_capture.check()
    assert got["shapes"]["tensors"] == 39 and got["fashion_mnist"]["tensors"] == 15
    for name, r in got.items():
        assert r["rel_l2"] < 1e-5 and r["max_abs"] < 1e-4, (name, r)
    fused = gpu_capture.fused_away(onnx.load(ROOT / "demo" / "shapes" / "shapes_fp32.onnx"))
    bundle = json.loads(CAPTURE.read_text())["lst"][0][1][0]["outputs"]
    assert len(fused) == 13 and not fused & set(bundle)


def test_planted_fp16_overflow_same_first_divergence_and_root_cause_as_emulated(tmp_path, capsys, monkeypatch):
    """Issue 46's done-when on the CPU: the detector with one Conv scaled by 2**14 and its reader by 2**-14 (FP32 math
    the same, bench/gpu_capture_demo.plant_overflow), its FP16 ONNX both emulated by trtverify and captured by the
    interpreter that made the GPU captures. This capture is torch's CPU float16 arithmetic, NOT the GPU's (the GPU's
    capture of the same model gave the same first divergence and root cause: bench/results/gpu_captures.md); written
    with Polygraphy's RunResults.save into the kit `trtverify capture` wrote."""
    pytest.importorskip("polygraphy")
    import numpy as np
    import onnx
    import yaml

    sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "demo")]
    try:
        import gpu_capture_demo as g
        from onnx_steps import make_fp16
    finally:
        del sys.path[:2]
    tensor = g.plant_overflow(ROOT / "demo" / "shapes" / "shapes_fp32.onnx", tmp_path / "planted_fp32.onnx")
    assert tensor == g.PLANT_CONV + "_output_0"
    make_fp16(tmp_path / "planted_fp32.onnx", tmp_path / "planted_fp16.onnx")
    kit = tmp_path / "kit"
    argv = ["capture", str(tmp_path / "planted_fp32.onnx"), "--inputs", str(BUNDLE / "kit" / "inputs.npz"),
            "--out", str(kit)]  # fmt: skip
    assert main_in_process(argv, capsys, monkeypatch).code == 0
    model = onnx.load(tmp_path / "planted_fp16.onnx")
    x = np.load(kit / "inputs.npz", allow_pickle=False)["images"]
    tensors = g._layer_outputs(model, g.interpret(model, {"images": x}, "cpu"))  # as typed: FP16 in torch on the CPU
    assert not np.isfinite(tensors[tensor]).all()
    g.save_capture(kit / "captured" / "cpu_half.json", "torch-cpu-fp16", {0: tensors})
    fp16 = str(tmp_path / "planted_fp16.onnx")
    suite = {
        "name": "planted",
        "models": {"reference": str(tmp_path / "planted_fp32.onnx"), "candidates": {
            "emulated": fp16,
            "captured": {"captured": str(kit / "captured" / "cpu_half.json"), "path": fp16},
        }},
        "inputs": {"file": str(kit / "inputs.npz")},
        "stages": {"layerwise": {}},
    }  # fmt: skip
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    r = main_in_process(["run", str(tmp_path / "suite.yaml"), "--out", str(tmp_path / "out")], capsys, monkeypatch)
    assert r.code == 1, r.out + r.err
    cands = {c["name"]: c for c in _stage(tmp_path / "out", "layerwise")["candidates"]}
    for c in cands.values():
        assert not c["passed"]
        assert c["first_divergence"]["tensor"] == tensor and c["first_divergence"]["nonfinite_mismatch"] > 0
        assert c["root_causes"][0]["node"] == g.PLANT_CONV
    # the same overflowing values: torch's CPU float16 rounds as trtverify's emulation does
    assert cands["captured"]["first_divergence"]["nonfinite_mismatch"] == \
        cands["emulated"]["first_divergence"]["nonfinite_mismatch"]  # fmt: skip
