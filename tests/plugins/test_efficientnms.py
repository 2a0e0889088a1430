"""EfficientNMS_TRT reference: hand-worked cases (see the box layout in conftest.py) and ONNX Runtime's NMS."""

import numpy as np
import pytest

from tests.plugins.conftest import ort_nms, random_detections
from trtverify.plugins.attrs import PluginError
from trtverify.plugins.efficientnms import efficient_nms

ATTRS = dict(
    score_threshold=0.25,
    iou_threshold=0.5,
    max_output_boxes=6,
    background_class=-1,
    score_activation=0,
    box_coding=0,
    plugin_version="1",  # extras TensorRT ignores
    plugin_namespace="",
)


def nms(boxes, scores, anchors=None, **changes):
    return efficient_nms(boxes, scores, anchors, **{**ATTRS, **changes})


def rows(out, image=0):
    """(class, score, box) per valid detection of one image."""
    num, boxes, scores, classes = out
    return [
        (int(classes[image, i]), round(float(scores[image, i]), 6), boxes[image, i].tolist())
        for i in range(num[image, 0])
    ]


def test_per_class_nms_sorted_by_score(four):
    # candidates >= 0.25: (b3,c1) .95, (b0,c0) .9, (b1,c0) .8, (b1,c1) .7, (b2,c0) .6, (b3,c0) .3
    # class 1: b3 kept, b1 dropped (IoU .68); class 0: b0 kept, b1 dropped, b2 kept, b3 dropped (IoU 1)
    out = nms(*four)
    assert rows(out) == [(1, 0.95, [0, 0, 10, 10]), (0, 0.9, [0, 0, 10, 10]), (0, 0.6, [20, 20, 30, 30])]
    num, boxes, scores, classes = out
    assert num.dtype == np.int32 and num.shape == (1, 1)
    assert classes.dtype == np.int32 and boxes.shape == (1, 6, 4) and scores.shape == (1, 6)


def test_class_agnostic_drops_across_classes(four):
    # (b3,c1) .95 kept; b0 (IoU 1) and b1 (IoU .68) of any class dropped; b2 kept
    assert rows(nms(*four, class_agnostic=1)) == [(1, 0.95, [0, 0, 10, 10]), (0, 0.6, [20, 20, 30, 30])]


def test_padding_is_zeros(four):
    num, boxes, scores, classes = nms(*four)
    assert num[0, 0] == 3
    assert not boxes[0, 3:].any() and not scores[0, 3:].any() and not classes[0, 3:].any()


def test_truncated_at_max_output_boxes(four):
    assert rows(nms(*four, max_output_boxes=2)) == [(1, 0.95, [0, 0, 10, 10]), (0, 0.9, [0, 0, 10, 10])]


def test_background_class_is_never_a_candidate(four):
    assert rows(nms(*four, background_class=1)) == [(0, 0.9, [0, 0, 10, 10]), (0, 0.6, [20, 20, 30, 30])]


def test_score_equal_to_threshold_is_kept(four):
    # score >= threshold (EfficientNMSFilter's gte): b2's 0.6 stays at a threshold of 0.6
    assert [r[1] for r in rows(nms(*four, score_threshold=0.6))] == [0.95, 0.9, 0.6]
    assert [r[1] for r in rows(nms(*four, score_threshold=0.61))] == [0.95, 0.9]


def test_iou_equal_to_threshold_suppresses():
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 5]]], dtype=np.float32)  # IoU 50 / 100 = 0.5 exactly
    scores = np.array([[[0.9], [0.8]]], dtype=np.float32)
    assert nms(boxes, scores, iou_threshold=0.5)[0][0, 0] == 1
    assert nms(boxes, scores, iou_threshold=0.51)[0][0, 0] == 2


def test_empty_result():
    boxes = np.array([[[0, 0, 1, 1]]], dtype=np.float32)
    num, out_boxes, scores, classes = nms(boxes, np.array([[[0.1, 0.2]]], dtype=np.float32))
    assert num.tolist() == [[0]] and not out_boxes.any() and not scores.any() and not classes.any()


def test_ties_in_anchor_then_class_order():
    # (a0, c1) and (a1, c0) both score 0.5: flat index a*C + c puts (a0, c1) first; disjoint boxes keep both
    boxes = np.array([[[0, 0, 1, 1], [5, 5, 6, 6]]], dtype=np.float32)
    scores = np.array([[[0.1, 0.5], [0.5, 0.1]]], dtype=np.float32)
    assert rows(nms(boxes, scores)) == [(1, 0.5, [0, 0, 1, 1]), (0, 0.5, [5, 5, 6, 6])]
    # overlapping boxes of one class with equal scores: the lower anchor is kept
    boxes = np.array([[[1, 1, 11, 11], [0, 0, 10, 10]]], dtype=np.float32)
    scores = np.array([[[0.5], [0.5]]], dtype=np.float32)
    assert rows(nms(boxes, scores)) == [(0, 0.5, [1, 1, 11, 11])]


def test_score_activation_thresholds_logits_and_outputs_sigmoid():
    boxes = np.array([[[0, 0, 1, 1], [5, 5, 6, 6], [9, 9, 10, 10]]], dtype=np.float32)
    logits = np.array([[[2.0], [-1.0], [0.0]]], dtype=np.float32)
    # threshold 0.5 -> logit 0: logits 2 and 0 pass; outputs sigmoid(2) = 0.880797, sigmoid(0) = 0.5
    assert rows(nms(boxes, logits, score_threshold=0.5, score_activation=1)) == [
        (0, 0.880797, [0, 0, 1, 1]),
        (0, 0.5, [9, 9, 10, 10]),
    ]
    # without activation the logits are scores: 2 and 0 pass... and 0 < 0.5 does not
    assert [r[1] for r in rows(nms(boxes, logits, score_threshold=0.5))] == [2.0]


def test_box_coding_center_size_outputs_corners():
    # [cx, cy, w, h]: [5, 5, 10, 10] -> [0, 0, 10, 10]; [6, 6, 10, 10] -> [1, 1, 11, 11] (IoU .68: dropped)
    boxes = np.array([[[5, 5, 10, 10], [6, 6, 10, 10], [25, 25, 10, 4]]], dtype=np.float32)
    scores = np.array([[[0.9], [0.8], [0.7]]], dtype=np.float32)
    assert rows(nms(boxes, scores, box_coding=1)) == [(0, 0.9, [0, 0, 10, 10]), (0, 0.7, [20, 23, 30, 27])]


def test_corner_boxes_are_output_as_given_but_compared_reordered():
    # b1 is b0 with its corners swapped: IoU 1 (reordered for IoU) so it is dropped, and b0 is output unchanged
    boxes = np.array([[[10, 10, 0, 0], [0, 0, 10, 10]]], dtype=np.float32)
    scores = np.array([[[0.9], [0.8]]], dtype=np.float32)
    assert rows(nms(boxes, scores)) == [(0, 0.9, [10, 10, 0, 0])]


def test_boxes_per_class():
    # [B, N, C, 4]: each (anchor, class) has its own box
    boxes = np.array([[[[0, 0, 10, 10], [50, 50, 60, 60]], [[40, 40, 50, 50], [51, 51, 61, 61]]]], dtype=np.float32)
    scores = np.array([[[0.9, 0.8], [0.7, 0.6]]], dtype=np.float32)
    # class 1: (a1) [51..61] has IoU .68 with (a0) [50..60]: dropped
    expected = [(0, 0.9, [0, 0, 10, 10]), (1, 0.8, [50, 50, 60, 60]), (0, 0.7, [40, 40, 50, 50])]
    assert rows(nms(boxes, scores)) == expected
    assert rows(nms(boxes[:, :, :1], scores))[1] == (1, 0.8, [0, 0, 10, 10])  # [B, N, 1, 4]: shared


def test_batch_of_two_with_different_counts(four):
    boxes = np.concatenate([four[0], four[0]])
    scores = np.concatenate([four[1], four[1] * np.float32(0.27)])  # image 1: only 0.95 * 0.27 passes
    num, out_boxes, out_scores, classes = out = nms(boxes, scores)
    assert num.tolist() == [[3], [1]]
    assert rows(out, 1) == [(1, round(float(np.float32(0.95) * np.float32(0.27)), 6), [0, 0, 10, 10])]
    assert not out_boxes[1, 1:].any() and not out_scores[1, 1:].any()


def test_anchor_decoding():
    # corners: deltas are added to the anchor (both with their corners ordered first)
    anchors = np.array([[[0, 0, 10, 10], [20, 20, 30, 30]]], dtype=np.float32)
    deltas = np.array([[[1, 1, 1, 1], [1, 0, -1, 0]]], dtype=np.float32)  # second: x corners swapped to -1, 1
    scores = np.array([[[0.9], [0.8]]], dtype=np.float32)
    assert rows(nms(deltas, scores, anchors)) == [(0, 0.9, [1, 1, 11, 11]), (0, 0.8, [19, 20, 31, 30])]
    # centre-size: cx = dx * aw + acx, w = aw * exp(dw)
    anchors = np.array([[[5, 5, 10, 10]]], dtype=np.float32)
    deltas = np.array([[[0.1, -0.2, np.log(2), 0]]], dtype=np.float32)
    num, out_boxes, _, _ = nms(deltas, np.array([[[0.9]]], dtype=np.float32), anchors, box_coding=1)
    np.testing.assert_allclose(out_boxes[0, 0], [-4, -2, 16, 8], atol=1e-5)


def test_anchors_per_image():
    deltas = np.zeros((2, 1, 4), dtype=np.float32)
    anchors = np.array([[[0, 0, 1, 1]], [[5, 5, 6, 6]]], dtype=np.float32)
    out = nms(deltas, np.full((2, 1, 1), 0.9, dtype=np.float32), anchors)
    assert out[1][:, 0].tolist() == [[0, 0, 1, 1], [5, 5, 6, 6]]


def test_dense_path_below_0_007_outputs_sentinel_scores():
    # Under a threshold of 0.007 the plugin scores every element, those under the threshold -32768: they sort last
    # and are output when fewer real detections than max_output_boxes survive.
    boxes = np.array([[[0, 0, 1, 1], [5, 5, 6, 6], [9, 9, 10, 10]]], dtype=np.float32)
    scores = np.array([[[0.9], [0.0005], [0.0001]]], dtype=np.float32)
    assert [r[1] for r in rows(nms(boxes, scores, score_threshold=0.001))] == [0.9, -32768.0, -32768.0]
    assert [r[1] for r in rows(nms(boxes, scores, score_threshold=0.01))] == [0.9]
    # with score_activation the sentinel goes through the sigmoid: 0
    logits = np.log(scores / (1 - scores))
    got = rows(nms(boxes, logits, score_threshold=0.001, score_activation=1))
    assert [r[1] for r in got] == [0.9, 0.0, 0.0]


def test_only_the_5000_best_candidates_enter_nms():
    # 5001 disjoint boxes, all above threshold: the lowest-scoring one is never considered
    count = 5001
    x = np.arange(count, dtype=np.float32)[:, None] * 2
    boxes = np.concatenate([x, np.zeros_like(x), x + 1, np.ones_like(x)], axis=1)[None]
    scores = np.linspace(1, 0.5, count, dtype=np.float32)[None, :, None]
    num, out_boxes, _, _ = nms(boxes, scores, max_output_boxes=count)
    assert num[0, 0] == 5000 and out_boxes[0, 4999, 0] == 2 * 4999 and not out_boxes[0, 5000].any()


def test_float16_in_float16_out(four):
    num, boxes, scores, classes = nms(four[0].astype(np.float16), four[1].astype(np.float16))
    assert boxes.dtype == np.float16 and scores.dtype == np.float16 and classes.dtype == np.int32
    assert num[0, 0] == 3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matches_onnx_runtime_nms(seed):
    boxes, scores = random_detections(seed, batch=2, count=300, classes=4)
    common = dict(max_output_boxes=2000, iou_threshold=0.45, score_threshold=0.2505)  # no score equals it
    num, out_boxes, out_scores, classes = nms(boxes, scores, **common)
    anchor_of = {(b, tuple(box)): i for b in range(2) for i, box in enumerate(boxes[b].tolist())}
    ours = {
        (b, int(classes[b, i]), anchor_of[b, tuple(out_boxes[b, i].tolist())])
        for b in range(2)
        for i in range(num[b, 0])
    }
    assert ours == ort_nms(boxes, scores, 0.45, 0.2505)
    assert all(np.all(np.diff(out_scores[b, : num[b, 0]]) <= 0) for b in range(2))
    # class-agnostic NMS = one class holding each anchor's best score (every box overlaps itself fully)
    num, out_boxes, _, classes = nms(boxes, scores, class_agnostic=1, **common)
    kept = {(b, anchor_of[b, tuple(out_boxes[b, i].tolist())]) for b in range(2) for i in range(num[b, 0])}
    best = scores.max(axis=2, keepdims=True)
    assert kept == {(b, n) for b, _, n in ort_nms(boxes, best, 0.45, 0.2505)}
    assert all(
        classes[b, i] == scores[b, anchor_of[b, tuple(out_boxes[b, i].tolist())]].argmax()
        for b in range(2)
        for i in range(num[b, 0])
    )


def test_bad_shapes_name_the_plugin():
    with pytest.raises(PluginError, match="EfficientNMS_TRT: boxes"):
        nms(np.zeros((1, 3, 4), np.float32), np.zeros((1, 4, 2), np.float32))
    with pytest.raises(PluginError, match="box_coding"):
        nms(np.zeros((1, 3, 4), np.float32), np.zeros((1, 3, 2), np.float32), box_coding=2)
