"""Stage `e2e` on the detection demo: COCO metrics on real detections, equal to pycocotools'."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, run_cli
from trtverify.backends.onnxruntime import OnnxRuntimeBackend
from trtverify.config.loader import load_suite
from trtverify.tasks.batches import batches, make_preprocess
from trtverify.tasks.datasets import open_dataset
from trtverify.tasks.detection import DetectionAccumulator
from trtverify.util.errors import UsageError
from trtverify.util.hooks import load_hook

SUITE = ROOT / "suites" / "shapes_detection.yaml"
STATS = (
    "map",
    "ap50",
    "ap75",
    "ap_small",
    "ap_medium",
    "ap_large",
    "ar1",
    "ar10",
    "ar100",
    "ar_small",
    "ar_medium",
    "ar_large",
)


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
    acc = DetectionAccumulator(reader.truth, iou=cfg.iou, score_threshold=cfg.score_threshold)
    for b in batches(reader, range(len(reader)), 50, pre, 0):
        dets = decode(model.infer({"images": b.inputs}), image_sizes=b.sizes)
        acc.update([reader.ids[i] for i in b.index], dets)
    fast, ref = acc.compute("faster-coco-eval").dump(), acc.compute("pycocotools").dump()

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
    suite.write_text(
        suite.read_text().replace(
            "- {metric: map, max_drop: 0.01, min: 0.75}", "- {metric: map, max_drop: 0.0001, min: 0.75}"
        )
    )
    r = run_cli("run", str(suite), "--stage", "e2e", "--out", str(tmp_path / "o"))
    assert r.code == 1 and "FAIL int8: map drop <= 0.0001" in r.out


def test_layerwise_on_the_worst_detection_images(e2e_run, tmp_path: Path):
    out, stage = e2e_run
    r = run_cli(
        "run",
        str(SUITE),
        "--stage",
        "layerwise",
        "--samples",
        "worst",
        "--from-results",
        str(out / "results.json"),
        "--out",
        str(tmp_path / "w"),
    )
    assert r.code == 0, r.out + r.err
    lw = json.loads((tmp_path / "w" / "results.json").read_text())["stages"][0]
    # every image the e2e run listed, although the suite's layerwise says samples: 2 (issue 26: it cut them)
    listed = {w["index"] for c in stage["candidates"] for w in c["worst"]}
    assert lw["samples"] == len(listed) > 2 and len(lw["candidates"]) == 2


def _decode_one_image_at_a_time(outputs, image_sizes=None, input_size=None, max_detections=50, threshold=0.05):
    """The demo decoder's contract written the plain way (one image at a time), to pin the
    vectorised hook in demo/shapes/shapes_decode.py to it."""
    heat, wh, off = (np.asarray(outputs[k], dtype=np.float32) for k in ("heatmap", "wh", "offset"))
    b, c, h, w = heat.shape
    in_h, in_w = (h * 4, w * 4) if input_size is None else input_size
    sy, sx = in_h / h, in_w / w
    pad = np.pad(heat, [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
    pooled = np.max([pad[..., dy : dy + h, dx : dx + w] for dy in range(3) for dx in range(3)], axis=0)
    peaks = np.where(heat == pooled, heat, 0.0).reshape(b, -1)
    k = min(max_detections, peaks.shape[1])
    out = []
    for i in range(b):
        idx = np.argpartition(-peaks[i], k - 1)[:k] if k < peaks.shape[1] else np.arange(peaks.shape[1])
        idx = idx[np.argsort(-peaks[i][idx], kind="stable")]
        idx = idx[peaks[i][idx] >= threshold]
        cls, ys, xs = idx // (h * w), idx % (h * w) // w, idx % (h * w) % w
        cx, cy = (xs + off[i, 0, ys, xs]) * sx, (ys + off[i, 1, ys, xs]) * sy
        bw, bh = np.maximum(wh[i, 0, ys, xs], 0.0) * sx, np.maximum(wh[i, 1, ys, xs], 0.0) * sy
        boxes = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], axis=1)
        oh, ow = (in_h, in_w) if image_sizes is None else (float(image_sizes[i][0]), float(image_sizes[i][1]))
        if image_sizes is not None:
            boxes *= np.array([ow / in_w, oh / in_h, ow / in_w, oh / in_h], dtype=np.float32)
        boxes[:, 0::2], boxes[:, 1::2] = np.clip(boxes[:, 0::2], 0, ow), np.clip(boxes[:, 1::2], 0, oh)
        cats = np.asarray([1, 2, 3], dtype=np.float32)[cls]
        out.append(
            np.concatenate([boxes, peaks[i][idx][:, None], cats[:, None]], axis=1).astype(np.float32).reshape(-1, 6)
        )
    return out


@pytest.mark.parametrize("model", ["shapes_fp32", "shapes_int8_qdq"])
def test_vectorised_demo_decoder_equals_the_per_image_one(model):
    loaded = load_suite(SUITE)
    cfg = loaded.suite.stages.e2e
    reader = open_dataset(cfg.dataset)
    pre = make_preprocess(cfg.preprocess, loaded.suite.python_path)
    decode = load_hook(cfg.postprocess.hook, loaded.suite.python_path)
    backend = OnnxRuntimeBackend(ROOT / "demo" / "shapes" / f"{model}.onnx")
    options = [
        {},
        {"image_sizes": "odd"},
        {"image_sizes": "odd", "input_size": (128, 128), "max_detections": 5, "threshold": 0.3},
        {"max_detections": 10**6, "threshold": 0.0},
    ]
    compared = 0
    for b in batches(reader, range(0, 60), 20, pre, 0):
        outputs = backend.infer({"images": b.inputs})
        for opt in options:
            kw = dict(opt)
            if kw.get("image_sizes") == "odd":  # non-square, not the input size: exercises the rescaling
                kw["image_sizes"] = [(hh * 2, ww + 7) for hh, ww in b.sizes]
            got, want = decode(outputs, **kw), _decode_one_image_at_a_time(outputs, **kw)
            assert len(got) == len(want) == len(b.index)
            for g, e in zip(got, want):
                assert g.dtype == e.dtype and g.shape == e.shape
                np.testing.assert_array_equal(g, e)
                compared += len(g)
    assert compared > 500  # real detections were compared, not empty arrays


def test_broken_annotations_fail_before_any_inference(tmp_path: Path):
    """The COCO file is checked when the dataset opens (once, shared by every model's metrics),
    so a bad annotation stops the stage at once with the file named, not after the reference ran."""
    for sub in ("suites", "demo"):
        shutil.copytree(ROOT / sub, tmp_path / sub)
    ann = tmp_path / "demo" / "shapes" / "val" / "instances.json"
    gt = json.loads(ann.read_text())
    gt["annotations"][5]["category_id"] = 9
    ann.write_text(json.dumps(gt))
    r = run_cli(
        "run", str(tmp_path / "suites" / "shapes_detection.yaml"), "--stage", "e2e", "--out", str(tmp_path / "o")
    )
    assert r.code == 2, r.out + r.err
    assert f"{ann}: invalid COCO ground truth: annotations[5] refers to category 9" in r.out
    stage = json.loads((tmp_path / "o" / "results.json").read_text())["stages"][0]
    assert "inference_s" not in stage.get("timings", {})


def _coco_dataset(tmp_path: Path, gt: dict, limit: int | None = None):
    from trtverify.config.stages import Dataset

    (tmp_path / "images").mkdir(exist_ok=True)
    ann = tmp_path / "instances.json"
    ann.write_text(json.dumps(gt))
    return ann, Dataset(coco=ann, limit=limit)


def test_coco_dataset_limit_keeps_the_first_images_by_id_and_their_boxes(tmp_path: Path):
    gt = {
        "images": [{"id": i, "file_name": f"{i}.png", "width": 8, "height": 8} for i in (7, 3, 5)],
        "annotations": [{"image_id": i, "category_id": 1, "bbox": [0, 0, 2, 2]} for i in (7, 3, 5, 3)],
        "categories": [{"id": 1, "name": "box"}],
    }
    _, ds = _coco_dataset(tmp_path, gt, limit=2)
    reader = open_dataset(ds)
    assert reader.ids == [3, 5] and reader.class_names == ["box"]
    assert sorted(reader.truth.by_image) == [3, 5] and len(reader.truth.by_image[3]) == 2


def test_coco_dataset_errors_name_the_file_and_the_entry(tmp_path: Path):
    """An image without an id was a bare KeyError while the images were sorted, before the file was checked."""
    gt = {"images": [{"id": 1, "file_name": "1.png"}, {"file_name": "2.png"}], "annotations": [], "categories": []}
    ann, ds = _coco_dataset(tmp_path, gt)
    with pytest.raises(UsageError, match=rf"{ann}: invalid COCO ground truth: images\[1\] has no 'id'"):
        open_dataset(ds)
    ann.write_text("{")
    with pytest.raises(UsageError, match=rf"{ann}: not valid JSON \(line 1"):
        open_dataset(ds)
    ann.write_text(json.dumps({"images": []}))
    with pytest.raises(UsageError, match="missing key 'annotations'; missing key 'categories'"):
        open_dataset(ds)
