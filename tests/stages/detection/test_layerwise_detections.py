"""Detection outputs in the layerwise stage, on the shapes demo's CenterNet with a decode and ONNX's own
NonMaxSuppression appended (tests/stages/detection/detector_graphs.py), run by ONNX Runtime: compared box to box, one
row and
its checks each, instead of index by index."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import ROOT, run_cli
from tests.stages.detection.detector_graphs import append, permuted, planted
from tests.stages.layerwise.test_layerwise import run_layerwise

DEMO = ROOT / "demo" / "shapes"


def images_npz(folder: Path, n: int = 4) -> Path:
    files = sorted((DEMO / "val" / "images").glob("*.png"))[:n]
    x = np.stack([np.asarray(Image.open(f).convert("RGB"), np.float32).transpose(2, 0, 1) / 255 for f in files])
    np.savez(folder / "images.npz", images=x)
    return folder / "images.npz"


def suite(candidates: dict[str, str], extra: str = "") -> str:
    cands = "".join(f"    {k}: {v}\n" for k, v in candidates.items())
    extra = extra or "    samples: 4\n"
    return (
        f"name: det\nreference_dir: refs\nmodels:\n  reference: ref.onnx\n  candidates:\n{cands}"
        f"inputs:\n  file: images.npz\nstages:\n  layerwise:\n{extra}"
    )


@pytest.fixture
def det6(tmp_path: Path) -> Path:
    images_npz(tmp_path)
    append(DEMO / "shapes_fp32.onnx", tmp_path / "ref.onnx", "det6")
    return tmp_path


def test_fp16_and_int8_candidates_compared_box_to_box(det6: Path):
    append(DEMO / "shapes_fp16.onnx", det6 / "fp16.onnx", "det6")
    append(DEMO / "shapes_int8_qdq.onnx", det6 / "int8.onnx", "det6")
    stage = run_layerwise(det6, suite({"fp16": "fp16.onnx", "int8": "int8.onnx"}))
    assert stage["status"] == "passed"
    for cand in stage["candidates"]:
        (row,) = cand["detections"]
        assert (row["layout"], row["tensors"], row["samples"], row["images"]) == ("det6", ["detections"], 4, 4)
        assert row["recognised"] == "graph output, by shape and class column"
        assert row["reference_boxes"] > 10 and row["passed"]
        # what the selection orders is compared through the row: the NMS's indices, the top-K, the peak search
        assert {"det/selected", "det/top", "det/top_idx", "det/is_peak"} <= set(row["covers"])
        tensors = {r["tensor"] for r in cand["rows"]}
        assert not tensors & {"detections", *row["covers"]}
        assert {"heatmap", "det/boxes"} <= tensors  # before the selection: compared element by element
        names = [c["name"] for c in stage["checks"] if c["candidate"] == cand["name"]]
        assert f"{cand['name']}: boxes in detections: matched_by_score >= 0.9" in names
        assert f"{cand['name']}: graph outputs compared" in names
    fp16, int8 = stage["candidates"]
    assert fp16["detection_checks_source"] == "default for fp16"
    assert fp16["detections"][0]["metrics"]["mean_iou_by_score"] > 0.99
    assert int8["detection_checks_source"] == "default for int8"
    int8_checks = [c for c in stage["checks"] if c["candidate"] == "int8" and c["metric"] == "max_score_change"]
    assert int8_checks[0]["threshold"] == 0.15
    report = (det6 / "out" / "report.html").read_text(encoding="utf-8")
    assert "<h4>Detections</h4>" in report and "graph output, by shape and class column" in report

    # the same candidate compared element by element: the peak search's Equal flips on near ties, and fails
    stage = run_layerwise(det6, suite({"fp16": "fp16.onnx"}, "    samples: 4\n    detections: {compare: false}\n"))
    assert stage["status"] == "failed" and "detections" not in stage["candidates"][0]
    assert stage["candidates"][0]["first_divergence"]["tensor"] == "det/is_peak"


def test_reordered_rows_are_the_same_detections(det6: Path):
    """The reference's own detections, rows in reverse order (padding first): index by index every row differs."""
    permuted(det6 / "ref.onnx", det6 / "reversed.onnx")
    stage = run_layerwise(det6, suite({"reversed": "reversed.onnx"}))
    (row,) = stage["candidates"][0]["detections"]
    assert row["metrics"] == {
        "matched_fraction": 1.0,
        "matched_by_score": 1.0,
        "mean_iou": 1.0,
        "mean_iou_by_score": 1.0,
        "min_iou": 1.0,
        "max_score_change": 0.0,
        "count_diff_max": 0.0,
        "count_diff_total": 0.0,
    }
    assert row["matched"] == row["reference_boxes"] > 10 and stage["status"] == "passed"
    stage = run_layerwise(det6, suite({"reversed": "reversed.onnx"}, "    detections: {compare: false}\n"))
    assert stage["status"] == "failed"
    assert stage["candidates"][0]["first_divergence"]["tensor"] == "detections"


def test_boxes_too_large_fail_with_the_reason(det6: Path):
    planted(DEMO / "shapes_fp32.onnx", det6 / "wide.onnx", "wh", scale=1.1)
    append(det6 / "wide.onnx", det6 / "wide.onnx", "det6")
    (det6 / "suite.yaml").write_text(suite({"wide": "wide.onnx"}), encoding="utf-8")
    r = run_cli("run", str(det6 / "suite.yaml"), "--out", str(det6 / "o"))
    assert r.code == 1, r.out + r.err
    assert "wide: boxes in detections (det6): " in r.out
    assert "fails mean_iou_by_score >= 0.95" in r.out
    line = next(x for x in r.out.splitlines() if "FAIL wide: boxes in detections: mean_iou_by_score" in x)
    assert "reference boxes matched" in line and "mean IoU 0.82" in line
    assert "no tensor diverges; the detections differ" not in r.out  # wh itself diverges first, as it should
    assert "first divergence wh" in r.out


def test_the_four_output_layout_and_rows_of_one_image(tmp_path: Path):
    images_npz(tmp_path, 2)
    append(DEMO / "shapes_fp32.onnx", tmp_path / "ref.onnx", "nms4")
    append(DEMO / "shapes_fp16.onnx", tmp_path / "fp16.onnx", "nms4")
    stage = run_layerwise(tmp_path, suite({"fp16": "fp16.onnx"}, "    samples: 2\n"))
    (row,) = stage["candidates"][0]["detections"]
    assert row["layout"] == "nms4" and row["recognised"] == "graph outputs, by shape, type and name"
    assert row["roles"] == {"count": "num_dets", "boxes": "det_boxes", "scores": "det_scores",
                            "classes": "det_classes"}  # fmt: skip
    assert stage["status"] == "passed" and row["reference_boxes"] > 5

    append(DEMO / "shapes_fp32.onnx", tmp_path / "ref.onnx", "rows6")
    append(DEMO / "shapes_int8_qdq.onnx", tmp_path / "int8.onnx", "rows6")
    stage = run_layerwise(tmp_path, suite({"int8": "int8.onnx"}, "    samples: 2\n"))
    (row,) = stage["candidates"][0]["detections"]
    assert (row["layout"], row["images"]) == ("det6", 2)  # [K, 6]: one image a sample
    assert "det/selected" in row["covers"]  # the NMS's [M, 3] indices: M differs between the sides


def test_detection_checks_are_validated(tmp_path: Path):
    images_npz(tmp_path, 1)
    append(DEMO / "shapes_fp32.onnx", tmp_path / "ref.onnx", "det6")
    bad = {
        "{metric: mean_iuo, min: 0.9}": "did you mean 'mean_iou'",
        "{metric: mean_iou, max: 0.9}": "'mean_iou' is higher-is-better: give 'min', not 'max'",
        "{metric: matched_fraction, min: 1.5}": "out of range for matched_fraction",
    }
    for check, message in bad.items():
        extra = f"    detections: {{checks: [{check}]}}\n"
        (tmp_path / "suite.yaml").write_text(suite({"c": "ref.onnx"}, extra), encoding="utf-8")
        r = run_cli("run", str(tmp_path / "suite.yaml"), "--out", str(tmp_path / "o"))
        assert r.code == 2 and message in r.out + r.err, r.out + r.err
    extra = "    detections: {iou: 0.7, checks: [{metric: count_diff_max, max: 0}]}\n"
    stage = run_layerwise(tmp_path, suite({"c": "ref.onnx"}, extra))
    (row,) = stage["candidates"][0]["detections"]
    assert (
        row["iou"] == 0.7 and stage["candidates"][0]["detection_checks_source"] == "stages.layerwise.detections.checks"
    )
    assert [c["name"] for c in stage["checks"] if c["metric"] == "count_diff_max"] == [
        "c: boxes in detections: count_diff_max <= 0"
    ]


def test_the_plan_reads_an_efficientnms_node(tmp_path: Path):
    """A YOLO-style tail: boxes and scores into EfficientNMS_TRT (domain TRT), its four outputs the graph's. ONNX
    Runtime cannot run the plugin here (its reference is another item of issue 37): the reference pass is made by
    hand from the graph and arrays of the shapes TensorRT's plugin gives, and the plan is what the stage builds."""
    from onnx import TensorProto, helper

    from trtverify.config.layerwise import LayerwiseDetections
    from trtverify.graph.onnxgraph import GraphIndex
    from trtverify.stages.layerwise.detections import plan
    from trtverify.stages.layerwise.reference import ReferencePass
    from trtverify.util.tensorstore import TensorStore

    nodes = [
        helper.make_node("Sigmoid", ["logits"], ["scores"], name="act"),
        helper.make_node("Identity", ["raw_boxes"], ["boxes"], name="boxes"),
        helper.make_node(
            "EfficientNMS_TRT", ["boxes", "scores"], ["num_dets", "det_boxes", "det_scores", "det_classes"],
            name="nms", domain="TRT", max_output_boxes=10, score_threshold=0.25, iou_threshold=0.45,
            background_class=-1, score_activation=0, box_coding=0, plugin_version="1",
        ),
    ]  # fmt: skip
    outs = [("num_dets", TensorProto.INT32, [1, 1]), ("det_boxes", TensorProto.FLOAT, [1, 10, 4]),
            ("det_scores", TensorProto.FLOAT, [1, 10]), ("det_classes", TensorProto.INT32, [1, 10])]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "yolo_tail",
        [
            helper.make_tensor_value_info("raw_boxes", TensorProto.FLOAT, [1, 100, 4]),
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 100, 3]),
        ],  # fmt: skip
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outs],
    )
    g = GraphIndex.from_model(helper.make_model(graph))
    values = {
        "scores": np.zeros((1, 100, 3), np.float32),
        "boxes": np.zeros((1, 100, 4), np.float32),
        "num_dets": np.array([[2]], np.int32),
        "det_boxes": np.zeros((1, 10, 4), np.float32),
        "det_scores": np.zeros((1, 10), np.float32),
        "det_classes": np.zeros((1, 10), np.int32),
    }
    ref = ReferencePass(g, g.value_tensors(), TensorStore())
    for name, v in values.items():
        ref.store.put(0, name, v)
        ref.shape[name], ref.dtype[name] = v.shape, str(v.dtype)
    got = plan(ref, [(t, t) for t in ref.order], LayerwiseDetections())
    (group,) = got.groups
    assert group.layout.kind == "nms4" and group.layout.source == "outputs of EfficientNMS_TRT node nms"
    assert group.layout.tensors == ["num_dets", "det_boxes", "det_scores", "det_classes"]
    assert group.covers == []  # the plugin writes the outputs itself: nothing between
    assert got.covered == {"num_dets", "det_boxes", "det_scores", "det_classes"}  # the heads stay tensors
    assert plan(ref, [(t, t) for t in ref.order if t != "det_classes"], LayerwiseDetections()).groups == []
    assert plan(ref, [(t, t) for t in ref.order], LayerwiseDetections(compare=False)).groups == []
