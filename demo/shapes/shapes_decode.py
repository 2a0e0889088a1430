"""Pre- and post-processing for the shapes CenterNet demo (numpy only, no torch).

``decode`` is the post-processing hook trtverify calls on the raw model outputs
(``heatmap`` [B,3,H,W] probabilities, ``wh`` [B,2,H,W], ``offset`` [B,2,H,W],
stride 4); ``preprocess`` turns one uint8 HWC RGB image into the model input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

STRIDE = 4
CATEGORY_IDS = (1, 2, 3)  # heatmap channel k -> COCO category id k + 1 (circle, square, triangle)


def preprocess(image_uint8_hwc: np.ndarray) -> np.ndarray:
    """uint8 [H, W, 3] RGB -> float32 [3, H, W] in [0, 1] (pixel / 255)."""
    img = np.asarray(image_uint8_hwc)
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    if img.shape[2] == 4:
        img = img[..., :3]
    return np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32) / np.float32(255.0)


def _maxpool3x3(heat: np.ndarray) -> np.ndarray:
    """3x3 max filter, stride 1, 'same' padding, over the last two axes."""
    h, w = heat.shape[-2:]
    pad = np.pad(heat, [(0, 0)] * (heat.ndim - 2) + [(1, 1), (1, 1)], constant_values=-np.inf)
    out = pad[..., 0:h, 0:w].copy()
    for dy in range(3):
        for dx in range(3):
            np.maximum(out, pad[..., dy : dy + h, dx : dx + w], out=out)
    return out


def decode(
    outputs: Mapping[str, np.ndarray],
    image_sizes: Sequence[tuple[int, int]] | None = None,
    input_size: tuple[int, int] | None = None,
    *,
    max_detections: int = 50,
    threshold: float = 0.05,
) -> list[np.ndarray]:
    """CenterNet decoding.

    outputs: {"heatmap": [B,C,H,W] probabilities, "wh": [B,2,H,W], "offset": [B,2,H,W]}
        (any float dtype; other keys are ignored).
    image_sizes: optional (height, width) of each original image; boxes are scaled
        from the network input (input_size) to that size. None: input-pixel coordinates.
    input_size: (height, width) of the network input; default (H*4, W*4).
    max_detections: top-K over all classes and positions per image.
    threshold: drop detections with score < threshold.

    Returns one float32 array [K, 6] per image: (x1, y1, x2, y2, score, class_id),
    boxes in pixel-edge coordinates of the (original) image, clipped to it,
    class_id = COCO category id (1 circle, 2 square, 3 triangle), sorted by
    descending score.
    """
    heat = np.asarray(outputs["heatmap"], dtype=np.float32)
    wh = np.asarray(outputs["wh"], dtype=np.float32)
    off = np.asarray(outputs["offset"], dtype=np.float32)
    if heat.ndim != 4 or wh.shape[1] != 2 or off.shape[1] != 2:
        raise ValueError(f"unexpected output shapes heatmap {heat.shape}, wh {wh.shape}, offset {off.shape}")
    b, c, h, w = heat.shape
    in_h, in_w = (h * STRIDE, w * STRIDE) if input_size is None else (int(input_size[0]), int(input_size[1]))
    sy, sx = in_h / h, in_w / w  # = STRIDE for the shipped model

    keep = heat == _maxpool3x3(heat)  # local maxima (3x3 max-pool NMS)
    peaks = np.where(keep, heat, 0.0).reshape(b, c * h * w)
    k = min(max_detections, peaks.shape[1])

    # the whole batch at once: top-k per image, then one gather for every box
    rows = np.arange(b)[:, None]
    idx = (
        np.argpartition(-peaks, k - 1, axis=1)[:, :k]
        if k < peaks.shape[1]
        else np.broadcast_to(np.arange(peaks.shape[1]), (b, k))
    )
    idx = np.take_along_axis(idx, np.argsort(-peaks[rows, idx], axis=1, kind="stable"), axis=1)
    scores = peaks[rows, idx]  # [b, k], descending
    cls = idx // (h * w)
    pos = idx % (h * w)
    ys, xs = pos // w, pos % w
    cx = (xs + off[rows, 0, ys, xs]) * sx
    cy = (ys + off[rows, 1, ys, xs]) * sy
    bw = np.maximum(wh[rows, 0, ys, xs], 0.0) * sx
    bh = np.maximum(wh[rows, 1, ys, xs], 0.0) * sy
    boxes = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], axis=2)  # [b, k, 4]
    if image_sizes is not None:  # from the network input to each original image
        out_hw = np.asarray(image_sizes, dtype=np.float64).reshape(b, 2)
        boxes *= np.stack([out_hw[:, 1] / in_w, out_hw[:, 0] / in_h] * 2, axis=1).astype(np.float32)[:, None, :]
    else:
        out_hw = np.tile([float(in_h), float(in_w)], (b, 1))
    limit = np.stack([out_hw[:, 1], out_hw[:, 0]] * 2, axis=1)[:, None, :]  # [b, 1, 4] (w, h, w, h)
    boxes = np.clip(boxes, 0.0, limit)
    det = np.concatenate(
        [boxes, scores[..., None], np.asarray(CATEGORY_IDS, dtype=np.float32)[cls][..., None]], axis=2
    ).astype(np.float32)
    sel = scores >= threshold
    results: list[np.ndarray] = [det[i][sel[i]].reshape(-1, 6) for i in range(b)]
    return results
