"""The built-in detection layouts (rows, nms, yolo, yolov5, mmdeploy, torchvision, batch_rows) on hand-made outputs
with known answers: NMS ties, thresholds at equality, truncation, padding, class mapping, normalised boxes, and the
errors for wrong shapes."""

from __future__ import annotations

import numpy as np
import pytest

from trtverify.config.postprocess import Postprocess
from trtverify.tasks.detlayouts import DetectionLayout, greedy_nms
from trtverify.util.errors import UsageError

CATS = [1, 3, 18]  # category ids with gaps: index k -> k-th id


def layout(**pp) -> DetectionLayout:
    return DetectionLayout(Postprocess(**pp), CATS)


# ----------------------------------------------------------------------------- greedy NMS
def nms(boxes, scores, **kw):
    args = {"score_threshold": 0.1, "iou_threshold": 0.5, "max_detections": 100, **kw}
    return greedy_nms(np.asarray(boxes, float), np.asarray(scores, float), **args)


def test_nms_keeps_the_best_of_overlapping_boxes_per_class():
    # boxes 0 and 1 overlap with IoU 81/119 = 0.68; box 2 is apart
    boxes = [[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60]]
    scores = [[0.9, 0.0], [0.8, 0.0], [0.7, 0.0]]
    rows = nms(boxes, scores)
    np.testing.assert_array_equal(rows, [[0, 0, 10, 10, 0.9, 0], [50, 50, 60, 60, 0.7, 0]])
    # the same overlap in two classes suppresses nothing class-wise, and does across classes
    scores = [[0.9, 0.0], [0.0, 0.8], [0.7, 0.0]]
    assert nms(boxes, scores)[:, 5].tolist() == [0, 1, 0]
    assert nms(boxes, scores, class_agnostic=True)[:, 4].tolist() == [0.9, 0.7]


def test_nms_is_multi_label_a_candidate_may_keep_several_classes():
    rows = nms([[0, 0, 10, 10]], [[0.6, 0.5, 0.05]])
    assert rows[:, 4:].tolist() == [[0.6, 0], [0.5, 1]]  # 0.05 < score_threshold


def test_nms_thresholds_at_equality():
    # IoU exactly 0.5 (intersection 50, union 100) suppresses (EfficientNMS_TRT: IoU >= iou_threshold)
    boxes = [[0, 0, 10, 7.5], [0, 2.5, 10, 10]]
    inter, union = 10 * 5.0, 75 + 75 - 50.0
    assert inter / union == 0.5
    assert len(nms(boxes, [[0.9], [0.8]], iou_threshold=0.5)) == 1
    assert len(nms(boxes, [[0.9], [0.8]], iou_threshold=0.5000001)) == 2
    # a score equal to the threshold is kept
    assert nms([[0, 0, 1, 1]], [[0.25]], score_threshold=0.25)[:, 4].tolist() == [0.25]


def test_nms_ties_keep_candidate_order_then_class_order():
    boxes = [[0, 0, 10, 10], [0, 0, 10, 10], [40, 40, 50, 50]]
    scores = [[0.5, 0.5], [0.5, 0.0], [0.5, 0.0]]
    rows = nms(boxes, scores)
    # equal scores: (candidate 0, class 0), (candidate 0, class 1), then candidate 1 (suppressed by 0), candidate 2
    assert rows[:, [0, 5]].tolist() == [[0, 0], [0, 1], [40, 0]]
    # many disjoint boxes with three score values in random order (past the small sizes where any sort keeps ties in
    # order): by score, ties by candidate
    score = np.random.default_rng(0).choice([0.5, 0.6, 0.7], size=200)
    rows = nms([[20 * i, 0, 20 * i + 10, 10] for i in range(200)], score[:, None], max_detections=200)
    assert rows[:, 0].tolist() == [20.0 * i for i in sorted(range(200), key=lambda i: (-score[i], i))]


def test_nms_truncates_at_max_detections_and_may_return_nothing():
    boxes = [[10 * i, 0, 10 * i + 5, 5] for i in range(6)]
    scores = [[0.9 - 0.1 * i] for i in range(6)]
    rows = nms(boxes, scores, max_detections=4)
    assert rows[:, 4].tolist() == pytest.approx([0.9, 0.8, 0.7, 0.6])
    empty = nms(boxes, np.zeros((6, 1)))
    assert empty.shape == (0, 6) and empty.dtype == np.float64


def test_nms_boxes_without_area_never_suppress_and_corners_are_reordered():
    rows = nms([[5, 5, 5, 5], [5, 5, 5, 5]], [[0.9], [0.8]])  # empty union: IoU 0
    assert len(rows) == 2
    rows = nms([[10, 10, 0, 0], [0, 0, 10, 10]], [[0.9], [0.8]])  # the same box, corners swapped
    assert len(rows) == 1


# ------------------------------------------------------------------------------- layout nms
def nms_outputs(b: int = 2, k: int = 4, names=("num_dets", "det_boxes", "det_scores", "det_classes")) -> dict:
    count = np.array([[2], [0]], np.int32)[:b]
    boxes = np.zeros((b, k, 4), np.float32)
    boxes[0, :2] = [[1, 2, 11, 12], [20, 20, 30, 40]]
    scores = np.zeros((b, k), np.float32)
    scores[0, :2] = [0.9, 0.4]
    classes = np.zeros((b, k), np.int32)
    classes[0, :2] = [2, 0]
    boxes[0, 2:] = 99  # garbage past the count: ignored
    return dict(zip(names, (count, boxes, scores, classes)))


def test_nms_layout_reads_count_rows_and_maps_indices_to_category_ids():
    rows = layout(layout="nms").decode(nms_outputs(), (64, 64), "m")
    assert [r.shape for r in rows] == [(2, 6), (0, 6)]
    np.testing.assert_allclose(rows[0], [[1, 2, 11, 12, 0.9, 18], [20, 20, 30, 40, 0.4, 1]], rtol=1e-6)
    # classes: index k -> classes[k]
    rows = layout(layout="nms", classes=[3, 18, 1]).decode(nms_outputs(), (64, 64), "m")
    assert rows[0][:, 5].tolist() == [1, 3]


@pytest.mark.parametrize(
    "names",
    [
        ("num_dets", "det_boxes", "det_scores", "det_classes"),  # YOLO exporters
        ("num_detections", "detection_boxes", "detection_scores", "detection_classes"),  # EfficientNMS_TRT docs
        ("num_detections", "nmsed_boxes", "nmsed_scores", "nmsed_classes"),  # BatchedNMS_TRT docs
        ("a", "b", "c", "d"),  # unknown names, exactly four outputs: taken in order
    ],
)
def test_nms_layout_finds_its_outputs_by_the_usual_names(names):
    outputs = {"raw_head": np.zeros((2, 7, 5), np.float32), **nms_outputs(names=names)}
    if names[0] == "a":
        del outputs["raw_head"]
    else:  # the known names are found among other outputs, in any order
        outputs = dict(reversed(list(outputs.items())))
    rows = layout(layout="nms").decode(outputs, (64, 64), "m")
    assert rows[0][:, 4].tolist() == pytest.approx([0.9, 0.4])


def test_nms_layout_outputs_by_name_and_the_error_without_names():
    outputs = {"extra": np.zeros(3), **nms_outputs(names=("n", "b", "s", "c"))}
    with pytest.raises(UsageError, match=r"m: layout nms reads 4 outputs .* the model has 5 \(extra, n, b, s, c\).*"
                       r"postprocess.outputs: \{count: NAME, boxes: NAME"):  # fmt: skip
        layout(layout="nms").decode(outputs, (64, 64), "m")
    named = layout(layout="nms", outputs={"count": "n", "boxes": "b", "scores": "s", "classes": "c"})
    assert named.decode(outputs, (64, 64), "m")[0].shape == (2, 6)
    with pytest.raises(UsageError, match=r"postprocess.outputs names 'b2', not outputs of the model"):
        layout(layout="nms", outputs={"count": "n", "boxes": "b2", "scores": "s", "classes": "c"}).decode(
            outputs, (64, 64), "m"
        )


def test_batched_nms_float_classes_count_as_b_and_normalised_boxes():
    out = nms_outputs(names=("num_detections", "nmsed_boxes", "nmsed_scores", "nmsed_classes"))
    out["num_detections"] = out["num_detections"].reshape(2)  # [B]
    out["nmsed_classes"] = out["nmsed_classes"].astype(np.float32)  # BatchedNMS_TRT writes float classes
    out["nmsed_boxes"] = out["nmsed_boxes"] / 64  # isNormalized: fractions of the input
    rows = layout(layout="nms", normalized=True).decode(out, (64, 128), "m")  # input 64 high, 128 wide
    np.testing.assert_allclose(rows[0][0], [2, 2, 22, 12, 0.9, 18], rtol=1e-6)


def test_nms_layout_shape_errors_name_model_output_found_and_expected():
    out = nms_outputs()
    out["det_scores"] = out["det_scores"][:, :3]
    with pytest.raises(UsageError, match=r"det\.onnx: postprocess layout nms: output 'det_scores' has shape \[2, 3\], "
                       r"expected \[2, 4\]"):  # fmt: skip
        layout(layout="nms").decode(out, (64, 64), "det.onnx")
    out = nms_outputs()
    out["det_boxes"] = out["det_boxes"].reshape(2, 16)
    with pytest.raises(UsageError, match=r"output 'det_boxes' has shape \[2, 16\], expected \[B, K, 4\]"):
        layout(layout="nms").decode(out, (64, 64), "m")
    out = nms_outputs()
    out["num_dets"][0, 0] = 5
    with pytest.raises(UsageError, match=r"'num_dets' says 5 detections, but 'det_boxes' holds 4 per image"):
        layout(layout="nms").decode(out, (64, 64), "m")
    out = nms_outputs()
    out["det_classes"][0, 0] = 3  # three categories: indices 0..2
    with pytest.raises(UsageError, match=r"output 'det_classes' holds class index 3, but the dataset's categories "
                       r"map only indices 0..2; give postprocess.classes"):  # fmt: skip
        layout(layout="nms").decode(out, (64, 64), "m")


# -------------------------------------------------------------------------- layout mmdeploy
def test_mmdeploy_layout_drops_padding_labels():
    dets = np.zeros((1, 3, 5), np.float32)
    dets[0, :2] = [[1, 1, 5, 5, 0.8], [2, 2, 8, 9, 0.3]]
    labels = np.array([[1, 0, -1]], np.int64)
    rows = layout(layout="mmdeploy").decode({"dets": dets, "labels": labels}, (16, 16), "m")
    np.testing.assert_allclose(rows[0], [[1, 1, 5, 5, 0.8, 3], [2, 2, 8, 9, 0.3, 1]], rtol=1e-6)
    with pytest.raises(UsageError, match=r"output 'labels' has shape \[1, 2\], expected \[1, 3\]"):
        layout(layout="mmdeploy").decode({"dets": dets, "labels": labels[:, :2]}, (16, 16), "m")


# ------------------------------------------------------------------------------ layout yolo
def yolo_head() -> np.ndarray:
    """[1, 4 + 3, 4]: two overlapping candidates of class 2, one of class 0, one below every threshold."""
    head = np.zeros((1, 7, 4), np.float32)
    head[0, :4] = np.array([[10, 10, 8, 8], [11, 10, 8, 8], [40, 40, 10, 20], [5, 5, 2, 2]], np.float32).T
    head[0, 4:, 0] = [0.0, 0.0, 0.9]
    head[0, 4:, 1] = [0.0, 0.0, 0.8]
    head[0, 4:, 2] = [0.6, 0.0, 0.0]
    head[0, 4:, 3] = [0.0005, 0.0, 0.0]
    return head


def test_yolo_layout_decodes_centre_size_and_runs_class_wise_nms():
    rows = layout(layout="yolo").decode({"output0": yolo_head()}, (64, 64), "m")[0]
    # defaults: score >= 0.001, IoU >= 0.7 suppresses: candidates 0 and 1 overlap with IoU 56/72 = 0.78
    np.testing.assert_allclose(rows, [[6, 6, 14, 14, 0.9, 18], [35, 30, 45, 50, 0.6, 1]], rtol=1e-6)
    rows = layout(layout="yolo", iou_threshold=0.8, score_threshold=0.0001).decode({"o": yolo_head()}, (64, 64), "m")
    assert rows[0][:, 4].tolist() == pytest.approx([0.9, 0.8, 0.6, 0.0005])
    rows = layout(layout="yolo", max_detections=1).decode({"o": yolo_head()}, (64, 64), "m")
    assert len(rows[0]) == 1


def test_yolo_layout_shape_errors_say_what_to_do():
    head = yolo_head()
    with pytest.raises(UsageError, match=r"output 'o' has shape \[1, 4, 7\], expected \[B, 7, N\] .*; it looks like "
                       r"\[B, N, 4 \+ C\]"):  # fmt: skip
        layout(layout="yolo").decode({"o": head.transpose(0, 2, 1).copy()}, (64, 64), "m")
    wide = np.zeros((1, 84, 10), np.float32)
    with pytest.raises(UsageError, match=r"the head has 80 classes, the dataset's categories give 3: give "
                       r"postprocess.classes"):  # fmt: skip
        layout(layout="yolo").decode({"o": wide}, (64, 64), "m")
    # with 80 classes mapped (here onto the three ids), the head decodes
    rows = layout(layout="yolo", classes=[CATS[i % 3] for i in range(80)]).decode({"o": wide}, (64, 64), "m")
    assert rows[0].shape == (0, 6)


# ------------------------------------------------------------------------- rows and classes
def test_rows_layout_keeps_category_ids_unless_classes_maps_them():
    raw = np.array([[[1, 2, 3, 4, 0.5, 3]]], np.float32)
    assert layout().decode({"dets": raw}, (8, 8), "m")[0][0, 5] == 3
    assert layout(classes=[1, 18, 3, 3]).decode({"dets": raw}, (8, 8), "m")[0][0, 5] == 3  # index 3 -> id 3
    raw[0, 0, 5] = 1
    assert layout(classes=[1, 18, 3, 3]).decode({"dets": raw}, (8, 8), "m")[0][0, 5] == 18
    with pytest.raises(UsageError, match=r"output 'dets' has shape \[1, 1, 5\], expected \[B, K, 6\]"):
        layout().decode({"dets": raw[..., :5]}, (8, 8), "m")


def test_classes_naming_ids_the_dataset_lacks_fail_before_any_model_runs():
    with pytest.raises(UsageError, match=r"postprocess.classes names category ids \[2, 7\] that the dataset does not "
                       r"have \(its ids: 1, 3, 18\)"):  # fmt: skip
        layout(layout="nms", classes=[1, 2, 7])


def test_non_finite_class_index_gives_a_non_finite_row_for_the_accumulator_to_count():
    out = nms_outputs()
    out["det_classes"] = out["det_classes"].astype(np.float32)
    out["det_classes"][0, 1] = np.nan
    rows = layout(layout="nms").decode(out, (64, 64), "m")
    assert np.isnan(rows[0][1, 5]) and rows[0][0, 5] == 18


# ---------------------------------------------------------------- rows [K, 6], torchvision, batch_rows
def test_rows_of_one_image_and_torchvision_outputs():
    one = np.array([[1, 2, 3, 4, 0.9, 18], [5, 6, 7, 8, 0.5, 3]], np.float32)
    (got,) = layout().decode({"dets": one}, (10, 10), "m", batch=1)
    np.testing.assert_array_equal(got, one)
    with pytest.raises(UsageError, match=r"'dets' \[2, 6\] holds one image's detections, but 4 images were fed"):
        layout().decode({"dets": one}, (10, 10), "m", batch=4)
    out = {"boxes": one[:, :4], "scores": one[:, 4], "labels": one[:, 5].astype(np.int64)}
    (got,) = layout(layout="torchvision").decode(out, (10, 10), "m", batch=1)
    np.testing.assert_array_equal(got, one)  # labels are category ids as they are
    batched = {k: np.stack([v, v]) for k, v in out.items()}
    assert len(layout(layout="torchvision").decode(batched, (10, 10), "m", batch=2)) == 2
    with pytest.raises(UsageError, match=r"output 'scores' has shape \[3\], expected \[2\]"):
        layout(layout="torchvision").decode({**out, "scores": np.zeros(3)}, (10, 10), "m", batch=1)


def test_batch_rows_split_by_batch_index_with_class_indices():
    rows = np.array([[1, 0, 0, 5, 5, 2, 0.7], [1, 1, 1, 6, 6, 0, 0.6]], np.float32)
    got = layout(layout="batch_rows").decode({"output": rows}, (10, 10), "m", batch=3)
    assert [len(g) for g in got] == [0, 2, 0]  # image 0 and 2: nothing found
    assert got[1].tolist() == [[0, 0, 5, 5, pytest.approx(0.7), 18], [1, 1, 6, 6, pytest.approx(0.6), 1]]
    with pytest.raises(UsageError, match="batch index 1 in a batch of 1 images; is column 0 the batch index"):
        layout(layout="batch_rows").decode({"output": rows}, (10, 10), "m", batch=1)


def test_yolov5_head_scores_objectness_times_class():
    # [B, N, 5 + C]: candidate 0 objectness 0.5, class scores 0.9 and 0.1: scores 0.45 and 0.05
    head = np.array([[[5, 5, 4, 4, 0.5, 0.9, 0.1, 0.0], [50, 50, 4, 4, 0.1, 0.5, 0.5, 0.5]]], np.float32)
    (got,) = layout(layout="yolov5", score_threshold=0.04).decode({"output0": head}, (64, 64), "m", batch=1)
    assert got[:, 4].tolist() == pytest.approx([0.45, 0.05, 0.05, 0.05, 0.05])
    assert got[0, :4].tolist() == [3, 3, 7, 7] and got[0, 5] == 1
