"""The captured demo (suites/shapes_captured.yaml): the shapes detector's FP16 tensors, computed on an NVIDIA H200 and
written by Polygraphy's own RunResults.save (demo/shapes_captured/README.md), compared layer by layer here; and the
interpreter bench/gpu_capture.py made them with, against ONNX Runtime on the CPU."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, main_in_process

BUNDLE = ROOT / "demo" / "shapes_captured"
CAPTURE = BUNDLE / "kit" / "captured" / "h200_fp16.json"
# the tensor of the detector's deepest stage, where a planted FP16 overflow goes
DEEP = "/stage3/stage3.1/stage3.1.2/Relu_output_0"


@pytest.fixture
def demo_copy(tmp_path: Path) -> Path:
    """The suite, the detector's reference and the bundle, copied with the same relative layout."""
    (tmp_path / "suites").mkdir()
    shutil.copy(ROOT / "suites" / "shapes_captured.yaml", tmp_path / "suites")
    (tmp_path / "demo" / "shapes").mkdir(parents=True)
    shutil.copy(ROOT / "demo" / "shapes" / "shapes_fp32.onnx", tmp_path / "demo" / "shapes")
    shutil.copytree(BUNDLE, tmp_path / "demo" / "shapes_captured")
    return tmp_path / "suites" / "shapes_captured.yaml"


def _candidate(out: Path) -> dict:
    res = json.loads((out / "results.json").read_text())
    stage = next(s for s in res["stages"] if s["name"] == "layerwise")
    return stage["candidates"][0]


def test_bundle_is_small_and_says_where_it_was_made():
    size = sum(f.stat().st_size for f in BUNDLE.rglob("*") if f.is_file())
    assert size < 3_000_000, size
    readme = (BUNDLE / "README.md").read_text()
    for fact in ("NVIDIA H200", "torch 2.11.0+cu130", "2026-11-28", "bench/gpu_capture.py", "RunResults.save"):
        assert fact in readme, fact


def test_captured_demo_passes_with_the_fused_tensors_counted(tmp_path, demo_copy, capsys, monkeypatch):
    r = main_in_process(["run", str(demo_copy), "--out", str(tmp_path / "out")], capsys, monkeypatch)
    assert r.code == 0, r.out + r.err
    c = _candidate(tmp_path / "out")
    assert c["backend"] == "captured" and c["precision"] == "fp16" and c["checks_source"] == "default for fp16"
    assert "runner torch-cuda-fp16, 1 iteration" in c["emulation"]
    assert c["paired"]["reference_tensors"] == 37 and c["paired"]["paired"] == 24
    assert len(c["unmatched"]["reference_only"]) == 13  # the Conv outputs only a Relu reads (README)
    assert all(t.endswith("Conv_output_0") for t in c["unmatched"]["reference_only"])
    assert c["first_divergence"] is None
    rel = {row["tensor"]: row["metrics"]["rel_l2"] for row in c["rows"]}
    # real FP16 arithmetic: every tensor off the FP32 reference, none by more than the FP16 defaults allow
    assert all(0 < v < 0.1 for v in rel.values()), rel
    assert {"heatmap", "wh", "offset"} <= rel.keys()


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
    r = main_in_process(["run", str(demo_copy), "--out", str(tmp_path / "out")], capsys, monkeypatch)
    assert r.code == 1, r.out + r.err
    c = _candidate(tmp_path / "out")
    assert c["first_divergence"]["tensor"] == DEEP
    assert c["first_divergence"]["nonfinite_mismatch"] > 0


def test_kit_is_what_trtverify_capture_writes_from_its_feed(tmp_path, capsys, monkeypatch):
    """A user's round trip (docs/captured.md) starts with `trtverify capture` on the kit's feed: the same digest."""
    model, feed = ROOT / "demo" / "shapes" / "shapes_fp32.onnx", BUNDLE / "kit" / "inputs.npz"
    argv = ["capture", str(model), "--inputs", str(feed), "--out", str(tmp_path / "kit")]
    r = main_in_process(argv, capsys, monkeypatch)
    assert r.code == 0, r.out + r.err
    mine = json.loads((tmp_path / "kit" / "manifest.json").read_text())
    bundled = json.loads((BUNDLE / "kit" / "manifest.json").read_text())
    assert mine["digest"] == bundled["digest"] and mine["reference_sha256"] == bundled["reference_sha256"]


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
