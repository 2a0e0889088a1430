"""BatchedNMS_TRT / BatchedNMSDynamic_TRT reference: hand-worked cases (box layout in conftest.py) and ORT's NMS."""

import numpy as np
import pytest

from tests.plugins.conftest import ort_nms, random_detections
from trtverify.plugins.attrs import PluginError
from trtverify.plugins.batchednms import batched_nms, batched_nms_dynamic

ATTRS = dict(
    shareLocation=1,
    backgroundLabelId=-1,
    numClasses=2,
    topK=4,
    keepTopK=4,
    scoreThreshold=0.25,
    iouThreshold=0.5,
    isNormalized=1,
    clipBoxes=0,
    plugin_version="1",
)


def nms(boxes, scores, **changes):
    if boxes.ndim == 3:
        boxes = boxes[:, :, None]
    return batched_nms_dynamic(boxes, scores, **{**ATTRS, **changes})


def rows(out, image=0):
    num, boxes, scores, classes = out
    return [
        (int(classes[image, i]), round(float(scores[image, i]), 6), boxes[image, i].tolist())
        for i in range(int(num[image, 0]))
    ]


def test_per_class_nms_then_sorted_per_image(four):
    # class 0 (> 0.25): b0 .9 kept, b1 .8 dropped (IoU .68), b2 .6 kept, b3 .3 dropped (IoU 1); class 1: b3 .95, b1 .7
    # dropped. Per image by score: (c1, b3), (c0, b0), (c0, b2), then padding
    num, boxes, scores, classes = out = nms(*four)
    assert rows(out) == [(1, 0.95, [0, 0, 10, 10]), (0, 0.9, [0, 0, 10, 10]), (0, 0.6, [20, 20, 30, 30])]
    assert num.dtype == np.int32 and num.shape == (1, 1)
    assert classes.dtype == np.float32 and scores.dtype == np.float32 and boxes.shape == (1, 4, 4)
    # padding: class -1, score 0, box 0
    assert classes[0, 3] == -1 and scores[0, 3] == 0 and not boxes[0, 3].any()


def test_static_plugin_gives_num_detections_per_image_only(four):
    num, *_ = batched_nms(four[0][:, :, None], four[1], **ATTRS)
    assert num.shape == (1,) and num.tolist() == [3]


def test_keep_top_k_truncates(four):
    assert [r[1] for r in rows(nms(*four, keepTopK=2))] == [0.95, 0.9]


def test_top_k_limits_each_class_before_nms(four):
    # topK 2: class 0 keeps its two best (b0 .9, b1 .8) before NMS, so b2 .6 never enters
    assert [r[1] for r in rows(nms(*four, topK=2, keepTopK=2))] == [0.95, 0.9]
    assert [r[1] for r in rows(nms(*four, topK=3, keepTopK=3))] == [0.95, 0.9, 0.6]


def test_keep_top_k_above_top_k_gives_only_padding(four):
    num, boxes, scores, classes = nms(*four, topK=2, keepTopK=3)
    assert num.tolist() == [[0]] and (classes == -1).all() and not scores.any() and not boxes.any()


def test_background_label(four):
    assert rows(nms(*four, backgroundLabelId=0)) == [(1, 0.95, [0, 0, 10, 10])]


def test_score_threshold_is_strict(four):
    assert [r[1] for r in rows(nms(*four, scoreThreshold=0.6))] == [0.95, 0.9]
    assert [r[1] for r in rows(nms(*four, scoreThreshold=0.59))] == [0.95, 0.9, 0.6]


def test_empty_result(four):
    num, boxes, scores, classes = nms(four[0], four[1] * np.float32(0.1))
    assert num.tolist() == [[0]] and (classes == -1).all() and not scores.any() and not boxes.any()


def test_iou_semantics():
    # [0,0,10,10] and [0,0,10,5]: normalised IoU 50 / 100 = 0.5 (not > 0.5: kept);
    # Caffe (unnormalised): (11 * 6) / (121 + 66 - 66) = 0.545 (dropped);
    # unnormalised without Caffe: the intersection has no +1 but box sizes do: 50 / (121 + 66 - 50) = 0.365 (kept)
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 5]]], dtype=np.float32)
    scores = np.array([[[0.9], [0.8]]], dtype=np.float32)
    one = dict(numClasses=1, topK=2, keepTopK=2)
    assert nms(boxes, scores, **one)[0][0, 0] == 2
    assert nms(boxes, scores, **one, isNormalized=0)[0][0, 0] == 1
    assert nms(boxes, scores, **one, isNormalized=0, caffeSemantics=0)[0][0, 0] == 2
    assert nms(boxes, scores, **one, isNormalized=0, caffeSemantics=0, iouThreshold=0.36)[0][0, 0] == 1
    # Caffe semantics on disjoint boxes: their [0,0,0,0] intersection counts 1 x 1: 1 / (4 + 4 - 1) = 0.14
    boxes = np.array([[[0, 0, 1, 1], [5, 5, 6, 6]]], dtype=np.float32)
    assert nms(boxes, scores, **one, isNormalized=0, iouThreshold=0.14)[0][0, 0] == 1
    assert nms(boxes, scores, **one, isNormalized=0, iouThreshold=0.15)[0][0, 0] == 2


def test_clip_boxes_clamps_to_unit_range_whatever_is_normalized():
    boxes = np.array([[[-0.5, 0.2, 1.5, 0.8]]], dtype=np.float32)
    scores = np.array([[[0.9]]], dtype=np.float32)
    one = dict(numClasses=1, topK=1, keepTopK=1)
    assert rows(nms(boxes, scores, **one, clipBoxes=1))[0][2] == pytest.approx([0, 0.2, 1, 0.8])
    assert rows(nms(boxes, scores, **one, clipBoxes=1, isNormalized=0))[0][2] == pytest.approx([0, 0.2, 1, 0.8])
    assert rows(nms(boxes, scores, **one, clipBoxes=0))[0][2] == pytest.approx([-0.5, 0.2, 1.5, 0.8])


def test_ties_in_class_then_rank_order():
    boxes = np.array([[[0, 0, 1, 1], [5, 5, 6, 6]]], dtype=np.float32)
    scores = np.array([[[0.5, 0.5], [0.5, 0.5]]], dtype=np.float32)
    # equal scores: class 0 slots first, each class in anchor order
    got = rows(nms(boxes, scores, topK=2, keepTopK=2, isNormalized=1))
    assert [(c, b) for c, _, b in got] == [(0, [0, 0, 1, 1]), (0, [5, 5, 6, 6])]


def test_boxes_per_class():
    boxes = np.array([[[[0, 0, 10, 10], [50, 50, 60, 60]], [[40, 40, 50, 50], [51, 51, 61, 61]]]], dtype=np.float32)
    scores = np.array([[[0.9, 0.8], [0.7, 0.6]]], dtype=np.float32)
    got = rows(nms(boxes, scores, shareLocation=0, topK=2, keepTopK=2))
    assert got == [(0, 0.9, [0, 0, 10, 10]), (1, 0.8, [50, 50, 60, 60])]
    with pytest.raises(PluginError, match="shareLocation=1"):
        nms(boxes, scores)


def test_batch_of_two_with_different_counts(four):
    boxes = np.concatenate([four[0], four[0]])
    scores = np.concatenate([four[1], four[1] * np.float32(0.27)])  # image 1: only 0.95 * 0.27 passes
    num, out_boxes, _, classes = out = nms(boxes, scores)
    assert num.tolist() == [[3], [1]]
    assert [r[0] for r in rows(out, 1)] == [1] and (classes[1, 1:] == -1).all() and not out_boxes[1, 1:].any()


def test_score_bits_sort_fp16_on_fewer_bits():
    # fp16 with scoreBits: scores are sorted on the top bits of the mantissa of score + 1. 0.30 and 0.31 share their
    # top 2 bits (1.30 and 1.31 both start 0b01): a tie, kept in anchor order; output scores are fp16(score + 1) - 1
    boxes = np.array([[[0, 0, 1, 1], [5, 5, 6, 6]]], dtype=np.float16)[:, :, None]
    scores = np.array([[[0.30], [0.31]]], dtype=np.float16)
    one = dict(numClasses=1, topK=2, keepTopK=2)
    full = rows(batched_nms_dynamic(boxes, scores, **{**ATTRS, **one}))
    assert [b for _, _, b in full] == [[5, 5, 6, 6], [0, 0, 1, 1]]
    coarse = rows(batched_nms_dynamic(boxes, scores, **{**ATTRS, **one, "scoreBits": 2}))
    assert [b for _, _, b in coarse] == [[0, 0, 1, 1], [5, 5, 6, 6]]
    assert coarse[0][1] == round(float(np.float16(1.3) - np.float16(1)), 6)  # 0.2998: fp16 steps of 2^-10


def test_bad_attributes_name_the_plugin(four):
    with pytest.raises(PluginError, match="BatchedNMSDynamic_TRT: .*numClasses is 3"):
        nms(*four, numClasses=3)
    attrs = {k: v for k, v in ATTRS.items() if k != "topK"}
    with pytest.raises(PluginError, match="no attribute 'topK'"):
        batched_nms_dynamic(four[0][:, :, None], four[1], **attrs)


@pytest.mark.parametrize("seed", [3, 4])
def test_matches_onnx_runtime_nms(seed):
    # topK 600 > 200 anchors: each class has 600 slots, the last 400 empty
    boxes, scores = random_detections(seed, batch=2, count=200, classes=3)
    num, out_boxes, out_scores, classes = nms(
        boxes, scores, numClasses=3, topK=600, keepTopK=600, scoreThreshold=0.3, iouThreshold=0.45
    )
    anchor_of = {(b, tuple(box)): i for b in range(2) for i, box in enumerate(boxes[b].tolist())}
    ours = {
        (b, int(classes[b, i]), anchor_of[b, tuple(out_boxes[b, i].tolist())])
        for b in range(2)
        for i in range(num[b, 0])
    }
    assert ours == ort_nms(boxes, scores, 0.45, 0.3)
    assert all(np.all(np.diff(out_scores[b, : num[b, 0]]) <= 0) for b in range(2))
