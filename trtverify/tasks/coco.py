"""COCO ground truth and the COCO box evaluation (the numbers COCOeval computes), for the detection task.

Definitions are in `trtverify.tasks.detection`'s docstring. faster-coco-eval computes the COCO
arrays (pycocotools gives the same, and tests check that); the per-image matching is numpy.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import numbers
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.config.registry import COCO_STATS
from trtverify.util.fsutil import FileTooLarge, read_capped

BACKENDS = ("faster-coco-eval", "pycocotools")
STAT_NAMES = COCO_STATS
# COCOeval's parameters for boxes, built the way COCOeval builds them (bit-identical thresholds)
IOU_THRS = np.linspace(0.5, 0.95, int(np.round((0.95 - 0.5) / 0.05)) + 1, endpoint=True)
REC_THRS = np.linspace(0.0, 1.00, int(np.round((1.00 - 0.0) / 0.01)) + 1, endpoint=True)
MAX_DETS = 100
AREA_ALL = (0.0, 1e5**2)
MAX_COCO_BYTES = 1 << 30  # COCO 2017 train's instances file is 450 MB


# --- ground truth ------------------------------------------------------------------------


def read_coco(path: Path) -> Any:
    """The JSON of a COCO instances file, not yet checked (`validate_coco`, or `GroundTruth` which checks)."""
    path = Path(path)
    try:
        return json.loads(read_capped(path, MAX_COCO_BYTES).decode("utf-8"))
    except FileTooLarge:
        raise ValueError(
            f"{path}: larger than {MAX_COCO_BYTES >> 20} MiB; not a COCO validation set's annotations"
        ) from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read the COCO file: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 JSON ({e.reason} at byte {e.start})") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}): {e.msg}") from e
    except RecursionError:
        raise ValueError(f"{path}: not a COCO file (JSON nested too deeply)") from None


def load_coco(path: Path) -> dict[str, Any]:
    """Read and check a COCO instances file (ground truth)."""
    data = read_coco(path)
    validate_coco(data, str(path))
    return data


def is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def is_real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


def validate_coco(gt: Any, source: str = "ground truth") -> None:
    """Raise ValueError naming `source` and every missing or wrong key (up to 10)."""
    problems: list[str] = []
    if not isinstance(gt, dict):
        raise ValueError(f"{source}: a COCO file holds a JSON object, got {type(gt).__name__}")
    for key in ("images", "annotations", "categories"):
        if key not in gt:
            problems.append(f"missing key '{key}'")
        elif not isinstance(gt[key], list):
            problems.append(f"'{key}' must be a list, got {type(gt[key]).__name__}")
    if problems:
        raise ValueError(f"{source}: " + "; ".join(problems))

    def ids(key: str) -> set[int]:
        seen: set[int] = set()
        for i, item in enumerate(gt[key]):
            if not isinstance(item, dict) or "id" not in item:
                problems.append(f"{key}[{i}] has no 'id'")
            elif not is_int(item["id"]):
                problems.append(f"{key}[{i}] 'id' must be an integer, got {item['id']!r}")
            elif item["id"] in seen:
                problems.append(f"{key}[{i}] repeats id {item['id']}")
            else:
                seen.add(int(item["id"]))
        return seen

    images, categories = ids("images"), ids("categories")
    if not gt["categories"]:
        problems.append("'categories' is empty")
    for i, ann in enumerate(gt["annotations"]):
        if not isinstance(ann, dict):
            problems.append(f"annotations[{i}] is not an object")
            continue
        missing = [k for k in ("image_id", "category_id", "bbox") if k not in ann]
        if missing:
            problems.append(f"annotations[{i}] has no " + ", ".join(f"'{k}'" for k in missing))
            continue
        if not is_int(ann["image_id"]) or ann["image_id"] not in images:
            problems.append(f"annotations[{i}] refers to image {ann['image_id']!r}, not in 'images'")
        if not is_int(ann["category_id"]) or ann["category_id"] not in categories:
            problems.append(f"annotations[{i}] refers to category {ann['category_id']!r}, not in 'categories'")
        bb = ann["bbox"]
        if (
            not isinstance(bb, (list, tuple))
            or len(bb) != 4
            or not all(is_real(v) and math.isfinite(v) for v in bb)
            or bb[2] < 0
            or bb[3] < 0
        ):
            problems.append(f"annotations[{i}] 'bbox' must be [x, y, width, height] (finite, size >= 0), got {bb!r}")
        area = ann.get("area", 0)
        if not (is_real(area) and math.isfinite(area) and area >= 0):
            problems.append(f"annotations[{i}] 'area' must be a finite number >= 0, got {area!r}")
        if ann.get("iscrowd", 0) not in (0, 1):  # True/False compare equal to 1/0
            problems.append(f"annotations[{i}] 'iscrowd' must be 0 or 1, got {ann['iscrowd']!r}")
        if len(problems) >= 10:
            break
    if problems:
        more = " (first 10 shown)" if len(problems) >= 10 else ""
        raise ValueError(f"{source}: invalid COCO ground truth{more}: " + "; ".join(problems[:10]))


def _normalise(gt: dict[str, Any]) -> dict[str, Any]:
    """Copy of what box evaluation needs: annotations renumbered 1..N (COCOeval treats id 0 as
    unmatched), `area` defaulting to the box area and `iscrowd` to 0, no segmentations."""
    images = [{k: img[k] for k in ("id", "width", "height", "file_name") if k in img} for img in gt["images"]]
    categories = [{"id": c["id"], "name": str(c.get("name", c["id"]))} for c in gt["categories"]]
    anns = []
    for n, a in enumerate(gt["annotations"], start=1):
        bb = [float(v) for v in a["bbox"]]
        anns.append(
            {
                "id": n,
                "image_id": int(a["image_id"]),
                "category_id": int(a["category_id"]),
                "bbox": bb,
                "area": float(a.get("area", bb[2] * bb[3])),
                "iscrowd": int(bool(a.get("iscrowd", 0))),
            }
        )
    return {"images": images, "annotations": anns, "categories": categories}


# --- COCOeval backends -------------------------------------------------------------------


def _fresh(gt: dict[str, Any]) -> dict[str, Any]:
    """Shallow copies of the annotation dicts: COCOeval writes flags into them."""
    return {**gt, "annotations": [dict(a) for a in gt["annotations"]]}


def coco_arrays(
    gt: dict[str, Any], image_ids: list[int], results: list[dict[str, Any]], backend: str
) -> tuple[np.ndarray, np.ndarray]:
    """COCOeval's accumulated precision [T, R, K, A, M] and recall [T, K, A, M], K = sorted category ids."""
    if backend == "faster-coco-eval":
        from faster_coco_eval import COCO, COCOeval_faster

        coco_gt = COCO(_fresh(gt))
        coco_dt = coco_gt.loadRes(results)
        ev = COCOeval_faster(coco_gt, coco_dt, "bbox")
        ev.params.imgIds = image_ids
        ev.evaluate()
        ev.accumulate()
    elif backend == "pycocotools":
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval

        with contextlib.redirect_stdout(io.StringIO()):  # pycocotools prints its progress
            coco_gt = COCO()
            coco_gt.dataset = _fresh(gt)
            coco_gt.createIndex()
            if results:
                coco_dt = coco_gt.loadRes(results)
            else:  # loadRes cannot take an empty list
                coco_dt = COCO()
                coco_dt.dataset = {
                    "images": list(gt["images"]),
                    "categories": list(gt["categories"]),
                    "annotations": [],
                }
                coco_dt.createIndex()
            ev = COCOeval(coco_gt, coco_dt, "bbox")
            ev.params.imgIds = image_ids
            ev.evaluate()
            ev.accumulate()
    else:
        raise ValueError(f"unknown COCO backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    return np.asarray(ev.eval["precision"], dtype=np.float64), np.asarray(ev.eval["recall"], dtype=np.float64)


def mean_valid(s: np.ndarray) -> float:
    """COCOeval.summarize's average: mean of the entries > -1, NaN (COCO: -1) where none."""
    v = s[s > -1]
    return float(np.mean(v)) if v.size else math.nan


def iou_index(t: float) -> int:
    return int(np.argmin(np.abs(IOU_THRS - t)))


def coco_stats(precision: np.ndarray, recall: np.ndarray) -> dict[str, float]:
    """The 12 COCOeval.summarize() stats of accumulated arrays (areas all/small/medium/large, maxDets 1/10/100)."""
    m = 2  # maxDets 100
    t50, t75 = iou_index(0.5), iou_index(0.75)
    values = [
        mean_valid(precision[:, :, :, 0, m]),
        mean_valid(precision[t50, :, :, 0, m]),
        mean_valid(precision[t75, :, :, 0, m]),
        *(mean_valid(precision[:, :, :, a, m]) for a in (1, 2, 3)),
        *(mean_valid(recall[:, :, 0, mi]) for mi in (0, 1, 2)),
        *(mean_valid(recall[:, :, a, m]) for a in (1, 2, 3)),
    ]
    return dict(zip(STAT_NAMES, values))


# --- matching (COCO's rule), numpy -------------------------------------------------------


def box_iou(dt: np.ndarray, gt: np.ndarray, crowd: np.ndarray) -> np.ndarray:
    """IoU [D, G] of [x, y, w, h] boxes as pycocotools computes it; for a crowd box the
    denominator is the detection's area."""
    dx1, dy1 = dt[:, 0:1], dt[:, 1:2]
    dx2, dy2 = dx1 + dt[:, 2:3], dy1 + dt[:, 3:4]
    gx1, gy1 = gt[None, :, 0], gt[None, :, 1]
    gx2, gy2 = gx1 + gt[None, :, 2], gy1 + gt[None, :, 3]
    w = np.minimum(dx2, gx2) - np.maximum(dx1, gx1)
    h = np.minimum(dy2, gy2) - np.maximum(dy1, gy1)
    inter = np.where((w > 0) & (h > 0), w * h, 0.0)
    da = dt[:, 2:3] * dt[:, 3:4]
    ga = gt[None, :, 2] * gt[None, :, 3]
    union = np.where(crowd[None, :], da, da + ga - inter)
    out = np.zeros_like(inter)
    np.divide(inter, union, out=out, where=inter > 0)
    return out


def _match(
    ious: list[list[float]], row_max: list[float], gt_ignore: list[bool], crowd: list[bool], thr: float
) -> list[int]:
    """COCOeval.evaluateImg's greedy matching at one IoU threshold: per detection the matched
    box, -1 for none. Detections come in descending score order, ignored boxes last."""
    g_n = len(gt_ignore)
    gtm = [False] * g_n
    dtm = [-1] * len(ious)
    start = min(thr, 1 - 1e-10)
    for d, row in enumerate(ious):
        if row_max[d] < start:  # overlaps nothing enough: unmatched whatever is taken
            continue
        best, m = start, -1
        for g in range(g_n):
            if gtm[g] and not crowd[g]:
                continue
            if m > -1 and not gt_ignore[m] and gt_ignore[g]:
                break
            if row[g] < best:
                continue
            best, m = row[g], g
        if m > -1:
            dtm[d] = m
            gtm[m] = True
    return dtm


class ImagePair:
    """Ground truth and detections of one image (one category, or all: boxes of different
    categories then never match) in COCOeval's order: detections by descending score (stable,
    at most `limit`), ignored (crowd) boxes last."""

    __slots__ = ("scores", "dt_cat", "gt_cat", "ious", "row_max", "ignore", "crowd", "dt_area")

    def __init__(self, gt: list[dict[str, Any]], det: np.ndarray, limit: int | None = None) -> None:
        gt_boxes = np.array([a["bbox"] for a in gt], dtype=np.float64).reshape(-1, 4)
        gt_area = np.array([a["area"] for a in gt], dtype=np.float64)
        crowd = np.array([bool(a["iscrowd"]) for a in gt], dtype=bool)
        ignore = crowd | (gt_area < AREA_ALL[0]) | (gt_area > AREA_ALL[1])
        g_order = np.argsort(ignore, kind="mergesort")
        d_order = np.argsort(-det[:, 4], kind="mergesort")[:limit]
        self.ignore = ignore[g_order]
        self.crowd = crowd[g_order]
        self.gt_cat = np.array([a["category_id"] for a in gt], dtype=np.int64)[g_order]
        det = det[d_order]
        self.scores = det[:, 4]
        self.dt_cat = det[:, 5].astype(np.int64)
        self.dt_area = det[:, 2] * det[:, 3]
        ious = box_iou(det[:, :4], gt_boxes[g_order], self.crowd)
        ious[self.dt_cat[:, None] != self.gt_cat[None, :]] = 0.0
        self.ious = ious
        self.row_max = ious.max(axis=1) if ious.shape[1] else np.zeros(len(det))

    def _matches(self, thrs: Sequence[float]) -> np.ndarray:
        """Matched box per threshold and detection [T, D], -1 for none."""
        ious, row_max = self.ious.tolist(), self.row_max.tolist()
        ignore, crowd = self.ignore.tolist(), self.crowd.tolist()
        return np.array([_match(ious, row_max, ignore, crowd, float(t)) for t in thrs], dtype=np.int64).reshape(
            len(thrs), len(ious)
        )

    def counts(self, thr: float) -> dict[int, tuple[int, int, int]]:
        """category -> (tp, fp, fn) at one IoU threshold; crowd boxes and the detections on them do not count."""
        dtm = self._matches([thr])[0]
        matched = dtm > -1
        tp = matched & ~self.ignore[np.maximum(dtm, 0)] if len(self.ignore) else np.zeros(len(dtm), bool)
        gt_hit = np.zeros(len(self.ignore), bool)
        gt_hit[dtm[matched]] = True
        out = {}
        for cat in set(self.dt_cat.tolist()) | set(self.gt_cat.tolist()):
            d, g = self.dt_cat == cat, self.gt_cat == cat
            out[cat] = (
                int(np.count_nonzero(tp & d)),
                int(np.count_nonzero(~matched & d)),
                int(np.count_nonzero(~gt_hit & ~self.ignore & g)),
            )
        return out

    def precision_curve(self) -> np.ndarray | None:
        """COCOeval.accumulate's interpolated precision [T, R] of this pair alone (area "all",
        built with limit=maxDets 100); its mean is the pair's AP@[.5:.95]. None without a non-crowd box."""
        npig = int(np.count_nonzero(~self.ignore))
        if npig == 0:
            return None
        q = np.zeros((len(IOU_THRS), len(REC_THRS)))
        d = len(self.scores)
        if d == 0:
            return q
        dtm = self._matches(IOU_THRS)
        matched = dtm > -1
        dt_ig = matched & self.ignore[np.maximum(dtm, 0)]  # on a crowd box
        dt_ig |= ~matched & ((self.dt_area < AREA_ALL[0]) | (self.dt_area > AREA_ALL[1]))[None, :]
        tp = np.cumsum(matched & ~dt_ig, axis=1).astype(float)
        fp = np.cumsum(~matched & ~dt_ig, axis=1).astype(float)
        rc = tp / npig
        pr = np.maximum.accumulate((tp / (fp + tp + np.spacing(1)))[:, ::-1], axis=1)[:, ::-1]  # precision envelope
        for t in range(len(IOU_THRS)):
            inds = np.searchsorted(rc[t], REC_THRS, side="left")
            ok = inds < d
            q[t, ok] = pr[t, inds[ok]]
        return q


class GroundTruth:
    """COCO ground truth checked and indexed once (`validate_coco`, `_normalise`), to be shared by
    the accumulators of several models evaluated on the same images. Read-only once built.

    limit: keep only the first `limit` images by id (and their annotations); the whole file is checked."""

    def __init__(self, gt: dict[str, Any], source: str = "ground truth", limit: int | None = None) -> None:
        validate_coco(gt, source)
        if limit:
            images = sorted(gt["images"], key=lambda im: im["id"])[:limit]
            keep = {im["id"] for im in images}
            gt = {**gt, "images": images, "annotations": [a for a in gt["annotations"] if a["image_id"] in keep]}
        self.gt = _normalise(gt)
        self.cat_ids = sorted(c["id"] for c in self.gt["categories"])
        self.cat_names = {c["id"]: c["name"] for c in self.gt["categories"]}
        self.image_set = {img["id"] for img in self.gt["images"]}
        self.key = hash(
            (
                tuple(sorted(self.image_set)),
                tuple(self.cat_ids),
                tuple(
                    (a["image_id"], a["category_id"], *a["bbox"], a["area"], a["iscrowd"])
                    for a in self.gt["annotations"]
                ),
            )
        )
        self.by_image: dict[int, list[dict[str, Any]]] = {}
        for a in self.gt["annotations"]:
            self.by_image.setdefault(a["image_id"], []).append(a)
