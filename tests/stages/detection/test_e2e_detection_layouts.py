"""Stage `e2e` reading the layouts TensorRT detectors emit, on the shapes demo exported both ways (demo/plugins):
the raw YOLO head [B, 4 + C, N] decoded by the built-in class-wise NMS, and the four outputs of an NMS ending.

Every mAP is checked against an independent path: pycocotools' COCOeval on detections that this file decodes with
its own plain code (per-class greedy NMS written out here, the four outputs read row by row).

ONNX Runtime cannot run EfficientNMS_TRT (a TensorRT plugin; trtverify's plugin runner is not part of this test),
so the four-output layout is tested on (a) arrays made here from the raw head's ONNX Runtime outputs, (b) the
outputs of the PyTorch module whose forward runs the NMS that its export writes as EfficientNMS_TRT, and (c) a
whole e2e run of an ONNX model that ends in ONNX's own NonMaxSuppression and writes the four outputs under the
names YOLO exporters give them.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from PIL import Image

from tests.conftest import ROOT, run_cli
from trtverify.backends.onnxruntime import OnnxRuntimeBackend
from trtverify.config.postprocess import Postprocess
from trtverify.tasks.coco import GroundTruth
from trtverify.tasks.detection import DetectionAccumulator
from trtverify.tasks.detlayouts import DetectionLayout
from trtverify.util.errors import UsageError

PLUGINS = ROOT / "demo" / "plugins"
VAL = ROOT / "demo" / "shapes" / "val"
RAW = PLUGINS / "shapes_yolo_raw.onnx"
NMS = {"score_threshold": 0.05, "iou_threshold": 0.5, "max_detections": 100}  # the demo's EfficientNMS_TRT settings
CATS = [1, 2, 3]


# --------------------------------------------------------------------- the independent path
def iou(a, b) -> float:
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def plain_nms(head: np.ndarray) -> list[tuple[float, float, float, float, float, int]]:
    """One image's raw head [4 + C, N] -> (x1, y1, x2, y2, score, class index), class by class, written out."""
    cx, cy, w, h = (head[k].astype(np.float64) for k in range(4))
    corners = [(cx[i] - w[i] / 2, cy[i] - h[i] / 2, cx[i] + w[i] / 2, cy[i] + h[i] / 2) for i in range(len(cx))]
    found = []
    for c in range(head.shape[0] - 4):
        scores = head[4 + c].astype(np.float64)
        ranked = sorted(
            (i for i in range(len(scores)) if scores[i] >= NMS["score_threshold"]), key=lambda i: -scores[i]
        )
        kept: list[int] = []
        for i in ranked:
            if all(iou(corners[i], corners[j]) < NMS["iou_threshold"] for j in kept):
                kept.append(i)
        found += [(float(scores[i]), i, c) for i in kept]
    found.sort(key=lambda t: (-t[0], t[1], t[2]))  # by score; ties: candidate, then class (the plugin's order)
    return [(*corners[i], s, c) for s, i, c in found[: NMS["max_detections"]]]


def pycocotools_map(doc: dict, dets: list[list[tuple]]) -> float:
    """COCOeval's mAP@[.5:.95] of (x1, y1, x2, y2, score, class index) rows per image, in dataset order."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    results = [
        {"image_id": im["id"], "category_id": CATS[int(c)], "bbox": [x1, y1, x2 - x1, y2 - y1], "score": float(s)}
        for im, rows in zip(doc["images"], dets)
        for x1, y1, x2, y2, s, c in rows
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(VAL / "instances.json"))
        ev = COCOeval(gt, gt.loadRes(results), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0])


@pytest.fixture(scope="module")
def val() -> tuple[dict, np.ndarray]:
    """The demo's 200 validation images as the suite's default preprocessing makes them (pixels / 255, NCHW)."""
    doc = json.loads((VAL / "instances.json").read_text())
    x = np.stack(
        [np.asarray(Image.open(VAL / "images" / im["file_name"]).convert("RGB")) for im in doc["images"]]
    ).transpose(0, 3, 1, 2)
    return doc, (x.astype(np.float32) / np.float32(255))


def run_ort(path: Path, x: np.ndarray, batch: int = 50) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    parts = [sess.run(names, {"images": x[i : i + batch]}) for i in range(0, len(x), batch)]
    return [np.concatenate([p[k] for p in parts]) for k in range(len(names))]


@pytest.fixture(scope="module")
def raw_heads(val) -> np.ndarray:
    return run_ort(RAW, val[1])[0]


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The raw-head export and its FP16 candidate (onnxruntime's convert_float_to_float16, float32 I/O)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    folder = tmp_path_factory.mktemp("layouts")
    onnx.save(convert_float_to_float16(onnx.load(str(RAW)), keep_io_types=True), str(folder / "raw_fp16.onnx"))
    return folder


def write_suite(folder: Path, reference: Path, candidate: Path, postprocess: dict, batch_size: int = 25) -> Path:
    suite = {
        "name": "layouts",
        "models": {"reference": str(reference), "candidates": {"cand": str(candidate)}},
        "inputs": {"generate": {"images": {"shape": [1, 3, 128, 128], "range": [0.0, 1.0]}}},
        "stages": {
            "e2e": {
                "task": "detection",
                "dataset": {"coco": str(VAL / "instances.json")},
                "postprocess": postprocess,
                "batch_size": batch_size,
                "gates": [{"metric": "map", "max_drop": 0.01}],
            }
        },
    }
    path = folder / f"{candidate.stem}.yaml"
    path.write_text(json.dumps(suite))  # JSON is YAML
    return path


def run_e2e(suite: Path) -> dict:
    r = run_cli("run", str(suite), "--out", str(suite.parent / suite.stem))
    assert r.code == 0, r.out + r.err
    return json.loads((suite.parent / suite.stem / "results.json").read_text())["stages"][0]


# ----------------------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def yolo_stage(models: Path) -> dict:
    suite = write_suite(models, RAW, models / "raw_fp16.onnx", {"layout": "yolo", "output": "output0", **NMS})
    return run_e2e(suite)


def test_raw_head_map_equals_pycocotools_on_plainly_decoded_detections(yolo_stage, val, raw_heads, models):
    doc, x = val
    reference = pycocotools_map(doc, [plain_nms(h) for h in raw_heads])
    assert yolo_stage["reference"]["map"] == pytest.approx(reference, abs=1e-12)
    assert 0.8 < reference < 0.86  # a real detector: demo/plugins/metrics.json gives 0.8279
    # the candidate's outputs as trtverify's backend gives them (it runs an FP16 graph emulated, as the GPU computes
    # it, not as ONNX Runtime's CPU kernels do); the decoding and the mAP stay independent
    backend = OnnxRuntimeBackend(models / "raw_fp16.onnx")
    fp16 = np.concatenate([backend.infer({"images": x[i : i + 50]})["output0"] for i in range(0, len(x), 50)])
    cand = next(c for c in yolo_stage["candidates"] if c["name"] == "cand")
    assert cand["metrics"]["map"] == pytest.approx(pycocotools_map(doc, [plain_nms(h) for h in fp16]), abs=1e-12)
    assert yolo_stage["reference"]["detections"] == sum(len(plain_nms(h)) for h in raw_heads)


def padded_outputs(dets: list[list[tuple]], m: int) -> dict[str, np.ndarray]:
    """The four EfficientNMS_TRT outputs of `dets`, zero padded to m rows, as the plugin writes them."""
    b = len(dets)
    out = {
        "num_dets": np.zeros((b, 1), np.int32),
        "det_boxes": np.zeros((b, m, 4), np.float32),
        "det_scores": np.zeros((b, m), np.float32),
        "det_classes": np.zeros((b, m), np.int32),
    }
    for i, rows in enumerate(dets):
        out["num_dets"][i, 0] = len(rows)
        for k, (x1, y1, x2, y2, s, c) in enumerate(rows):
            out["det_boxes"][i, k] = (x1, y1, x2, y2)
            out["det_scores"][i, k], out["det_classes"][i, k] = s, c
    return out


def nms_layout_map(outputs: dict[str, np.ndarray], doc: dict, batch: int = 25) -> float:
    """The nms layout's detections of all images, through trtverify's accumulator (pycocotools backend)."""
    acc = DetectionAccumulator(GroundTruth(doc))
    layout = DetectionLayout(Postprocess(layout="nms"), CATS)
    ids = [im["id"] for im in doc["images"]]
    for i in range(0, len(ids), batch):
        part = {k: v[i : i + batch] for k, v in outputs.items()}
        acc.update(ids[i : i + batch], layout.decode(part, (128, 128), "det.onnx"))
    return acc.compute("pycocotools").map


def test_four_output_layout_on_nms_outputs_of_the_raw_head(val, raw_heads, yolo_stage):
    doc, _ = val
    dets = [plain_nms(h) for h in raw_heads]
    outputs = padded_outputs(dets, NMS["max_detections"])
    rows = [[(*r[:4], r[4], r[5]) for r in d] for d in dets]
    # the detections as float32 outputs, read back by the plain path, against the layout
    as_written = [
        [
            (*outputs["det_boxes"][i, k], outputs["det_scores"][i, k], outputs["det_classes"][i, k])
            for k in range(len(d))
        ]
        for i, d in enumerate(rows)
    ]
    assert nms_layout_map(outputs, doc) == pytest.approx(pycocotools_map(doc, as_written), abs=1e-12)
    # the model exported both ways gives one mAP: the NMS ending's outputs, and the raw head under the yolo layout
    assert nms_layout_map(outputs, doc) == pytest.approx(yolo_stage["reference"]["map"], abs=1e-6)


@pytest.mark.parametrize("build", ["build_nms", "build_plugin"])
def test_four_output_layout_on_the_pytorch_module_exported_with_efficientnms(build, val, yolo_stage):
    """The demo's PyTorch modules run the NMS that their export writes as EfficientNMS_TRT (and, build_plugin, the
    user plugin ShapesBoxDecode before it): their four outputs under the nms layout give the raw head's mAP."""
    torch = pytest.importorskip("torch")
    sys.path.insert(0, str(PLUGINS))
    try:
        import shapes_plugin_models
    finally:
        sys.path.remove(str(PLUGINS))
    doc, x = val
    model = getattr(shapes_plugin_models, build)()
    model.load_state_dict(torch.load(ROOT / "demo" / "shapes" / "shapes_centernet.pt", weights_only=True))
    model.eval()
    with torch.no_grad():
        parts = [model(torch.from_numpy(x[i : i + 50])) for i in range(0, len(x), 50)]
    names = ("num_dets", "det_boxes", "det_scores", "det_classes")
    outputs = {n: np.concatenate([p[k].numpy() for p in parts]) for k, n in enumerate(names)}
    assert outputs["num_dets"].dtype == outputs["det_classes"].dtype == np.int32
    plain = [
        [(*outputs["det_boxes"][i, k], outputs["det_scores"][i, k], outputs["det_classes"][i, k]) for k in range(n)]
        for i, n in enumerate(outputs["num_dets"][:, 0])
    ]
    got = nms_layout_map(outputs, doc)
    assert got == pytest.approx(pycocotools_map(doc, plain), abs=1e-12)
    # torch's float32 NMS on its own raw head against the layout's float64 NMS on ONNX Runtime's (7e-5 apart)
    assert got == pytest.approx(yolo_stage["reference"]["map"], abs=2e-4)


def onnx_nms_export(raw: Path, out: Path, m: int = 100) -> None:
    """The raw-head model ending in ONNX's NonMaxSuppression, with the four outputs of EfficientNMS_TRT (count,
    corner boxes, scores, int32 classes; zero padded to m rows) under the names YOLO exporters give them. Batch 1."""
    model = onnx.load(str(raw))
    g = model.graph
    consts = {
        "c0": [0],
        "c1": [1],
        "c2": [2],
        "c3": [3],
        "c4": [4],
        "cbig": [1 << 30],
        "cm": [m],
        "c00": [0, 0],
        "shape11": [1, 1],
    }
    for name, v in consts.items():
        g.initializer.append(numpy_helper.from_array(np.asarray(v, np.int64), name))
    g.initializer.append(numpy_helper.from_array(np.asarray([NMS["iou_threshold"]], np.float32), "iou"))
    g.initializer.append(numpy_helper.from_array(np.asarray([NMS["score_threshold"]], np.float32), "thr"))
    g.initializer.append(numpy_helper.from_array(np.asarray(2.0, np.float32), "two"))
    n = helper.make_node
    g.node.extend(
        [
            n("Slice", ["output0", "c0", "c4", "c1"], ["cwh_t"]),  # [1, 4, N]
            n("Transpose", ["cwh_t"], ["cwh"], perm=[0, 2, 1]),  # [1, N, 4]
            n("Slice", ["output0", "c4", "cbig", "c1"], ["scores"]),  # [1, C, N]
            n("NonMaxSuppression", ["cwh", "scores", "cm", "iou", "thr"], ["sel"], center_point_box=1),
            n("GatherND", ["scores", "sel"], ["sel_scores"]),
            n("Shape", ["sel_scores"], ["found"]),
            n("Min", ["found", "cm"], ["k"]),
            n("TopK", ["sel_scores", "k"], ["top_scores", "top"], axis=0),
            n("Gather", ["sel", "top"], ["top_sel"], axis=0),
            n("Slice", ["top_sel", "c1", "c2", "c1"], ["cls2"]),
            n("Squeeze", ["cls2", "c1"], ["cls"]),
            n("Slice", ["top_sel", "c2", "c3", "c1"], ["box2"]),
            n("Squeeze", ["box2", "c1"], ["box"]),
            n("Squeeze", ["cwh", "c0"], ["cwh0"]),  # [N, 4]
            n("Slice", ["cwh0", "c0", "c2", "c1"], ["centre"]),
            n("Slice", ["cwh0", "c2", "c4", "c1"], ["size"]),
            n("Div", ["size", "two"], ["half"]),
            n("Sub", ["centre", "half"], ["tl"]),
            n("Add", ["centre", "half"], ["br"]),
            n("Concat", ["tl", "br"], ["corners"], axis=1),
            n("Gather", ["corners", "box"], ["top_boxes"], axis=0),
            n("Sub", ["cm", "k"], ["pad"]),
            n("Concat", ["c00", "pad", "c0"], ["pads2"], axis=0),
            n("Concat", ["c0", "pad"], ["pads1"], axis=0),
            n("Pad", ["top_boxes", "pads2"], ["boxes_m"]),
            n("Unsqueeze", ["boxes_m", "c0"], ["det_boxes"]),
            n("Pad", ["top_scores", "pads1"], ["scores_m"]),
            n("Unsqueeze", ["scores_m", "c0"], ["det_scores"]),
            n("Cast", ["cls"], ["cls32"], to=TensorProto.INT32),
            n("Pad", ["cls32", "pads1"], ["cls_m"]),
            n("Unsqueeze", ["cls_m", "c0"], ["det_classes"]),
            n("Cast", ["k"], ["k32"], to=TensorProto.INT32),
            n("Reshape", ["k32", "shape11"], ["num_dets"]),
        ]
    )
    del g.output[:]
    g.output.extend(
        [
            helper.make_tensor_value_info("num_dets", TensorProto.INT32, ["batch", 1]),
            helper.make_tensor_value_info("det_boxes", TensorProto.FLOAT, ["batch", m, 4]),
            helper.make_tensor_value_info("det_scores", TensorProto.FLOAT, ["batch", m]),
            helper.make_tensor_value_info("det_classes", TensorProto.INT32, ["batch", m]),
        ]
    )
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(out))


def test_e2e_run_of_a_model_ending_in_nms_outputs(models, val):
    doc, x = val
    path = models / "onnx_nms.onnx"
    onnx_nms_export(RAW, path)
    # default output names (num_dets, det_boxes, det_scores, det_classes), batch 1 (ONNX's NMS graph above)
    stage = run_e2e(write_suite(models, path, path, {"layout": "nms"}, batch_size=1))
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    plain = []
    for i in range(len(x)):
        num, boxes, scores, classes = sess.run(None, {"images": x[i : i + 1]})
        plain.append([(*boxes[0, k], scores[0, k], classes[0, k]) for k in range(int(num[0, 0]))])
    assert stage["reference"]["map"] == pytest.approx(pycocotools_map(doc, plain), abs=1e-12)
    assert stage["reference"]["detections"] == sum(map(len, plain)) > 500
    assert 0.8 < stage["reference"]["map"] < 0.86


def test_wrong_layout_fails_the_run_naming_model_output_and_shapes(models, tmp_path):
    suite = write_suite(tmp_path, RAW, models / "raw_fp16.onnx", {"layout": "rows", "output": "output0"})
    r = run_cli("run", str(suite), "--out", str(tmp_path / "o"))
    assert r.code == 2, r.out + r.err  # refused before anything runs, at the suite's line (validate says the same)
    assert (
        "stages.e2e.postprocess.layout: layout rows reads detections [B, K, 6] or [K, 6], but output 'output0' of "
        "shapes_yolo_raw.onnx is [batch, 7, 1024]: choose the layout of its outputs" in " ".join(r.err.split())
    ), r.err
    assert not (tmp_path / "o" / "results.json").exists()
    # a shape the graph leaves open is read when the model runs: the stage stops naming model, output and shapes
    layout = DetectionLayout(Postprocess(layout="rows", output="output0"), CATS)
    with pytest.raises(UsageError, match=r"reference: postprocess layout rows: output 'output0' has shape "
                       r"\[25, 7, 1024\], expected \[B, K, 6\] or one image's \[K, 6\]"):  # fmt: skip
        layout.decode({"output0": np.zeros((25, 7, 1024), np.float32)}, (128, 128), "reference", batch=25)
