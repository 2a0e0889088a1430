"""Which tensors hold detections, recognised for families of exports: NMS plugins by op type and slot, graph outputs
by shape, type and name; anything ambiguous stays a tensor."""

from __future__ import annotations

import numpy as np
import pytest

from trtverify.compare.detlayout import TensorInfo, recognise

B, K = 2, 100


def t(name: str, shape: tuple[int, ...], dtype: str = "float32", **kw: object) -> TensorInfo:
    return TensorInfo(name, shape, dtype, **kw)  # type: ignore[arg-type]


def kinds(tensors: list[TensorInfo], values: dict[str, np.ndarray] | None = None) -> list[tuple[str, list[str]]]:
    return [(lay.kind, lay.tensors) for lay in recognise(tensors, (values or {}).get)]


def test_nms_plugins_by_op_type_and_slot_whatever_the_names():
    for op in ("EfficientNMS_TRT", "BatchedNMS_TRT", "BatchedNMSDynamic_TRT"):
        classes = "float32" if op.startswith("Batched") else "int32"  # BatchedNMS writes float classes
        outs = [
            t("o0", (B, 1), "int32", op_type=op, node="nms", slot=0),
            t("o1", (B, K, 4), op_type=op, node="nms", slot=1),
            t("o2", (B, K), op_type=op, node="nms", slot=2),
            t("o3", (B, K), classes, op_type=op, node="nms", slot=3),
        ]
        (lay,) = recognise(outs, lambda n: None)
        assert (lay.kind, lay.roles) == ("nms4", {"count": "o0", "boxes": "o1", "scores": "o2", "classes": "o3"})
        assert lay.source == f"outputs of {op} node nms"
        # inside the graph too (a Cast after it makes the graph output): the plugin's own outputs are the detections
        inner = [TensorInfo(**{**x.__dict__, "output": False}) for x in outs]
        assert kinds(inner) == [("nms4", ["o0", "o1", "o2", "o3"])]
        assert kinds(outs[:3]) == []  # an output missing: nothing to group


def test_mmdeploy_trtbatchednms():
    outs = [
        t("dets", (B, K, 5), op_type="TRTBatchedNMS", node="n", slot=0),
        t("labels", (B, K), "int32", op_type="TRTBatchedNMS", node="n", slot=1),
    ]
    assert kinds(outs) == [("dets5", ["dets", "labels"])]


def test_four_outputs_by_shape_type_and_name():
    outs = [
        t("images_feat", (B, 64, 8, 8)),
        t("num_dets", (B, 1), "int32"),
        t("det_boxes", (B, K, 4)),
        t("det_scores", (B, K)),
        t("det_classes", (B, K), "int32"),
    ]
    assert kinds(outs) == [("nms4", ["num_dets", "det_boxes", "det_scores", "det_classes"])]
    # classes as floats: the name says which, and they hold whole numbers
    floats = [*outs[:4], t("labels", (B, K))]
    assert kinds(floats, {"labels": np.array([[1.0, 2.0]])}) == [("nms4", ["num_dets", "det_boxes", "det_scores",
                                                                             "labels"])]  # fmt: skip
    assert kinds(floats, {"labels": np.array([[0.3, 0.7]])}) == []
    # no count: only where the boxes' name says detections
    assert kinds([outs[2], outs[3], outs[4]]) == [("nms4", ["det_boxes", "det_scores", "det_classes"])]
    assert kinds([t("a", (B, K, 4)), outs[3], outs[4]]) == []


def test_ambiguous_outputs_stay_tensors():
    base = [t("num", (B, 1), "int32"), t("boxes", (B, K, 4))]
    assert kinds([*base, t("x", (B, K)), t("y", (B, K))]) == []  # two float [B, K], no name to tell them apart
    assert kinds([*base, t("s", (B, K)), t("c", (B, K), "int32"), t("c2", (B, K), "int64")]) == []
    assert kinds([*base, t("boxes2", (B, K, 4)), t("s", (B, K)), t("c", (B, K), "int32")]) == []
    rest = [t("boxes", (B, K, 4)), t("s", (B, K)), t("c", (B, K), "int32")]
    assert kinds([t("a1", (B, 1), "int32"), t("a2", (B, 1), "int32"), *rest]) == []  # which is the count?
    # the one named like a count is: the other [B, 1] is something else
    assert kinds([t("a1", (B, 1), "int32"), t("num_dets", (B, 1), "int32"), *rest]) == [
        ("nms4", ["num_dets", "boxes", "s", "c"])
    ]


def test_det6_needs_whole_classes():
    rows = np.array([[[1, 2, 3, 4, 0.9, 2], [0, 0, 0, 0, 0, 0]]], np.float32)
    assert kinds([t("out", (1, 2, 6))], {"out": rows}) == [("det6", ["out"])]
    assert kinds([t("out", (2, 6))], {"out": rows[0]}) == [("det6", ["out"])]
    raw = np.array([[[10, 20, 5, 5, 0.9, 0.2], [30, 40, 6, 6, 0.1, 0.8]]], np.float32)  # a 2-class raw head
    assert kinds([t("out", (1, 2, 6))], {"out": raw}) == []
    assert kinds([t("out", (1, 2, 6), "int32")], {"out": rows}) == []  # not float
    assert kinds([t("out", (1, 2, 6))]) == []  # no value to look at


def test_dets5_by_shape():
    outs = [t("dets", (B, K, 5)), t("labels", (B, K), "int64")]
    assert kinds(outs) == [("dets5", ["dets", "labels"])]
    assert kinds([*outs, t("labels2", (B, K), "int64")]) == []


def test_torchvision_outputs_of_one_image():
    """torchvision's detectors return boxes [K, 4], scores [K], labels [K] (int64) for an image."""
    outs = [t("boxes", (7, 4)), t("scores", (7,)), t("labels", (7,), "int64")]
    (lay,) = recognise(outs, lambda n: None)
    assert (lay.kind, lay.roles) == ("torchvision", {"boxes": "boxes", "scores": "scores", "labels": "labels"})
    from trtverify.compare.detlayout import images

    boxes = np.array([[0, 0, 10, 10], [5, 5, 20, 20]] + [[0, 0, 0, 0]] * 5, np.float32)
    scores = np.array([0.9, 0.4, 0, 0, 0, 0, 0], np.float32)
    (img,) = images(lay, {"boxes": boxes, "scores": scores, "labels": np.array([1, 3, 0, 0, 0, 0, 0])})
    assert len(img) == 2 and img.classes.tolist() == [1, 3]  # a score of 0 is no detection
    # two float [K] beside the boxes, neither named like a class: which is which is a guess
    assert kinds([t("boxes", (7, 4)), t("a", (7,)), t("b", (7,))], {"a": np.zeros(7), "b": np.zeros(7)}) == []


def test_batch_index_rows_of_yolov7_end2end():
    from trtverify.compare.detlayout import images, paired_images

    rows = np.array([[0, 1, 1, 9, 9, 2, 0.8], [2, 3, 3, 8, 8, 0, 0.6], [2, 0, 0, 4, 4, 1, 0.3]], np.float32)
    (lay,) = recognise([t("output", (3, 7))], {"output": rows}.get)
    assert (lay.kind, lay.tensors) == ("batch7", ["output"])
    got = images(lay, {"output": rows})
    assert [len(b) for b in got] == [1, 0, 2] and got[2].scores.tolist() == pytest.approx([0.6, 0.3])
    assert got[0].boxes.tolist() == [[1, 1, 9, 9]] and got[0].classes.tolist() == [2]
    # the candidate found nothing in image 2: both sides still have three images, the last empty on one
    ref, cand = paired_images(lay, {"output": rows}, lay, {"output": rows[:1]})
    assert [len(b) for b in ref] == [1, 0, 2] and [len(b) for b in cand] == [1, 0, 0]
    # a fractional batch index is not this layout, nor is what a Softmax makes (a 7-class classifier's output)
    assert kinds([t("output", (3, 7))], {"output": rows + np.float32(0.5)}) == []
    assert kinds([t("output", (3, 7), op_type="Softmax")], {"output": rows}) == []
    assert kinds([t("output", (3, 7), op_type="Concat")], {"output": rows}) == [("batch7", ["output"])]
