"""The built-in preprocessing works on whole batches for speed; it must give exactly what the
per-image path gives (which `--samples worst` uses), for every option."""

from __future__ import annotations

import numpy as np
import pytest

from trtverify.config.stages import Preprocess
from trtverify.tasks.batches import batches, make_preprocess
from trtverify.tasks.datasets import Reader


def batch_path(pre, images: list[np.ndarray]) -> np.ndarray:
    """The images as one batch, through `batches` (the stage's path: per-image steps, then the
    batch-wide steps on the stacked batch)."""
    reader = Reader(list(range(len(images))), lambda i: images[i], lambda i: None)
    return next(batches(reader, range(len(images)), len(images), pre, 0)).inputs


RNG = np.random.default_rng(0)
SAME = [RNG.integers(0, 256, (20, 24, 3), dtype=np.uint8) for _ in range(5)]
RAGGED = [RNG.integers(0, 256, (16 + 3 * i, 24 - i, 3), dtype=np.uint8) for i in range(5)]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"layout": "NHWC"},
        {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
        {"grayscale": True, "mean": [0.5], "std": [0.25]},
        {"resize": [12, 10], "dtype": "float16"},
        {"scale": 1.0, "layout": "NHWC", "dtype": "float16"},
    ],
)
@pytest.mark.parametrize("images", [SAME, RAGGED], ids=["same-size", "ragged"])
def test_batch_path_equals_the_per_image_path(options: dict, images: list[np.ndarray]):
    pre = make_preprocess(Preprocess(**options), [])
    if "resize" not in options and images is RAGGED:
        # ragged images cannot form one batch array: the per-image results are stacked, and fail the same way
        with pytest.raises(ValueError):
            batch_path(pre, images)
        return
    batch = batch_path(pre, images)
    one_by_one = np.stack([pre(im) for im in images])
    assert batch.dtype == one_by_one.dtype == np.dtype(options.get("dtype", "float32"))
    assert batch.flags["C_CONTIGUOUS"] and np.array_equal(batch, one_by_one)
    channels = 1 if options.get("grayscale") else 3
    assert batch.shape[1 if options.get("layout", "NCHW") == "NCHW" else 3] == channels


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"layout": "NHWC"},
        {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
        {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225], "layout": "NHWC"},
        {"grayscale": True, "mean": [0.5], "std": [0.25]},
        {"scale": 1.0, "mean": [127.5], "dtype": "float16"},
    ],
)
def test_values_are_the_textbook_formula(options: dict):
    """(pixel * scale - mean) / std per channel, then the layout, in float32: written out here
    step by step, independently of the implementation (which reorders the copies for speed)."""
    cfg = Preprocess(**options)
    batch = batch_path(make_preprocess(cfg, []), SAME)
    x = np.stack(SAME).astype(np.float32)
    if cfg.grayscale:
        x = (np.stack(SAME)[..., :3] @ np.array([0.299, 0.587, 0.114], np.float32))[..., None]
    x = x * np.float32(cfg.scale)
    if cfg.mean is not None:
        x = x - np.asarray(cfg.mean, np.float32)
    if cfg.std is not None:
        x = x / np.asarray(cfg.std, np.float32)
    if cfg.layout == "NCHW":
        x = x.transpose(0, 3, 1, 2)
    expected = x.astype(cfg.dtype)
    assert batch.dtype == expected.dtype and batch.shape == expected.shape
    assert batch.flags["C_CONTIGUOUS"] and np.array_equal(batch, expected)
