"""The detection matcher on hand-made cases with known answers: boxes matched one to one by class and IoU, never
index by index."""

from __future__ import annotations

import math

import numpy as np
import pytest

from trtverify.compare.detections import Boxes, DetectionError, DetectionStats, iou_matrix, match, valid_rows
from trtverify.compare.detlayout import Layout, images
from trtverify.compare.metrics import compare


def boxes(rows: list[tuple[float, float, float, float, float, int]]) -> Boxes:
    a = np.asarray(rows, dtype=np.float64).reshape(-1, 6)
    return Boxes.of(a[:, :4], a[:, 4], a[:, 5])


REF = [
    (10, 10, 50, 50, 0.9, 0),
    (60, 10, 100, 50, 0.7, 1),
    (10, 60, 50, 100, 0.7, 1),  # the same score as the row before
    (60, 60, 100, 100, 0.2, 2),
]


def test_iou_known_values():
    got = iou_matrix(np.array([[0, 0, 2, 2]]), np.array([[1, 1, 3, 3], [0, 0, 2, 2], [2, 2, 4, 4], [0, 0, 1, 2]]))
    assert got[0] == pytest.approx([1 / 7, 1.0, 0.0, 0.5])
    # no area on either side: equal boxes are at 1, others at 0; a NaN box at NaN
    assert iou_matrix(np.array([[1, 1, 1, 1]]), np.array([[1, 1, 1, 1], [2, 2, 2, 2]]))[0].tolist() == [1.0, 0.0]
    assert math.isnan(iou_matrix(np.array([[0, 0, 1, 1]]), np.array([[0, 0, np.nan, 1]]))[0, 0])


def test_reordered_equal_scores_match_perfectly():
    """FP16 swaps two boxes of equal score: index by index they differ, box to box nothing changed."""
    cand = [REF[i] for i in (0, 2, 1, 3)]
    assert compare(np.asarray(REF), np.asarray(cand)).metrics["rel_l2"] > 0.3  # what an elementwise comparison reads
    m = match(boxes(REF), boxes(cand))
    assert (m.matched, m.fraction, m.class_changes) == (4, 1.0, 0)
    assert sorted(m.pairs) == [(0, 0, 1.0), (1, 2, 1.0), (2, 1, 1.0), (3, 3, 1.0)]
    stats = DetectionStats()
    stats.add(0, [boxes(REF)], [boxes(cand)])
    assert stats.metrics() == {
        "matched_fraction": 1.0,
        "matched_by_score": 1.0,
        "mean_iou": 1.0,
        "mean_iou_by_score": 1.0,
        "min_iou": 1.0,
        "max_score_change": 0.0,
        "count_diff_max": 0.0,
        "count_diff_total": 0.0,
    }


def test_a_dropped_box():
    cand = [REF[0], REF[2], REF[3]]  # the 0.7 box of class 1 at (60, 10) is gone
    stats = DetectionStats()
    stats.add(0, [boxes(REF)], [boxes(cand)])
    m = stats.metrics()
    assert (stats.matched, stats.reference_boxes, stats.candidate_boxes) == (3, 4, 3)
    assert m["matched_fraction"] == pytest.approx(3 / 4)
    assert m["matched_by_score"] == pytest.approx((0.9 + 0.7 + 0.2) / (0.9 + 0.7 + 0.7 + 0.2))
    assert (m["count_diff_max"], m["count_diff_total"]) == (1.0, 1.0)
    assert stats.unmatched_score_max == pytest.approx(0.7)
    assert stats.worst == (0.75, 0, 0)


def test_a_class_flip_is_no_match():
    cand = [REF[0], REF[1], REF[2], (60, 60, 100, 100, 0.2, 0)]  # the last box, same place, another class
    got = match(boxes(REF), boxes(cand))
    assert (got.matched, got.class_changes) == (3, 1)
    assert got.fraction == pytest.approx(3 / 5)  # 4 + 4 boxes, 3 matched: the union holds 5


def test_empty_on_both_sides_and_on_one():
    stats = DetectionStats()
    stats.add(0, [boxes([]), boxes([])], [boxes([]), boxes([])])
    assert stats.metrics()["matched_fraction"] == 1.0 and stats.mean_iou == 1.0 and stats.images == 2
    one = DetectionStats()
    one.add(0, [boxes(REF[:2])], [boxes([])])
    assert (one.matched_fraction, one.matched_by_score, one.mean_iou, one.count_diff_max) == (0.0, 0.0, 0.0, 2)


def test_iou_threshold_score_changes_and_greedy_order():
    ref = [(0, 0, 10, 10, 0.9, 0), (2, 0, 12, 10, 0.5, 0)]  # two reference boxes at IoU 8/12 with each other
    cand = [(1, 0, 11, 10, 0.8, 0)]  # one candidate between them: IoU 9/11 with each
    got = match(boxes(ref), boxes(cand))
    assert got.pairs == [(0, 0, pytest.approx(9 / 11))]  # to the higher-scoring reference box
    assert got.score_changes == [pytest.approx(0.1)]
    shifted = [(6, 0, 16, 10, 0.9, 0)]  # IoU 4/16 with the first: below 0.5, no match
    assert match(boxes(ref[:1]), boxes(shifted)).matched == 0
    assert match(boxes(ref[:1]), boxes(shifted), iou=0.25).matched == 1


def test_nonfinite_candidate_boxes_match_nothing():
    cand = [REF[0], (60, 10, np.nan, 50, 0.7, 1), REF[2], REF[3]]
    stats = DetectionStats()
    stats.add(0, [boxes(REF)], [boxes(cand)])
    assert (stats.matched, stats.nonfinite) == (3, 1)


def test_counts_over_images():
    stats = DetectionStats()
    stats.add(0, [boxes(REF), boxes(REF[:1])], [boxes(REF[:2]), boxes(REF[:1])])
    stats.add(1, [boxes([])], [boxes(REF[:1])])
    assert (stats.images, stats.count_diff_max, stats.count_diff_total) == (3, 2, 3)
    with pytest.raises(DetectionError, match="2 images in the reference, 1 in the candidate"):
        stats.add(2, [boxes([]), boxes([])], [boxes([])])


def test_padding_rows_wherever_they_sit():
    assert valid_rows(np.array([0.9, 0.0, 0.5, 0.0])).tolist() == [0, 2]
    assert valid_rows(np.array([0.9, 0.8, 0.0]), np.array([1, -1, -1])).tolist() == [0]
    assert valid_rows(np.array([np.nan, 0.0])).tolist() == [0]  # a NaN score is a box, not padding


def test_layouts_read_padding_and_counts():
    det = np.zeros((2, 5, 6), np.float32)
    det[0, :2] = [REF[0], REF[1]]
    det[1, 0] = REF[3]
    per = images(Layout("det6", {"detections": "d"}, ""), {"d": det})
    assert [len(b) for b in per] == [2, 1] and per[1].classes.tolist() == [2]
    # [K, 6]: one image
    assert [len(b) for b in images(Layout("det6", {"detections": "d"}, ""), {"d": det[0]})] == [2]
    # the count decides; what is beyond it is not read, whatever it holds
    nms4 = Layout("nms4", {"count": "n", "boxes": "b", "scores": "s", "classes": "c"}, "")
    b = np.full((1, 4, 4), 7.0, np.float32)
    s = np.array([[0.9, 0.8, 0.7, 0.6]], np.float32)
    c = np.array([[0, 1, 2, 3]], np.int32)
    assert len(images(nms4, {"n": np.array([[2]], np.int32), "b": b, "s": s, "c": c})[0]) == 2
    # no count: score <= 0 or class < 0 is padding
    no_count = Layout("nms4", {"count": None, "boxes": "b", "scores": "s", "classes": "c"}, "")
    s0 = np.array([[0.9, 0.0, 0.7, 0.6]], np.float32)
    c0 = np.array([[0, 1, 2, -1]], np.int32)
    assert images(no_count, {"b": b, "s": s0, "c": c0})[0].classes.tolist() == [0, 2]
    # mmdeploy: dets [B, K, 5] and labels, padding label -1
    dets5 = Layout("dets5", {"dets": "d", "labels": "l"}, "")
    d = np.concatenate([b, s[..., None]], axis=2)
    assert images(dets5, {"d": d, "l": c0})[0].scores.tolist() == pytest.approx([0.9, 0.8, 0.7])
    with pytest.raises(DetectionError, match="do not pair"):
        images(nms4, {"n": np.array([[2]]), "b": b, "s": s[:, :3], "c": c})
