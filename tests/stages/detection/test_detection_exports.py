"""Detection outputs as users' exporters write them, compared as detections in layerwise and read by e2e:

- torchvision's SSDlite (tests/data/torchvision: torchvision's builder, torch.onnx.export defaults): boxes [K, 4],
  scores [K], labels [K] of one image, with an FP16 candidate from ONNX Runtime's float16 converter;
- YOLOv5's raw head [B, N, 5 + C] and YOLOv7's end2end export with ONNX's NonMaxSuppression, [N, 7] rows of batch
  index, box, class and score (tests/data/yolo_heads, made by its make_models.py on the trained shapes detector).

Each e2e figure is checked against an independent path: pycocotools on detections read or decoded by plain code
here (tests/stages/detection/test_e2e_detection_layouts.py's NMS written out), never by trtverify's decoder.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from PIL import Image

from tests.conftest import DATA
from tests.stages.detection.test_e2e_detection_layouts import CATS, NMS, RAW, VAL, plain_nms, run_e2e, val
from tests.stages.layerwise.test_layerwise import run_layerwise
from trtverify.config.loader import load_suite
from trtverify.config.postprocess import Postprocess
from trtverify.graph.onnxgraph import GraphIndex
from trtverify.runner import preflight
from trtverify.stages.layerwise.selection import Selection, Series, classify, overlap, sorted_rel_l2
from trtverify.tasks.detlayouts import DetectionLayout
from trtverify.util.errors import SuiteError

__all__ = ["val"]  # a fixture, imported to be used here
SSDLITE = DATA / "torchvision" / "ssdlite.onnx"
HEADS = DATA / "yolo_heads"
INDEX_OPS = {"TopK", "NonZero", "NonMaxSuppression", "ArgMax", "Gather", "GatherND", "Greater", "If"}


def fp16(src: Path, dst: Path) -> Path:
    """ONNX Runtime's float16 converter, float32 I/O, as users convert. On a graph with an If (torchvision's NMS
    branch) the converter leaves the branch half converted (FP16 constants beside FP32 values, outer FP16 values
    read as FP32): that branch is put back to FP32 here, reading casts of the outer values, so that it loads."""
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.transformers.float16 import convert_float_to_float16

    m = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True, op_block_list=["If"])
    g = m.graph
    for n in [n for n in g.node if n.op_type == "If"]:
        halves = {v.name for v in g.value_info if v.type.tensor_type.elem_type == TensorProto.FLOAT16}
        halves |= {x.output[0] for x in g.node if x.op_type == "Cast" and x.attribute[0].i == TensorProto.FLOAT16}
        for sub in (a.g for a in n.attribute):
            del sub.value_info[:]
            for x in sub.node:
                for a in x.attribute:
                    if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == TensorProto.FLOAT16:
                        a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
            inner = {o for x in sub.node for o in x.output}
            for name in {i for x in sub.node for i in x.input if i and i not in inner} & halves:
                g.node.insert(list(g.node).index(n), helper.make_node("Cast", [name], [name + "_f32"], to=1))
                for x in sub.node:
                    x.input[:] = [i + "_f32" if i == name else i for i in x.input]
    onnx.save(m, str(dst))
    return dst


def subset(doc: dict, n: int, path: Path) -> dict:
    """The first n images of the shapes validation set and their boxes, written to `path`."""
    sub = {**doc, "images": doc["images"][:n]}
    ids = {im["id"] for im in sub["images"]}
    sub["annotations"] = [a for a in doc["annotations"] if a["image_id"] in ids]
    path.write_text(json.dumps(sub))
    return sub


def coco_map(gt: Path, doc: dict, dets: list[list[tuple]]) -> float:
    """pycocotools' mAP@[.5:.95] against the ground truth in `gt` (x1, y1, x2, y2, score, class index rows)."""
    import contextlib
    import io

    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    results = [
        {"image_id": im["id"], "category_id": CATS[c], "bbox": [x1, y1, x2 - x1, y2 - y1], "score": float(s)}
        for im, rows in zip(doc["images"], dets)
        for x1, y1, x2, y2, s, c in rows
    ]
    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO(str(gt))
        ev = COCOeval(truth, truth.loadRes(results), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0])


# --------------------------------------------------------------------------------------- torchvision
@pytest.mark.slow
def test_ssdlite_fp16_compared_box_to_box_and_its_topk_is_no_root_cause(tmp_path: Path):
    """Before: torchvision's three outputs were three tensors compared index by index and the root causes 1-3 were
    the TopK nodes of its per-level top-k (their indices swap on near-equal scores)."""
    fp16(SSDLITE, tmp_path / "fp16.onnx")
    np.savez(tmp_path / "one.npz", image=np.load(DATA / "torchvision" / "inputs.npz")["image"][0])
    stage = run_layerwise(tmp_path, (
        f"name: tv\nreference_dir: refs\nmodels:\n  reference: {SSDLITE}\n  candidates:\n    fp16: fp16.onnx\n"
        "inputs:\n  file: one.npz\nstages:\n  layerwise:\n    samples: 1\n"
    ))  # fmt: skip
    (cand,) = stage["candidates"]
    (det,) = cand["detections"]
    assert (det["layout"], det["roles"]) == ("torchvision", {"boxes": "boxes", "scores": "scores", "labels": "labels"})
    assert det["reference_boxes"] == 50 and det["matched"] >= 45  # FP16 swaps a few near-equal scores
    covered = set(det["covers"])
    assert {"/model/TopK_output_1", "/model/TopK_1_output_1", "/model/TopK_2_output_1"} <= covered
    assert cand["root_causes"] and not {rc["op_type"] for rc in cand["root_causes"]} & INDEX_OPS
    assert not {rc["tensor"] for rc in cand["root_causes"]} & covered


def test_index_tensors_of_ssdlite_are_told_apart_from_values():
    g = GraphIndex.from_model(onnx.load(str(SSDLITE)))
    found = classify(g, {"onnx::Slice_2046": "int64"})  # the If around torchvision's NMS: the kept indices
    assert (
        found["/model/TopK_1_output_1"].kind == "index" and "TopK /model/TopK_1" in found["/model/TopK_1_output_1"].why
    )
    assert found["/model/NonZero_output_0"].kind == "index" and found["/model/Greater_output_0"].kind == "index"
    assert found["onnx::Slice_2046"].kind == "index"
    assert found["/model/Gather_15_output_0"].kind == "selected"  # boxes picked by the kept indices
    assert found["boxes"].kind == "selected" and found["labels"].kind == "selected"
    convs = [n.output[0] for n in g.nodes if n.op_type in ("Conv", "HardSwish", "Softmax")]
    assert convs and not set(convs) & set(found)  # the network itself: compared element by element
    assert "/model/TopK_output_0" not in found  # TopK's values are sorted: elementwise is right for them
    # what they select, whatever the order
    assert overlap(np.array([3, 1, 2]), np.array([2, 3, 1])) == 1.0
    assert overlap(np.array([3, 1, 2]), np.array([2, 3, 7])) == 0.5
    assert sorted_rel_l2(np.array([0.5, 2.0]), np.array([2.0, 0.5])) == 0.0
    labels = Series("argmax", "argmax", Selection("index", "indices of ArgMax a", by_position=True))
    labels.add(np.array([[0, 1, 2, 2]]), np.array([[0, 2, 1, 2]]))  # same labels, two positions swapped
    assert labels.metrics == {"selected_overlap": 0.5}


@pytest.mark.slow
def test_e2e_reads_torchvisions_outputs_of_one_image(tmp_path: Path, val):
    """An unbatched export ([3, H, W] in, one image's boxes out) is fed image by image; its mAP equals pycocotools'
    on the outputs read plainly (resized as the suite says, boxes scaled back to the images' 128 pixels)."""
    sub = subset(val[0], 8, tmp_path / "sub.json")
    suite = {
        "name": "tv",
        "models": {"reference": str(SSDLITE), "candidates": {"fp16": str(fp16(SSDLITE, tmp_path / "fp16.onnx"))}},
        "inputs": {"generate": {"image": {"shape": [3, 160, 160]}}},
        "stages": {"e2e": {
            "task": "detection", "dataset": {"coco": str(tmp_path / "sub.json"), "images": str(VAL / "images")},
            "preprocess": {"resize": [160, 160], "scale": 1 / 255}, "postprocess": {"layout": "torchvision"},
            "batch_size": 1, "gates": [{"metric": "map", "max_drop": 0.5}],
        }},
    }  # fmt: skip
    (tmp_path / "tv.yaml").write_text(json.dumps(suite))
    suite["stages"]["e2e"]["batch_size"] = 4  # type: ignore[index]
    (tmp_path / "tv4.yaml").write_text(json.dumps(suite))
    with pytest.raises(
        SuiteError, match=r"input image \[3, 160, 160\] has no batch axis .* set stages.e2e.batch_size: 1"
    ):
        preflight(load_suite(tmp_path / "tv4.yaml"))
    stage = run_e2e(tmp_path / "tv.yaml")
    sess = ort.InferenceSession(str(SSDLITE), providers=["CPUExecutionProvider"])
    dets = []
    for im in sub["images"]:
        pixels = Image.open(VAL / "images" / im["file_name"]).convert("RGB").resize((160, 160), Image.BILINEAR)
        x = (np.asarray(pixels).transpose(2, 0, 1).astype(np.float32) * np.float32(1 / 255)).astype(np.float32)
        boxes, scores, labels = sess.run(None, {"image": x})
        dets.append([(*(b * 128 / 160), s, int(c) - 1) for b, s, c in zip(boxes, scores, labels)])  # ids 1..3
    expected = coco_map(tmp_path / "sub.json", sub, dets)
    assert expected > 0 and stage["reference"]["map"] == pytest.approx(expected, abs=1e-9)
    # batched images into it: refused, saying why
    layout = DetectionLayout(Postprocess(layout="torchvision"), [1, 2, 3])
    with pytest.raises(Exception, match="holds one image's detections, but 2 images were fed"):
        layout.decode({"boxes": boxes, "scores": scores, "labels": labels}, (160, 160), "m", batch=2)


# --------------------------------------------------------------------------------------------- YOLO
def test_yolov5_head_decodes_to_the_raw_heads_detections(val):
    """YOLOv5's [B, N, 5 + C] head (objectness x class score) gives the detections the demo's raw head gives
    under plain per-class NMS: objectness is the cell's best probability and the class scores its share."""
    _, x = val
    x = x[:40]
    v5 = ort.InferenceSession(str(HEADS / "yolov5_head.onnx"), providers=["CPUExecutionProvider"])
    raw = ort.InferenceSession(str(RAW), providers=["CPUExecutionProvider"])
    head = v5.run(None, {"images": x})[0]
    assert head.shape == (40, 1024, 8)
    decoded = DetectionLayout(Postprocess(layout="yolov5", **NMS), [1, 2, 3]).decode(
        {"output0": head}, (128, 128), "v5"
    )
    for got, want in zip(decoded, raw.run(None, {"images": x})[0]):
        plain = np.array(plain_nms(want), dtype=np.float64).reshape(-1, 6)
        assert got.shape == plain.shape and got.shape[0] > 0
        np.testing.assert_allclose(got[:, :5], plain[:, :5], rtol=1e-5, atol=1e-4)
        assert (got[:, 5] == plain[:, 5] + 1).all()  # class index k -> category id k + 1
    with pytest.raises(Exception, match="use postprocess layout yolov5"):  # read as Ultralytics' layout
        DetectionLayout(Postprocess(layout="yolo"), [1, 2, 3]).decode({"output0": head}, (128, 128), "v5")


@pytest.mark.slow
def test_yolov7_end2end_rows_in_e2e_and_layerwise(tmp_path: Path, val):
    doc, x = subset(val[0], 25, tmp_path / "sub.json"), val[1][:25]
    ref = HEADS / "yolov7_end2end.onnx"
    cand = fp16(ref, tmp_path / "fp16.onnx")
    suite = {
        "name": "v7", "models": {"reference": str(ref), "candidates": {"fp16": str(cand)}},
        "inputs": {"generate": {"images": {"shape": [1, 3, 128, 128], "range": [0.0, 1.0]}}},
        "stages": {"e2e": {"task": "detection", "postprocess": {"layout": "batch_rows"}, "batch_size": 25,
                           "dataset": {"coco": str(tmp_path / "sub.json"), "images": str(VAL / "images")},
                           "gates": [{"metric": "map", "max_drop": 0.5}]}},
    }  # fmt: skip
    (tmp_path / "v7.yaml").write_text(json.dumps(suite))
    stage = run_e2e(tmp_path / "v7.yaml")
    sess = ort.InferenceSession(str(ref), providers=["CPUExecutionProvider"])
    dets: list[list[tuple]] = []
    for i in range(0, len(x), 25):
        rows = sess.run(None, {"images": x[i : i + 25]})[0]
        dets += [[(r[1], r[2], r[3], r[4], r[6], int(r[5])) for r in rows if int(r[0]) == b] for b in range(25)]
    expected = coco_map(tmp_path / "sub.json", doc, dets)
    assert expected > 0.5 and stage["reference"]["map"] == pytest.approx(expected, abs=1e-9)

    # layerwise: the rows matched box to box; with detections compared elementwise, the NMS indices and the
    # class argmax are compared by what they select, and are no root cause
    images = np.ascontiguousarray(x[:2])
    np.savez(tmp_path / "two.npz", images=images)
    text = (
        f"name: v7\nreference_dir: refs\nmodels:\n  reference: {ref}\n  candidates:\n    same: {ref}\n"
        "inputs:\n  file: two.npz\n  batch_size: 2\nstages:\n  layerwise:\n    samples: 1\n"
    )
    (det,) = run_layerwise(tmp_path, text)["candidates"][0]["detections"]
    assert det["layout"] == "batch7" and det["reference_boxes"] == det["matched"] > 0 and det["images"] == 2
    text = text.replace("same: ", "fp16: fp16.onnx\n    same: ").replace(
        "samples: 1", "samples: 1\n    detections: {compare: false}"
    )
    fp16_cand = run_layerwise(tmp_path, text)["candidates"][0]
    picked = {r["tensor"]: r for r in fp16_cand["rows"] if r.get("compared_by")}
    assert "selected_overlap" in picked["/NonMaxSuppression_output_0"]["metrics"]
    assert "ArgMax" in picked["/ArgMax_output_0"]["compared_by"]
    assert not {rc["tensor"] for rc in fp16_cand["root_causes"]} & set(picked)


@pytest.mark.slow
def test_framework_compares_pytorchs_yolov7_rows_with_the_export_box_to_box(tmp_path: Path, val):
    """The framework stage: PyTorch's YOLOv7-style module (its NMS computed in torch as ONNX's op computes it) against
    its export in ONNX Runtime, the [N, 7] rows of a batch of two matched box to box."""
    pytest.importorskip("torch")
    from trtverify.cli.run import run_and_record
    from trtverify.runner import RunOptions

    np.savez(tmp_path / "val4.npz", images=np.ascontiguousarray(val[1][:2]))
    (tmp_path / "fw.yaml").write_text(
        f"name: v7fw\nreference_dir: store\npython_path: [{HEADS}]\n"
        f"models:\n  reference: {HEADS / 'yolov7_end2end.onnx'}\n"
        "  pytorch: {factory: 'make_models:build_v7', output_names: [output]}\n"
        "inputs:\n  file: val4.npz\n  batch_size: 2\nstages:\n  framework: {}\n"
    )
    results = run_and_record(load_suite(tmp_path / "fw.yaml"), tmp_path / "o", RunOptions(update_reference=True))
    (stage,) = results.stages
    (det,) = stage.detections
    assert stage.status == "passed" and (det.layout, det.tensors, det.images) == ("batch7", ["output"], 2)
    assert det.reference_boxes == det.matched > 4 and det.metrics["mean_iou"] > 0.9999
