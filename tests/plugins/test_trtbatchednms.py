"""mmdeploy TRTBatchedNMS reference: hand-worked cases (box layout in conftest.py) and ONNX Runtime's NMS."""

import numpy as np
import pytest

from tests.plugins.conftest import ort_nms, random_detections
from trtverify.plugins.attrs import PluginError
from trtverify.plugins.trtbatchednms import trt_batched_nms

# what mmdeploy's exporter writes (mmdeploy/mmcv/ops/nms.py, TRTBatchedNMSop.symbolic)
ATTRS = dict(
    num_classes=2,
    background_label_id=-1,
    iou_threshold=0.5,
    score_threshold=0.25,
    topk=-1,
    keep_topk=4,
    is_normalized=0,
    clip_boxes=0,
    return_index=0,
)


def nms(boxes, scores, **changes):
    if boxes.ndim == 3:
        boxes = boxes[:, :, None]
    return trt_batched_nms(boxes, scores, **{**ATTRS, **changes})


def test_dets_and_labels(four):
    dets, labels = nms(*four)
    assert dets.dtype == np.float32 and dets.shape == (1, 4, 5)
    assert labels.dtype == np.int32 and labels.tolist() == [[1, 0, 0, -1]]
    np.testing.assert_allclose(
        dets[0], [[0, 0, 10, 10, 0.95], [0, 0, 10, 10, 0.9], [20, 20, 30, 30, 0.6], [0, 0, 0, 0, 0]], rtol=1e-6
    )


def test_return_index(four):
    dets, labels, index = nms(*four, return_index=1)
    assert index.dtype == np.int32 and index.tolist() == [[3, 0, 2, -1]]
    # per-class boxes: the index is class * N + anchor
    per_class = np.repeat(four[0][:, :, None], 2, axis=2)
    _, _, index = nms(per_class, four[1], return_index=1)
    assert index.tolist() == [[1 * 4 + 3, 0, 2, -1]]


def test_topk_minus_one_or_too_big_means_every_anchor(four):
    for topk in (-1, 0, 100):
        assert nms(*four, topk=topk)[1].tolist() == [[1, 0, 0, -1]]
    # topk 2 per class keeps b0 and b1 of class 0 before NMS: b2 never enters
    assert nms(*four, topk=2, keep_topk=2)[1].tolist() == [[1, 0]]


def test_keep_topk_truncates_and_above_topk_gives_padding(four):
    assert nms(*four, keep_topk=2)[0][0, :, 4].tolist() == pytest.approx([0.95, 0.9])
    dets, labels = nms(*four, topk=2, keep_topk=3)
    assert (labels == -1).all() and not dets.any()


def test_no_corner_reordering_and_plain_iou():
    # TensorRT's BatchedNMS reorders corners ([10,10,0,0] is [0,0,10,10]: IoU 1); mmdeploy's kernel does not (IoU 0)
    boxes = np.array([[[0, 0, 10, 10], [10, 10, 0, 0]]], dtype=np.float32)
    scores = np.array([[[0.9], [0.8]]], dtype=np.float32)
    one = dict(num_classes=1, keep_topk=2)  # topk -1: the 2 anchors; keep_topk may not exceed it
    assert nms(boxes, scores, **one)[1].tolist() == [[0, 0]]
    # no Caffe +1 whatever is_normalized: [0,0,10,10] vs [0,0,10,5] has IoU 0.5, not > 0.5
    boxes = np.array([[[0, 0, 10, 10], [0, 0, 10, 5]]], dtype=np.float32)
    assert nms(boxes, scores, **one, is_normalized=0)[1].tolist() == [[0, 0]]
    assert nms(boxes, scores, **one, iou_threshold=0.49)[1].tolist() == [[0, -1]]


def test_clip_boxes(four):
    dets, _ = nms(four[0] / 20, four[1], clip_boxes=1)
    assert dets[0, 2, :4].tolist() == [1, 1, 1, 1]  # [1, 1, 1.5, 1.5] clamped


def test_background_and_batch_of_two(four):
    boxes = np.concatenate([four[0], four[0]])
    scores = np.concatenate([four[1], four[1] * np.float32(0.27)])
    dets, labels = nms(boxes, scores, background_label_id=0)
    assert labels.tolist() == [[1, -1, -1, -1], [1, -1, -1, -1]]
    dets, labels = nms(boxes, scores)
    assert labels.tolist() == [[1, 0, 0, -1], [1, -1, -1, -1]]


def test_bad_shapes(four):
    with pytest.raises(PluginError, match="TRTBatchedNMS: scores"):
        nms(*four, num_classes=3)


@pytest.mark.parametrize("seed", [5, 6])
def test_matches_onnx_runtime_nms(seed):
    # keep_topk may not exceed topk (the 150 anchors): a threshold of 0.8 keeps fewer detections than that
    boxes, scores = random_detections(seed, batch=2, count=150, classes=3)
    dets, labels, index = nms(
        boxes, scores, num_classes=3, keep_topk=150, score_threshold=0.8, iou_threshold=0.45, return_index=1
    )
    assert ((labels >= 0).sum(axis=1) < 150).all()
    ours = {(b, int(labels[b, i]), int(index[b, i])) for b in range(2) for i in range(150) if labels[b, i] >= 0}
    assert ours == ort_nms(boxes, scores, 0.45, 0.8)
