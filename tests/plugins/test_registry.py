"""The built-in plugin references: every entry imports, and each ignores attributes it does not know."""

import importlib

import numpy as np
import pytest

from trtverify.plugins.registry import BUILTIN


def load(target: str):
    module, attr = target.split(":")
    return getattr(importlib.import_module(module), attr)


def test_builtin_plugins_by_op_type():
    assert set(BUILTIN) == {
        "EfficientNMS_TRT",
        "BatchedNMS_TRT",
        "BatchedNMSDynamic_TRT",
        "TRTBatchedNMS",
        "ROIAlign_TRT",
    }
    for target in BUILTIN.values():
        assert callable(load(target))


BOXES = np.array([[[[0, 0, 1, 1]], [[5, 5, 6, 6]]]], dtype=np.float32)  # [1, 2, 1, 4]
SCORES = np.array([[[0.9], [0.8]]], dtype=np.float32)
CALLS = {
    "EfficientNMS_TRT": ((BOXES[:, :, 0], SCORES), dict(max_output_boxes=2)),
    "BatchedNMS_TRT": (
        (BOXES, SCORES),
        dict(
            shareLocation=1,
            backgroundLabelId=-1,
            numClasses=1,
            topK=2,
            keepTopK=2,
            scoreThreshold=0.5,
            iouThreshold=0.5,
        ),
    ),
    "BatchedNMSDynamic_TRT": (
        (BOXES, SCORES),
        dict(
            shareLocation=1,
            backgroundLabelId=-1,
            numClasses=1,
            topK=2,
            keepTopK=2,
            scoreThreshold=0.5,
            iouThreshold=0.5,
        ),
    ),
    "TRTBatchedNMS": ((BOXES, SCORES), dict(num_classes=1, keep_topk=2, score_threshold=0.5, iou_threshold=0.5)),
    "ROIAlign_TRT": (
        (np.ones((1, 1, 4, 4), np.float32), np.array([[0, 0, 2, 2]], np.float32), np.zeros(1, np.int32)),
        {},
    ),
}


@pytest.mark.parametrize("op", sorted(CALLS))
def test_unknown_attributes_are_ignored(op):
    inputs, attrs = CALLS[op]
    plain = load(BUILTIN[op])(*inputs, **attrs)
    extra = load(BUILTIN[op])(*inputs, **attrs, plugin_version="1", plugin_namespace="", some_future_field=[1, 2])
    plain = plain if isinstance(plain, tuple) else (plain,)
    extra = extra if isinstance(extra, tuple) else (extra,)
    assert len(plain) == len(extra) and all(np.array_equal(a, b) for a, b in zip(plain, extra))


@pytest.mark.parametrize("op", sorted(CALLS))
def test_no_boxes_or_no_rois(op):
    inputs, attrs = CALLS[op]
    if op == "ROIAlign_TRT":
        empty = (inputs[0], np.zeros((0, 4), np.float32), np.zeros(0, np.int32))
    else:
        empty = (inputs[0][:, :0], inputs[1][:, :0])
    out = load(BUILTIN[op])(*empty, **attrs)
    out = out if isinstance(out, tuple) else (out,)
    if op == "ROIAlign_TRT":
        assert out[0].shape == (0, 1, 1, 1)
    elif op == "TRTBatchedNMS":
        assert (out[1] == -1).all() and not out[0].any()
    else:
        assert not out[0].any() and out[1].shape[1] == 2
