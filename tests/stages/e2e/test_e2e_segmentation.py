"""Stage `e2e` with task segmentation on the real shapes_seg demo: the numbers the demo script computed
with its own code, label PNGs and npz arrays agreeing, shards merging exactly, drill-down, hooks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import ROOT, run_cli, write_suite

DEMO = ROOT / "demo" / "shapes_seg"
SUITE = ROOT / "suites" / "shapes_segmentation.yaml"
SHIPPED = {"reference": "onnx_fp32", "fp16": "onnx_fp16", "int8": "onnx_int8_qdq"}


def _e2e(out: Path) -> dict:
    return next(s for s in json.loads((out / "results.json").read_text())["stages"] if s["name"] == "e2e")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo suite with FP16 run as ONNX Runtime runs it (`fp16_on_cpu: native`), as the demo script ran it:
    trtverify's default emulates a GPU's FP16 rounding, which moves a few pixels of the FP16 candidate."""
    root = tmp_path_factory.mktemp("seg")
    (root / "suites").mkdir()
    for name in ("demo", "reference_outputs"):
        (root / name).symlink_to(ROOT / name)
    suite = root / "suites" / SUITE.name
    suite.write_text(SUITE.read_text() + "backends: {onnxruntime: {fp16_on_cpu: native}}\n")
    r = run_cli("run", str(suite), "--stage", "e2e", "--out", str(root / "out"))
    assert r.code == 0, r.out + r.err
    return root / "out"


def test_the_demo_gives_the_confusion_matrices_its_script_computed(demo_run: Path):
    """metrics.json was written by demo/shapes_seg/make_demo.py with its own numpy code; the
    confusion matrices must be equal, element by element, and so every metric derived from them."""
    stage = _e2e(demo_run)
    shipped = json.loads((DEMO / "metrics.json").read_text())["metrics"]
    assert stage["task"] == "segmentation" and stage["samples"] == 100
    by = {"reference": stage["reference"], **{c["name"]: c["metrics"] for c in stage["candidates"]}}
    for name, key in SHIPPED.items():
        m, want = by[name], shipped[key]
        assert m["confusion"] == want["confusion_matrix"], name
        assert m["miou"] == pytest.approx(want["mIoU"], abs=5e-5) and m["fw_iou"] == pytest.approx(
            want["fwIoU"], abs=5e-5
        )
        assert m["pixel_accuracy"] == pytest.approx(want["pixel_accuracy"], abs=5e-5)
        assert [c["iou"] for c in m["per_class"]] == pytest.approx(list(want["IoU_per_class"].values()), abs=5e-5)
        assert [c["name"] for c in m["per_class"]] == ["background", "circle", "square", "triangle"]
    int8 = next(c for c in stage["candidates"] if c["name"] == "int8")
    assert int8["deltas"]["miou"] == pytest.approx(int8["metrics"]["miou"] - stage["reference"]["miou"])
    drops = [w["miou_drop"] for w in int8["worst"]]
    assert drops and drops == sorted(drops, reverse=True) and all(d > 0 for d in drops)
    assert int8["worst"][0]["id"].endswith(".png") and stage["gated"] == ["miou", "pixel_accuracy"]


def test_label_pngs_and_npz_arrays_give_the_same_metrics(demo_run: Path, tmp_path: Path):
    names = sorted(p.name for p in (DEMO / "val" / "images").glob("*.png"))[:30]
    images = np.stack([np.asarray(Image.open(DEMO / "val" / "images" / n).convert("RGB")) for n in names])
    masks = np.stack([np.asarray(Image.open(DEMO / "val" / "masks" / n)) for n in names])
    np.savez(tmp_path / "val.npz", images=images, segmentation=masks)
    text = SUITE.read_text().replace("../demo/shapes_seg/", str(DEMO) + "/").replace("[../", "[" + str(ROOT) + "/")
    text = text.replace("reference_dir: ../reference_outputs", f"reference_dir: {ROOT / 'reference_outputs'}")
    pngs = text.replace("      class_names:", "      limit: 30\n      class_names:")
    arrays = text.replace(
        f"      images: {DEMO}/val/images         # 000001.png ... RGB\n"
        f"      masks: {DEMO}/val/masks           # 000001.png ... 8-bit, pixel value = class index\n",
        f"      npz: {tmp_path / 'val.npz'}\n      masks_key: segmentation\n",
    )
    assert arrays != text
    results = {}
    for name, body in (("pngs", pngs), ("arrays", arrays)):
        r = run_cli(
            "run", str(write_suite(tmp_path, body, f"{name}.yaml")), "--stage", "e2e", "--out", str(tmp_path / name)
        )
        assert r.code == 0, r.out + r.err
        results[name] = _e2e(tmp_path / name)
    a, b = results["pngs"], results["arrays"]
    assert a["samples"] == b["samples"] == 30
    assert a["reference"] == b["reference"]
    assert [c["metrics"] for c in a["candidates"]] == [c["metrics"] for c in b["candidates"]]


def test_two_shards_merge_to_exactly_the_unsharded_metrics(demo_run: Path, tmp_path: Path):
    suite = demo_run.parent / "suites" / SUITE.name  # the one the whole run ran
    for i in (1, 2):
        r = run_cli("run", str(suite), "--stage", "e2e", "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}"), "-q")
        assert r.code == 0, r.err
    r = run_cli("merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m"))
    assert r.code == 0, r.out + r.err
    whole, merged, half = _e2e(demo_run), _e2e(tmp_path / "m"), _e2e(tmp_path / "s1")
    assert half["samples"] == 50 and half["reference"]["miou"] != whole["reference"]["miou"]
    assert merged["samples"] == 100 and merged["reference"] == whole["reference"]
    for a, b in zip(whole["candidates"], merged["candidates"], strict=True):
        assert a["metrics"] == b["metrics"] and a["worst"] == b["worst"] and a["per_class"] == b["per_class"]


def test_worst_samples_feed_layerwise(demo_run: Path, tmp_path: Path):
    shutil.copy(demo_run / "results.json", tmp_path / "previous.json")
    r = run_cli(
        "run", str(demo_run.parent / "suites" / SUITE.name), "--stage", "layerwise", "--samples", "worst",
        "--from-results", str(tmp_path / "previous.json"), "--out", str(tmp_path / "w"),
    )  # fmt: skip
    assert r.code == 0, r.out + r.err
    lw = json.loads((tmp_path / "w" / "results.json").read_text())["stages"][0]
    worst = {w["index"] for c in _e2e(demo_run)["candidates"] for w in c["worst"]}
    # every listed sample, although the suite's layerwise stage says samples: 2 (issue 26: it cut them)
    assert f"the {len(worst)} worst samples listed in" in r.err and lw["samples"] == len(worst) > 2


def test_a_postprocess_hook_returning_masks(tmp_path: Path):
    (tmp_path / "seg_post.py").write_text(
        "import numpy as np\n"
        "def masks(outputs, image_sizes):\n"
        "    return [m for m in outputs['logits'].argmax(axis=1)]\n"
    )
    text = (
        f"name: hooked\npython_path: [{tmp_path}, {DEMO}]\nmodels:\n  reference: {DEMO / 'seg_fp32.onnx'}\n"
        f"  candidates: {{fp16: {DEMO / 'seg_fp16.onnx'}}}\n"
        "inputs: {generate: {images: {shape: [1, 3, 128, 128]}}}\nstages:\n  e2e:\n    task: segmentation\n"
        f"    dataset: {{images: {DEMO / 'val/images'}, masks: {DEMO / 'val/masks'}, limit: 10,\n"
        "              class_names: [background, circle, square, triangle]}\n"
        "    postprocess: {hook: 'seg_post:masks'}\n    gates: [{metric: miou, max_drop: 0.01}]\n"
    )
    r = run_cli("run", str(write_suite(tmp_path, text)), "--out", str(tmp_path / "o"))
    assert r.code == 0, r.out + r.err
    assert _e2e(tmp_path / "o")["reference"]["samples"] == 10


def test_segmentation_config_errors_are_located(tmp_path: Path):
    base = (
        f"name: bad\nmodels:\n  reference: {DEMO / 'seg_fp32.onnx'}\n  candidates: {{fp16: {DEMO / 'seg_fp16.onnx'}}}\n"
        "inputs: {generate: {images: {shape: [1, 3, 128, 128]}}}\nstages:\n  e2e:\n    task: segmentation\n"
    )
    gate = "    gates: [{metric: miou, max_drop: 0.1}]\n"
    cases = {
        f"    dataset: {{coco: {ROOT / 'demo/shapes/val/instances.json'}}}\n" + gate: (
            "task 'segmentation' reads dataset.masks or dataset.npz, not dataset.coco"
        ),
        f"    dataset: {{masks: {DEMO / 'val/masks'}}}\n" + gate: ("masks: give the folder of the images as well"),
        f"    dataset: {{masks: {DEMO / 'val/masks'}, images: {DEMO / 'val/images'}}}\n"
        "    gates: [{metric: mIoU, max_drop: 0.1}]\n": "unknown segmentation metric 'mIoU'; did you mean 'miou'?",
    }
    for i, (tail, message) in enumerate(cases.items()):
        r = run_cli("validate", str(write_suite(tmp_path, base + tail, f"s{i}.yaml")))
        assert r.code == 2 and message in r.err, (message, r.err)
