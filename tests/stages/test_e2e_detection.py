"""Stage `e2e` on the detection demo: COCO metrics on real detections, equal to pycocotools'."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, run_cli
from trtverify.backends.onnxruntime import OnnxRuntimeBackend
from trtverify.config import load_suite
from trtverify.hooks import load_hook
from trtverify.tasks.datasets import batches, make_preprocess, open_dataset
from trtverify.tasks.detection import DetectionAccumulator

SUITE = ROOT / "suites" / "shapes_detection.yaml"
STATS = ("map", "ap50", "ap75", "ap_small", "ap_medium", "ap_large", "ar1", "ar10", "ar100", "ar_small", "ar_medium", "ar_large")


@pytest.fixture(scope="module")
def e2e_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("det") / "out"
    r = run_cli("run", str(SUITE), "--stage", "e2e", "--out", str(out))
    assert r.code == 0, r.out + r.err
    return out, json.loads((out / "results.json").read_text())["stages"][0]


def test_coco_figures_equal_pycocotools_on_the_demo(e2e_run):
    _, stage = e2e_run
    loaded = load_suite(SUITE)
    cfg = loaded.suite.stages.e2e
    reader = open_dataset(cfg.dataset)
    pre = make_preprocess(cfg.preprocess, loaded.suite.python_path)
    decode = load_hook(cfg.postprocess.hook, loaded.suite.python_path)
    model = OnnxRuntimeBackend(Path(loaded.suite.models.reference))
    acc = DetectionAccumulator(reader.coco, iou=cfg.iou, score_threshold=cfg.score_threshold)
    for b in batches(reader, range(len(reader)), 50, pre, 0):
        dets = decode(model.infer({"images": b.inputs}), image_sizes=b.sizes)
        acc.update([reader.ids[i] for i in b.index], dets)
    fast, ref = acc.compute("faster-coco-eval"), acc.compute("pycocotools")
    def same(a, b) -> bool:  # NaN (e.g. ap_large: no large objects) equals NaN; JSON writes it as "nan"
        a, b = float(a), float(b)
        return (a != a and b != b) or a == pytest.approx(b, abs=1e-12)

    for k in STATS:
        assert same(fast[k], ref[k]), k
        assert same(stage["reference"][k], ref[k]), k
    assert ref["ap_large"] != ref["ap_large"]  # 128x128 images hold no COCO-"large" objects
    assert 0.75 < ref["map"] < 0.9 and stage["samples"] == 200
    assert [c["name"] for c in stage["reference"]["per_class"]] == ["circle", "square", "triangle"]


def test_detection_deltas_and_worst_images(e2e_run):
    _, stage = e2e_run
    int8 = next(c for c in stage["candidates"] if c["name"] == "int8")
    assert int8["deltas"]["map"] == pytest.approx(int8["metrics"]["map"] - stage["reference"]["map"])
    assert [row["name"] for row in int8["per_class"]] == ["circle", "square", "triangle"]
    assert all(w["ap_drop"] > 0 for w in int8["worst"])
    drops = [w["ap_drop"] for w in int8["worst"]]
    assert drops == sorted(drops, reverse=True)


def test_map_gate_tighter_than_the_int8_drop_fails(tmp_path: Path):
    for sub in ("suites", "demo"):
        shutil.copytree(ROOT / sub, tmp_path / sub)
    suite = tmp_path / "suites" / "shapes_detection.yaml"
    suite.write_text(suite.read_text().replace("- {metric: map, max_drop: 0.01, min: 0.75}", "- {metric: map, max_drop: 0.0001, min: 0.75}"))
    r = run_cli("run", str(suite), "--stage", "e2e", "--out", str(tmp_path / "o"))
    assert r.code == 1 and "FAIL int8: map drop <= 0.0001" in r.out


def test_layerwise_on_the_worst_detection_images(e2e_run, tmp_path: Path):
    out, stage = e2e_run
    r = run_cli("run", str(SUITE), "--stage", "layerwise", "--samples", "worst", "--from-results", str(out / "results.json"), "--out", str(tmp_path / "w"))
    assert r.code == 0, r.out + r.err
    lw = json.loads((tmp_path / "w" / "results.json").read_text())["stages"][0]
    assert lw["samples"] == 2 and len(lw["candidates"]) == 2  # the suite's layerwise uses 2 samples
