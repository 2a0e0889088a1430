"""Segmentation metrics against independent computations: a confusion matrix written out here and
scikit-learn's jaccard_score; merging, state, ignored and NaN pixels, resizing."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.metrics import confusion_matrix, jaccard_score

from trtverify.tasks.segmentation import INVALID, SegmentationAccumulator, argmax_masks, resize_nearest

C = 4
IGNORE = 255


def random_masks(seed: int, n: int = 6, shape: tuple[int, int] = (17, 23)) -> tuple[list, list]:
    """Labels with some ignored pixels, and predictions that agree with them about 70 % of the time."""
    rng = np.random.default_rng(seed)
    labels, preds = [], []
    for _ in range(n):
        lab = rng.integers(0, C, shape).astype(np.uint8)
        lab[rng.random(shape) < 0.05] = IGNORE
        pred = np.where(rng.random(shape) < 0.7, lab, rng.integers(0, C, shape)).astype(np.int64)
        pred[lab == IGNORE] = rng.integers(0, C, int((lab == IGNORE).sum()))
        labels.append(lab)
        preds.append(pred)
    return labels, preds


def by_hand(labels: list, preds: list) -> dict:
    """The textbook definitions, from a confusion matrix built pixel by pixel."""
    conf = np.zeros((C, C), np.int64)
    for lab, pred in zip(labels, preds):
        for t, p in zip(lab.ravel(), pred.ravel()):
            if t != IGNORE:
                conf[t, p] += 1
    tp = np.diag(conf).astype(float)
    fp = conf.sum(axis=0) - tp
    fn = conf.sum(axis=1) - tp
    iou = [tp[c] / (tp[c] + fp[c] + fn[c]) if tp[c] + fp[c] + fn[c] else math.nan for c in range(C)]
    acc = [tp[c] / (tp[c] + fn[c]) if tp[c] + fn[c] else math.nan for c in range(C)]
    total = conf.sum()
    freq = conf.sum(axis=1) / total
    present = [c for c in range(C) if not math.isnan(iou[c])]
    return {
        "confusion": conf,
        "iou": iou,
        "miou": sum(iou[c] for c in present) / len(present),
        "pixel_accuracy": tp.sum() / total,
        "mean_accuracy": np.nanmean(acc),
        "fw_iou": sum(freq[c] * iou[c] for c in present),
    }


def accumulate(labels: list, preds: list, ids: list | None = None, batch: int = 2) -> SegmentationAccumulator:
    acc = SegmentationAccumulator(C, IGNORE, ["bg", "circle", "square", "triangle"])
    ids = list(range(len(labels))) if ids is None else ids
    for lo in range(0, len(labels), batch):
        acc.update(ids[lo : lo + batch], labels[lo : lo + batch], preds[lo : lo + batch], C)
    return acc


@pytest.mark.parametrize("seed", range(4))
def test_metrics_equal_the_confusion_matrix_definitions_and_sklearn(seed: int):
    labels, preds = random_masks(seed)
    m = accumulate(labels, preds).compute()
    want = by_hand(labels, preds)
    assert m.confusion == want["confusion"].tolist()
    assert [c.iou for c in m.per_class] == pytest.approx(want["iou"], abs=1e-12)
    assert m.miou == pytest.approx(want["miou"], abs=1e-12)
    assert m.pixel_accuracy == pytest.approx(want["pixel_accuracy"], abs=1e-12)
    assert m.mean_accuracy == pytest.approx(want["mean_accuracy"], abs=1e-12)
    assert m.fw_iou == pytest.approx(want["fw_iou"], abs=1e-12)
    # scikit-learn, an implementation that shares nothing with ours
    y_true = np.concatenate([lab.ravel() for lab in labels]).astype(int)
    y_pred = np.concatenate([p.ravel() for p in preds])
    keep = y_true != IGNORE
    assert m.confusion == confusion_matrix(y_true[keep], y_pred[keep], labels=range(C)).tolist()
    sk = jaccard_score(y_true[keep], y_pred[keep], labels=range(C), average=None)
    assert [c.iou for c in m.per_class] == pytest.approx(sk, abs=1e-12)
    assert m.miou == pytest.approx(jaccard_score(y_true[keep], y_pred[keep], labels=range(C), average="macro"))
    assert m.ignored == int((~keep).sum()) and m.pixels == int(keep.sum()) and m.samples == len(labels)


def test_a_class_neither_labelled_nor_predicted_has_no_iou_and_is_left_out_of_the_mean():
    lab = np.array([[0, 0, 1, 1]], np.uint8)
    pred = np.array([[0, 1, 1, 1]])
    m = accumulate([lab], [pred]).compute()
    assert [c.iou for c in m.per_class][:2] == [0.5, 2 / 3]
    assert all(math.isnan(c.iou) for c in m.per_class[2:])
    assert m.miou == pytest.approx((0.5 + 2 / 3) / 2) and m.pixel_accuracy == 0.75


def test_merge_of_two_halves_and_state_roundtrip_equal_the_whole():
    labels, preds = random_masks(7, n=8)
    whole = accumulate(labels, preds)
    first = accumulate(labels[:3], preds[:3], ids=[0, 1, 2])
    second = accumulate(labels[3:], preds[3:], ids=list(range(3, 8)))
    restored = SegmentationAccumulator.from_state(second.state(), IGNORE, ["bg", "circle", "square", "triangle"])
    first.merge(restored)
    assert first.compute() == whole.compute()
    assert first.per_image() == whole.per_image()
    with pytest.raises(ValueError, match="overlap"):
        first.merge(accumulate(labels[:1], preds[:1], ids=[0]))


def test_per_image_miou_is_that_image_alone():
    labels, preds = random_masks(3, n=3)
    acc = accumulate(labels, preds)
    for i in range(3):
        assert acc.per_image()[i] == pytest.approx(accumulate([labels[i]], [preds[i]]).compute().miou)


def test_nan_scores_are_misses_and_counted():
    scores = np.zeros((1, C, 2, 3), np.float32)
    scores[0, 2] = 1.0  # class 2 everywhere
    scores[0, 1, 0, 0] = np.nan
    pred = argmax_masks(scores)
    assert pred[0, 0, 0] == INVALID and (pred[0][pred[0] != INVALID] == 2).all()
    lab = np.full((2, 3), 2, np.uint8)
    m = accumulate([lab], [pred[0]]).compute()
    assert m.invalid == 1 and m.pixel_accuracy == pytest.approx(5 / 6)
    assert m.per_class[2].iou == pytest.approx(5 / 6) and m.per_class[2].support == 6


def test_labels_outside_the_classes_are_refused():
    with pytest.raises(ValueError, match="label value 7 is not a class index in \\[0, 4\\) nor ignore_index 255"):
        accumulate([np.full((2, 2), 7, np.uint8)], [np.zeros((2, 2), np.int64)])
    with pytest.raises(ValueError, match="prediction of shape \\[2, 3\\] for a mask of shape \\[2, 2\\]"):
        accumulate([np.zeros((2, 2), np.uint8)], [np.zeros((2, 3), np.int64)])


def test_nearest_resize_keeps_class_indices():
    m = np.array([[0, 1], [2, 3]])
    assert resize_nearest(m, (4, 4)).tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]]
    assert resize_nearest(resize_nearest(m, (4, 4)), (2, 2)).tolist() == m.tolist()
    assert resize_nearest(m, (2, 2)) is m
