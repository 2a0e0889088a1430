"""The shared NMS pieces: the vectorised IoUs against a literal per-pair reading of the plugins' kernels, greedy NMS
against a plain loop, and the stable top-k."""

import numpy as np
import pytest

from trtverify.plugins.nms import greedy_nms, iou_efficient, iou_ssd, stable_desc, top_stable


def jaccard_trt(b1, b2, normalized, caffe):
    """TensorRT allClassNMS.cu jaccardOverlap, pair by pair (boxes ordered first, as getDiagonalMinMaxSortedBox)."""
    b1 = [min(b1[0], b1[2]), min(b1[1], b1[3]), max(b1[0], b1[2]), max(b1[1], b1[3])]
    b2 = [min(b2[0], b2[2]), min(b2[1], b2[3]), max(b2[0], b2[2]), max(b2[1], b2[3])]
    if b2[0] > b1[2] or b2[2] < b1[0] or b2[1] > b1[3] or b2[3] < b1[1]:
        inter = [0.0, 0.0, 0.0, 0.0]
    else:
        inter = [max(b1[0], b2[0]), max(b1[1], b2[1]), min(b1[2], b2[2]), min(b1[3], b2[3])]
    plus = 0.0 if (normalized or not caffe) else 1.0
    iw, ih = inter[2] - inter[0] + plus, inter[3] - inter[1] + plus
    if not (iw > 0 and ih > 0):
        return 0.0

    def size(b):
        w, h = b[2] - b[0], b[3] - b[1]
        return w * h if normalized else (w + 1) * (h + 1)

    return iw * ih / (size(b1) + size(b2) - iw * ih)


def iou_efficient_pair(b1, b2):
    """TensorRT efficientNMSInference.cu IOU, pair by pair."""

    def ordered(b):
        return [min(b[0], b[2]), min(b[1], b[3]), max(b[0], b[2]), max(b[1], b[3])]

    def area(b):
        w, h = b[2] - b[0], b[3] - b[1]
        return 0.0 if (h <= 0 or w <= 0) else w * h

    b1, b2 = ordered(b1), ordered(b2)
    inter = area([max(b1[0], b2[0]), max(b1[1], b2[1]), min(b1[2], b2[2]), min(b1[3], b2[3])])
    if inter <= 0:
        return 0.0
    union = area(b1) + area(b2) - inter
    return 0.0 if union <= 0 else inter / union


@pytest.fixture
def boxes():
    # integer corners on a small grid: many touching, nested, identical, empty and swapped boxes
    rng = np.random.default_rng(11)
    return rng.integers(0, 6, size=(60, 4)).astype(np.float32)


@pytest.mark.parametrize("normalized,caffe", [(True, True), (False, True), (False, False)])
def test_ssd_iou_equals_the_kernel_pair_by_pair(boxes, normalized, caffe):
    got = iou_ssd(boxes, boxes, caffe=not normalized and caffe, area_offset=0.0 if normalized else 1.0)
    want = np.array([[jaccard_trt(a, b, normalized, caffe) for b in boxes.tolist()] for a in boxes.tolist()])
    np.testing.assert_allclose(np.nan_to_num(got), want, rtol=1e-6)


def test_efficient_iou_equals_the_kernel_pair_by_pair(boxes):
    got = iou_efficient(boxes, boxes)
    want = np.array([[iou_efficient_pair(a, b) for b in boxes.tolist()] for a in boxes.tolist()])
    np.testing.assert_allclose(np.nan_to_num(got), want, rtol=1e-6)


def test_greedy_nms_equals_a_plain_loop_across_blocks():
    rng = np.random.default_rng(3)
    corner = rng.uniform(0, 200, (700, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(5, 40, (700, 2))], axis=1).astype(np.float32)
    groups = rng.integers(0, 3, 700)
    iou = iou_efficient(boxes, boxes)
    for use_groups in (False, True):
        kept, removed = [], np.zeros(700, bool)
        for i in range(700):
            if removed[i]:
                continue
            kept.append(i)
            hit = iou[i] >= 0.5
            if use_groups:
                hit &= groups == groups[i]
            removed |= hit
        suppress = lambda a, b: iou_efficient(a, b) >= 0.5  # noqa: E731
        chosen = groups if use_groups else None
        assert greedy_nms(boxes, suppress, groups=chosen).tolist() == kept
        assert greedy_nms(boxes, suppress, groups=chosen, max_keep=7).tolist() == kept[:7]
        assert len(kept) > 256  # the blocks' hand-over is exercised


def test_stable_orders():
    keys = np.array([0.5, 0.9, 0.5, 0.1, 0.9, 0.5], dtype=np.float32)
    assert stable_desc(keys).tolist() == [1, 4, 0, 2, 5, 3]
    for k in range(8):
        assert top_stable(keys, k).tolist() == [1, 4, 0, 2, 5, 3][:k]
