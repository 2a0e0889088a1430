"""What the NMS references share: stable descending orders, the plugins' IoU formulas, and greedy NMS.

Greedy NMS walks the candidates in priority order; a candidate is kept unless a kept candidate of higher priority
(of the same group, when groups are given) suppresses it. It runs in blocks: inside a block the few sequential
decisions are taken on the block's own overlap matrix, then the block's kept boxes suppress every later candidate in
one vectorised step, so the work is (kept boxes x candidates), never a full candidates x candidates matrix.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Suppress = Callable[[np.ndarray, np.ndarray], np.ndarray]
"""suppress(a [m, 4], b [n, 4]) -> bool [m, n]: does kept box a[i] remove candidate b[j]."""

BLOCK = 256


def stable_desc(keys: np.ndarray) -> np.ndarray:
    """Indices that sort `keys` descending, equal keys in index order (what cub's stable radix sort gives)."""
    if keys.dtype.kind in "ui":
        return np.argsort(-keys.astype(np.int64), kind="stable")
    return np.argsort(-keys.astype(np.float64), kind="stable")


def top_stable(keys: np.ndarray, k: int) -> np.ndarray:
    """The first `k` indices of stable_desc(keys), without sorting everything."""
    n = keys.shape[0]
    if k >= n:
        return stable_desc(keys)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    wide = keys.astype(np.int64 if keys.dtype.kind in "ui" else np.float64)
    kth = wide[np.argpartition(-wide, k - 1)[:k]].min()
    above = np.flatnonzero(wide > kth)
    equal = np.flatnonzero(wide == kth)[: k - above.size]
    chosen = np.concatenate([above, equal])
    chosen.sort()
    return chosen[stable_desc(wide[chosen])]


def corners_sorted(b: np.ndarray) -> np.ndarray:
    """[x1, y1, x2, y2] with x1 <= x2 and y1 <= y2 (the plugins' 'reorder': any axis order works the same)."""
    lo = np.minimum(b[..., :2], b[..., 2:])
    hi = np.maximum(b[..., :2], b[..., 2:])
    return np.concatenate([lo, hi], axis=-1)


def _overlap(a: np.ndarray, b: np.ndarray, area_offset: float, caffe: bool = False) -> np.ndarray:
    """inter / union, [m, n], float32, for corner boxes; boxes of negative width or height have size 0.

    A pair that does not overlap (intersection width or height <= 0) gives 0, or NaN when both boxes are empty:
    either compares false with a positive threshold, as the plugins' explicit zero does. With `caffe` (ordered boxes
    only) the intersection's sides get +1, and a disjoint pair intersects in TensorRT's [0, 0, 0, 0] box: 1 x 1.
    """
    zero = np.float32(0)
    off = np.float32(area_offset)

    def size(x: np.ndarray) -> np.ndarray:
        w, h = x[:, 2] - x[:, 0], x[:, 3] - x[:, 1]
        return np.where((w < 0) | (h < 0), zero, (w + off) * (h + off))

    iw = np.minimum(a[:, None, 2], b[None, :, 2]) - np.maximum(a[:, None, 0], b[None, :, 0])
    ih = np.minimum(a[:, None, 3], b[None, :, 3]) - np.maximum(a[:, None, 1], b[None, :, 1])
    if caffe:
        one = np.float32(1)
        inter = np.where((iw < 0) | (ih < 0), one, (iw + one) * (ih + one))
    else:
        inter = np.maximum(iw, zero) * np.maximum(ih, zero)
    union = size(a)[:, None] + size(b)[None, :] - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / union


def iou_efficient(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """EfficientNMS_TRT's IoU, [m, n], float32: boxes reordered, zero-area boxes and empty unions give 0 (or NaN)."""
    return _overlap(corners_sorted(a.astype(np.float32)), corners_sorted(b.astype(np.float32)), 0.0)


def iou_ssd(a: np.ndarray, b: np.ndarray, *, caffe: bool, area_offset: float, reorder: bool = True) -> np.ndarray:
    """The SSD-family IoU of BatchedNMS_TRT (reorder=True) and mmdeploy's TRTBatchedNMS (reorder=False), [m, n].

    `caffe` adds 1 to the intersection's width and height (TensorRT's Caffe semantics on unnormalised boxes; disjoint
    boxes then intersect in 1 x 1), `area_offset` is added to each box's width and height (TensorRT: 1 whenever the
    boxes are not normalised).
    """
    a = a.astype(np.float32)
    b = b.astype(np.float32)
    if reorder:
        a, b = corners_sorted(a), corners_sorted(b)
    elif caffe:
        raise ValueError("Caffe semantics are only defined on reordered boxes")
    return _overlap(a, b, area_offset, caffe)


def greedy_nms(
    boxes: np.ndarray,
    suppress: Suppress,
    *,
    groups: np.ndarray | None = None,
    max_keep: int | None = None,
) -> np.ndarray:
    """Positions (ascending) of the candidates greedy NMS keeps; `boxes` [K, 4] are in priority order.

    With `groups`, a box only suppresses boxes of its own group (per-class NMS). `max_keep` stops once that many
    are kept (what EfficientNMS_TRT does).
    """
    count = boxes.shape[0]
    limit = count if max_keep is None else max(0, max_keep)
    removed = np.zeros(count, dtype=bool)
    kept: list[np.ndarray] = []
    total = 0
    for start in range(0, count, BLOCK):
        if total >= limit:
            break
        end = min(start + BLOCK, count)
        alive = ~removed[start:end]
        if not alive.any():
            continue
        inside = suppress(boxes[start:end], boxes[start:end])
        if groups is not None:
            inside &= groups[start:end, None] == groups[None, start:end]
        inside = np.triu(inside, 1)
        block_kept = []
        for i in np.flatnonzero(alive):
            if not alive[i]:
                continue
            block_kept.append(i)
            total += 1
            if total >= limit:
                break
            alive &= ~inside[i]
        chosen = start + np.asarray(block_kept, dtype=np.int64)
        kept.append(chosen)
        if total >= limit or end >= count:
            continue
        later = end + np.flatnonzero(~removed[end:])
        if later.size:
            hit = suppress(boxes[chosen], boxes[later])
            if groups is not None:
                hit &= groups[chosen, None] == groups[None, later]
            removed[later[hit.any(axis=0)]] = True
    return np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)
