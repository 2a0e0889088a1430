"""The bundled demo: real Fashion-MNIST images, the trained CNN, its ONNX exports and stored reference."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, run_cli
from tests.stages.framework.test_framework import scale_first_conv
from trtverify.config.loader import load_suite
from trtverify.config.registry import BACKENDS
from trtverify.data.inputs import build_samples

DEMO = ROOT / "demo" / "fashion_mnist"
SUITE = ROOT / "suites" / "fashion_mnist.yaml"


@pytest.fixture
def demo_copy(tmp_path: Path) -> Path:
    """suite + demo + stored reference copied with the same relative layout."""
    for sub in ("suites", "demo", "reference_outputs"):
        shutil.copytree(ROOT / sub, tmp_path / sub)
    return tmp_path / "suites" / "fashion_mnist.yaml"


def test_demo_gate_runs_without_torch(tmp_path: Path, demo_copy: Path):
    r = run_cli("run", str(demo_copy), "--out", str(tmp_path / "out"), block=("torch",))
    assert r.code == 0, r.out + r.err
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    stage = res["stages"][0]
    assert stage["reference"]["source"] == "stored" and stage["samples"] == 16
    assert stage["outputs"][0]["metrics"]["topk_agreement@k=1"]["worst"] == 1.0


def test_committed_reference_equals_pytorch_today():
    pytest.importorskip("torch")
    loaded = load_suite(SUITE)
    samples = build_samples(loaded)
    stored = np.load(ROOT / "reference_outputs" / "fashion_mnist" / "pytorch" / "outputs.npz", allow_pickle=False)
    manifest = json.loads((ROOT / "reference_outputs" / "fashion_mnist" / "pytorch" / "manifest.json").read_text())
    torch_backend = BACKENDS.load("torch")(
        loaded.suite.models.pytorch, search_path=loaded.suite.python_path, default_input_names=["input"]
    )
    for feed, entry in zip(samples, manifest["outputs"]):
        fresh = torch_backend.infer(feed)["logits"]
        np.testing.assert_allclose(fresh, stored[entry["logits"]], rtol=1e-5, atol=1e-5)


def test_scaled_conv_in_the_demo_model_fails_naming_the_output(tmp_path: Path, demo_copy: Path):
    model = demo_copy.parents[1] / "demo" / "fashion_mnist" / "fashion_cnn_fp32.onnx"
    scale_first_conv(model, model, 1.01)
    r = run_cli("run", str(demo_copy), "--out", str(tmp_path / "out"), block=("torch",))
    assert r.code == 1, r.out + r.err
    assert "FAIL rel_l2 <= 1e-05 at logits (worst sample " in r.out


def test_deleted_demo_model_is_exit_2(tmp_path: Path, demo_copy: Path):
    (demo_copy.parents[1] / "demo" / "fashion_mnist" / "fashion_cnn_fp32.onnx").unlink()
    r = run_cli("run", str(demo_copy), "--out", str(tmp_path / "out"))
    assert r.code == 2 and "models.reference: file not found" in r.err and "fashion_cnn_fp32.onnx" in r.err


@pytest.mark.parametrize(
    "model, key",
    [
        ("fashion_cnn_fp32.onnx", "ort_fp32"),
        ("fashion_cnn_fp16.onnx", "ort_fp16"),
        ("fashion_cnn_int8_qdq.onnx", "ort_int8_qdq"),
    ],
)
def test_shipped_models_keep_their_measured_accuracy(model: str, key: str):
    data = np.load(DEMO / "data" / "test_subset.npz", allow_pickle=False)
    images, labels = data["images"], data["labels"]
    assert images.shape == (2000, 1, 28, 28) and images.dtype == np.uint8
    assert np.bincount(labels).tolist() == [200] * 10
    b = BACKENDS.load("onnxruntime")(DEMO / model)
    preds = np.concatenate(
        [
            b.infer({"input": (images[i : i + 500] / 255.0).astype(np.float32)})["logits"].argmax(1)
            for i in range(0, 2000, 500)
        ]
    )
    expected = json.loads((DEMO / "metrics.json").read_text())["results"][key]["accuracy"]
    assert abs(float((preds == labels).mean()) - expected) < 0.002


@pytest.mark.parametrize(
    "suite", sorted(p.name for p in (ROOT / "suites").glob("*.yaml") if "\n  framework:" in p.read_text())
)
def test_every_demo_reference_store_is_valid_so_the_gate_runs_without_torch(suite: str, tmp_path: Path):
    """The stored PyTorch outputs hash the model source, weights, inputs and config: reformatting a demo
    model's source, or changing its inputs, makes them stale, and `make demo` (no torch) would then fail."""
    r = run_cli("run", str(ROOT / "suites" / suite), "--stage", "framework", "--out", str(tmp_path), block=("torch",))
    assert r.code == (1 if suite == "shape_sweep.yaml" else 0), r.out + r.err  # that demo fails on purpose
    for stage in json.loads((tmp_path / "results.json").read_text())["stages"]:  # one per shape in a sweep
        assert stage["reference"]["source"] == "stored" and stage["reference"]["state"] == "valid"


def test_the_shape_sweep_demo_fails_at_batch_8_naming_the_reshape_and_passes_with_the_right_export(tmp_path: Path):
    for sub in ("suites", "demo", "reference_outputs"):
        shutil.copytree(ROOT / sub, tmp_path / sub)
    suite = tmp_path / "suites" / "shape_sweep.yaml"
    r = run_cli("run", str(suite), "--out", str(tmp_path / "baked"), block=("torch",))
    assert r.code == 1, r.out + r.err
    assert "FAILED: suite 'shape_sweep'; failed at x=8x1x16x16 (of 2 shapes) (exit 1)" in r.out
    assert "[PASSED ] framework at x=1x1x16x16" in r.out and "[FAILED ] framework at x=8x1x16x16" in r.out
    assert "shape mismatch: reference [8, 3, 256] vs candidate [1, 3, 2048] (all 4 samples)" in r.out
    assert "Reshape '/Reshape' sets the leading dimension to a number (constant [1, 3, -1])" in r.out
    stages = json.loads((tmp_path / "baked" / "results.json").read_text())["stages"]
    lint = {f["kind"]: f["node"] for f in stages[2]["candidates"][0]["lint"]}
    assert lint.get("shape_baked") == "/Reshape"  # from the graph alone, at batch 1 where everything passes
    suite.write_text(
        suite.read_text().replace(
            "reference: ../demo/shape_sweep/baked.onnx", "reference: ../demo/shape_sweep/fixed.onnx"
        )
    )
    r = run_cli("run", str(suite), "--out", str(tmp_path / "fixed"), block=("torch",))
    assert r.code == 0, r.out + r.err  # the stored PyTorch outputs of both shapes serve the right export too
    stages = json.loads((tmp_path / "fixed" / "results.json").read_text())["stages"]
    assert [(s["name"], s["shape"], s["status"]) for s in stages] == [
        ("framework", "x=1x1x16x16", "passed"),
        ("framework", "x=8x1x16x16", "passed"),
        ("layerwise", "x=1x1x16x16", "passed"),
        ("layerwise", "x=8x1x16x16", "passed"),
    ]
    assert not any(f["kind"] == "shape_baked" for f in stages[2]["candidates"][0]["lint"])
