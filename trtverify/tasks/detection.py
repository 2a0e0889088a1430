"""Object-detection task metrics: the COCO box stats plus P/R/F1 at one operating point.

Detection layout everywhere: one float array [K, 6] per image, a row per box,
(x1, y1, x2, y2, score, category_id) in the image's pixel coordinates (not normalised),
category_id being the ground truth's COCO category id (not a 0-based index). K may be 0.

Definitions:
- the 12 COCO stats (`map` ... `ar_large`) and per-class `ap` (AP@[.5:.95]) / `ap50` come
  from COCOeval's accumulated precision/recall arrays, exactly as COCOeval.summarize() averages
  them (area "all", maxDets 100 per image and category); faster-coco-eval and pycocotools give
  the same arrays. COCO's -1 ("nothing to measure", e.g. no small objects) is NaN here.
- `precision`/`recall`/`f1` (per class and pooled over classes) are at one IoU and one score
  threshold: per image and class, detections with score >= `score_threshold` are taken in
  descending score order and each is matched to the still unmatched ground-truth box with the
  highest IoU >= `iou` (COCO's matching rule). A match is a tp, an unmatched detection a fp, an
  unmatched box a fn; 0/0 ratios are 0 and F1 = 2 tp / (2 tp + fp + fn). Crowd boxes
  (iscrowd=1) never count: a detection that lands on one (intersection / detection area >=
  `iou`, as COCO) is neither tp nor fp. No per-image cap on the number of detections.
- per-image AP (`per_image()`): COCO AP@[.5:.95] (area "all", maxDets 100) of that image
  evaluated alone, i.e. averaged over the categories with at least one non-crowd box in the
  image; NaN for an image without one. Detections of categories absent from the image do not
  lower it: `per_image_counts()` (fp per image) shows those.

Non-finite detection rows are dropped and counted (`nonfinite_detections`), so a candidate that
emits NaN boxes loses recall instead of crashing the run; an inverted box (x2 < x1) has zero
size. A category id missing from the ground truth is refused: it is a label-mapping bug (e.g.
0-based indices against COCO's ids), not an accuracy drop. Detections are combinable: `merge`
takes the union of two shards' images and the metrics are computed over the union, never averaged.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from trtverify.config.stages import E2EStage
from trtverify.tasks.base import (
    State,
    Task,
    TaskMetrics,
    call_hook,
    class_deltas,
    dominant_class,
    input_size,
    largest_drops,
)
from trtverify.tasks.batches import Batch
from trtverify.tasks.coco import (
    BACKENDS,
    MAX_DETS,
    GroundTruth,
    ImagePair,
    coco_arrays,
    coco_stats,
    iou_index,
    is_int,
    mean_valid,
)
from trtverify.tasks.datasets import Reader
from trtverify.tasks.detlayouts import DetectionLayout
from trtverify.util.errors import UsageError
from trtverify.util.record import Record, optional

NEAR_ZERO_MAP = 0.01  # a reference mAP below this is degenerate (`DetectionTask.sanity`)

# --- accumulator -------------------------------------------------------------------------


def _ratio(num: int, den: int) -> float:
    return num / den if den else 0.0


def _prf(tp: int, fp: int, fn: int) -> dict[str, float]:
    return {"precision": _ratio(tp, tp + fp), "recall": _ratio(tp, tp + fn), "f1": _ratio(2 * tp, 2 * tp + fp + fn)}


class CategoryMetrics(Record):
    category_id: int
    name: str
    ap: float = Field(description="AP@[.5:.95]; NaN: nothing to measure")
    ap50: float
    precision: float
    recall: float
    f1: float
    tp: int
    fp: int
    fn: int


class DetectionMetrics(TaskMetrics):
    """The 12 COCO box stats, and P/R/F1 at one IoU and score threshold (NaN: nothing to measure)."""

    map: float
    ap50: float
    ap75: float
    ap_small: float
    ap_medium: float
    ap_large: float
    ar1: float
    ar10: float
    ar100: float
    ar_small: float
    ar_medium: float
    ar_large: float
    precision: float
    recall: float
    f1: float
    tp: int
    fp: int
    fn: int
    per_class: list[CategoryMetrics] | None = optional(
        "every category's row; left out above 100 categories (the e2e stage's class_data file holds them)"
    )
    iou: float
    score_threshold: float
    images: int
    detections: int
    nonfinite_detections: int
    backend: str = Field(description="the COCO implementation: faster-coco-eval or pycocotools")


class DetectionAccumulator:
    """Detections of a validation set against COCO ground truth, image by image; metrics once at the end.

    `gt`: a COCO instances dict, or a `GroundTruth` built from one (shared, not copied)."""

    def __init__(self, gt: dict[str, Any] | GroundTruth, *, iou: float = 0.5, score_threshold: float = 0.3) -> None:
        truth = gt if isinstance(gt, GroundTruth) else GroundTruth(gt)
        if not 0.0 < float(iou) <= 1.0:
            raise ValueError(f"iou must be in (0, 1], got {iou}")
        if not math.isfinite(float(score_threshold)):
            raise ValueError(f"score_threshold must be finite, got {score_threshold}")
        self.iou = float(iou)
        self.score_threshold = float(score_threshold)
        self._truth = truth  # shared with other accumulators on the same images; read-only
        self._dets: dict[int, np.ndarray] = {}  # image id -> [K, 6] xywh, score, category
        self._nonfinite = 0

    def update(self, image_ids: Sequence[int], detections: Sequence[np.ndarray]) -> None:
        """Add the detections ([K, 6] x1, y1, x2, y2, score, category_id) of some images.

        Nothing is added unless every image of the call is valid; an error names the first
        invalid image, as checking the images one by one would."""
        if len(image_ids) != len(detections):
            raise ValueError(f"{len(detections)} detection arrays for {len(image_ids)} image ids")
        ids: list[int] = []
        arrays: list[np.ndarray] = []
        problem: str | None = None  # what is wrong with image len(ids), the first invalid one
        for image_id, det in zip(image_ids, detections):
            if not is_int(image_id):
                problem = f"image ids must be integers, got {image_id!r}"
                break
            i = int(image_id)
            if i not in self._truth.image_set:
                problem = f"image {i} is not in the ground truth"
                break
            if i in self._dets or i in ids:
                problem = f"image {i} was already added"
                break
            det = np.asarray(det, dtype=np.float64)
            if det.size == 0:
                det = det.reshape(0, 6)
            if det.ndim != 2 or det.shape[1] != 6:
                problem = (
                    f"image {i}: detections must have shape [K, 6] (x1, y1, x2, y2, score, "
                    f"category_id), got {list(det.shape)}"
                )
                break
            ids.append(i)
            arrays.append(det)
        if not ids:
            if problem:
                raise ValueError(problem)
            return
        # the rest on the valid images before the first problem at once, then split per image
        counts = np.array([len(a) for a in arrays], dtype=np.int64)
        owner = np.repeat(np.arange(len(arrays)), counts)
        det = np.concatenate(arrays)
        finite = np.isfinite(det).all(axis=1)
        det, owner_kept = det[finite], owner[finite]
        known = np.isin(det[:, 5], self._truth.cat_ids)
        if not known.all():  # an earlier image than the one `problem` names
            first = int(owner_kept[np.argmin(known)])
            bad = det[(owner_kept == first) & ~known, 5]
            raise ValueError(
                f"image {ids[first]}: category ids {sorted(set(bad.tolist()))} are not in the ground truth "
                f"(categories {self._truth.cat_ids[:10]}{' ...' if len(self._truth.cat_ids) > 10 else ''})"
            )
        if problem:
            raise ValueError(problem)
        xywh = det.copy()
        xywh[:, 2] = np.maximum(det[:, 2] - det[:, 0], 0.0)
        xywh[:, 3] = np.maximum(det[:, 3] - det[:, 1], 0.0)
        kept = np.bincount(owner_kept, minlength=len(arrays))
        parts = np.split(xywh, np.cumsum(kept)[:-1])
        self._dets.update(zip(ids, parts))
        self._nonfinite += int(np.count_nonzero(~finite))

    def merge(self, other: DetectionAccumulator) -> None:
        """Add the images of another shard (same ground truth and operating point, disjoint images)."""
        if other._truth.key != self._truth.key:
            raise ValueError("cannot merge detections evaluated against different ground truth")
        if (other.iou, other.score_threshold) != (self.iou, self.score_threshold):
            raise ValueError(
                f"cannot merge iou={other.iou}, score_threshold={other.score_threshold} into iou={self.iou}, "
                f"score_threshold={self.score_threshold}"
            )
        both = self._dets.keys() & other._dets.keys()
        if both:
            raise ValueError(f"the shards overlap: {len(both)} images in both (e.g. {min(both)})")
        self._dets.update(other._dets)
        self._nonfinite += other._nonfinite

    @property
    def images(self) -> list[int]:
        """Ids of the images added so far, sorted."""
        return sorted(self._dets)

    def compute(self, backend: str = "faster-coco-eval") -> DetectionMetrics:
        """COCO stats, per-class AP and P/R/F1 over every image added so far."""
        if backend not in BACKENDS:
            raise ValueError(f"unknown COCO backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        ids = self._need_images()
        results = [
            {"image_id": i, "category_id": int(r[5]), "bbox": [r[0], r[1], r[2], r[3]], "score": r[4]}
            for i in ids
            for r in self._dets[i].tolist()
        ]
        precision, recall = coco_arrays(self._truth.gt, ids, results, backend)
        out: dict[str, Any] = coco_stats(precision, recall)
        by_cat: dict[int, list[int]] = {cat: [0, 0, 0] for cat in self._truth.cat_ids}
        for counts in self._counts().values():
            for cat, c in counts.items():
                by_cat[cat] = [a + b for a, b in zip(by_cat[cat], c)]
        per_class = []
        t50 = iou_index(0.5)
        for k, cat in enumerate(self._truth.cat_ids):
            tp, fp, fn = by_cat[cat]
            per_class.append(
                CategoryMetrics(
                    category_id=cat,
                    name=self._truth.cat_names[cat],
                    ap=mean_valid(precision[:, :, k, 0, 2]),
                    ap50=mean_valid(precision[t50, :, k, 0, 2]),
                    **_prf(tp, fp, fn),
                    tp=tp,
                    fp=fp,
                    fn=fn,
                )
            )
        totals = [sum(c[j] for c in by_cat.values()) for j in range(3)]
        tp, fp, fn = (int(v) for v in totals)
        out.update(_prf(tp, fp, fn))
        out.update({"tp": tp, "fp": fp, "fn": fn})
        out["per_class"] = per_class
        out["iou"] = self.iou
        out["score_threshold"] = self.score_threshold
        out["images"] = len(ids)
        out["detections"] = sum(len(self._dets[i]) for i in ids)
        out["nonfinite_detections"] = self._nonfinite
        out["backend"] = backend
        return DetectionMetrics(**out)

    def state(self) -> State:
        """Everything added so far as plain arrays (no pickle), for a shard to hand to `merge`."""
        ids = self.images
        dets = [self._dets[i] for i in ids]
        return {
            "ids": np.asarray(ids, dtype=np.int64),
            "offsets": np.cumsum([0] + [len(d) for d in dets]).astype(np.int64),
            "dets": np.concatenate(dets) if dets else np.zeros((0, 6)),  # x, y, w, h, score, category
            "nonfinite": np.array(self._nonfinite),
        }

    @classmethod
    def from_state(
        cls, state: State, truth: GroundTruth, *, iou: float = 0.5, score_threshold: float = 0.3
    ) -> DetectionAccumulator:
        """An accumulator holding what `state()` of another held."""
        acc = cls(truth, iou=iou, score_threshold=score_threshold)
        offsets, dets = state["offsets"], state["dets"]
        acc._dets = {int(i): dets[offsets[k] : offsets[k + 1]] for k, i in enumerate(state["ids"])}
        acc._nonfinite = int(state["nonfinite"])
        return acc

    def per_image(self) -> dict[int, float]:
        """Per-image AP@[.5:.95] (see the module docstring), for finding the images that got worse."""
        out: dict[int, float] = {}
        for i in self._need_images():
            qs = [q for pair in self._pairs(i).values() if (q := pair.precision_curve()) is not None]
            out[i] = float(np.stack(qs, axis=-1).mean()) if qs else math.nan
        return out

    def per_image_counts(self) -> dict[int, dict[str, int]]:
        """Per-image tp/fp/fn at the accumulator's IoU and score threshold, summed over classes."""
        out: dict[int, dict[str, int]] = {}
        for i, by_cat in self._counts().items():
            tp, fp, fn = (int(sum(c[j] for c in by_cat.values())) for j in range(3))
            out[i] = {"tp": tp, "fp": fp, "fn": fn}
        return out

    def _need_images(self) -> list[int]:
        if not self._dets:
            raise ValueError(
                "no images: add detections (an empty [0, 6] array for an image without any) before computing"
            )
        return self.images

    def _pairs(self, image_id: int) -> dict[int, ImagePair]:
        """(category -> ImagePair, at most maxDets detections) of one image, for the categories with
        ground truth or detections."""
        gts = self._truth.by_image.get(image_id, [])
        det = self._dets[image_id]
        cats = sorted({a["category_id"] for a in gts} | set(det[:, 5].astype(np.int64).tolist()))
        return {c: ImagePair([a for a in gts if a["category_id"] == c], det[det[:, 5] == c], MAX_DETS) for c in cats}

    def _counts(self) -> dict[int, dict[int, tuple[int, int, int]]]:
        """image -> category -> (tp, fp, fn) at the accumulator's IoU and score threshold."""
        out = {}
        for i in self._need_images():
            det = self._dets[i]
            out[i] = ImagePair(self._truth.by_image.get(i, []), det[det[:, 4] >= self.score_threshold]).counts(self.iou)
        return out


# ----------------------------------------------------------------------------- the e2e task


class CategoryDelta(Record):
    """One category: the reference's AP@[.5:.95], the candidate's and the difference."""

    category_id: int
    name: str | None
    reference_ap: float | None
    candidate_ap: float | None
    delta_ap: float | None = optional("candidate - reference")


class DetectionWorst(Record):
    """An image whose AP dropped, largest drop first."""

    index: int = Field(description="position in the dataset")
    id: int = Field(description="COCO image id")
    reference_ap: float
    candidate_ap: float
    ap_drop: float
    reference_fp: int | None
    candidate_fp: int | None


class DetectionTask(Task):
    name = "detection"
    metrics_type = DetectionMetrics
    per_class_type = CategoryDelta
    worst_type = DetectionWorst

    def accumulator(self) -> DetectionAccumulator:
        return DetectionAccumulator(self.reader.truth, iou=self.cfg.iou, score_threshold=self.cfg.score_threshold)

    def restore(self, state: State) -> DetectionAccumulator:
        return DetectionAccumulator.from_state(
            state, self.reader.truth, iou=self.cfg.iou, score_threshold=self.cfg.score_threshold
        )

    def __init__(self, cfg: E2EStage, reader: Reader, search_path: Sequence[Path] = ()) -> None:
        super().__init__(cfg, reader, search_path)
        self.layout = None if self.hook is not None else DetectionLayout(cfg.postprocess, reader.truth.cat_ids)

    def postprocess(self, outputs: dict[str, np.ndarray], batch: Batch, model: str) -> list[np.ndarray]:
        size = input_size(batch, self.cfg.preprocess.layout)
        if self.layout is None:
            dets = call_hook(self.hook, outputs, image_sizes=batch.sizes, input_size=size)
        else:  # the built-in layouts give input pixels: to each image's size
            dets = self.layout.decode(outputs, size, model, batch=len(batch.index))
            for d, (h, w) in zip(dets, batch.sizes):
                d[:, [0, 2]] *= w / size[1]
                d[:, [1, 3]] *= h / size[0]
        if len(dets) != len(batch.index):
            raise UsageError(
                f"{model}: postprocessing returned {len(dets)} detection arrays for a batch of {len(batch.index)}"
            )
        return [np.asarray(d, dtype=np.float64).reshape(-1, 6) for d in dets]

    def update(self, acc: Any, positions: Sequence[int], predictions: Any, labels: Sequence[Any]) -> None:
        acc.update([self.reader.ids[i] for i in positions], predictions)

    def per_sample(self, acc: Any) -> tuple[dict[int, float], dict[int, dict[str, int]]]:
        """(image -> AP@[.5:.95], image -> tp/fp/fn)."""
        return acc.per_image(), acc.per_image_counts()

    def worst(self, reference: Any, candidate: Any, n: int) -> list[Record]:
        (ra, rc), (ca, cc) = reference, candidate
        index = {img_id: i for i, img_id in enumerate(self.reader.ids)}
        rows = largest_drops(ra, ca, lambda k: index.get(k, 0))  # AP undefined: no ground-truth box
        return [
            DetectionWorst(
                index=index[k],
                id=k,
                reference_ap=ra[k],
                candidate_ap=ca[k],
                ap_drop=d,
                reference_fp=rc.get(k, {}).get("fp"),
                candidate_fp=cc.get(k, {}).get("fp"),
            )
            for d, k in rows[:n]
        ]

    def sanity(self, metrics: TaskMetrics) -> list[str]:
        """No detection at all (or none at the score threshold), nearly all of one category, or a mAP
        under NEAR_ZERO_MAP."""
        assert isinstance(metrics, DetectionMetrics)
        if metrics.detections == 0:
            return ["no detections at all"]
        rows = metrics.per_class
        assert rows is not None, "computed metrics, not read back"
        predicted = [r.tp + r.fp for r in rows]
        if sum(predicted) == 0:
            return [f"no detection scores >= score_threshold {metrics.score_threshold:g}"]
        reasons = []
        if len(rows) > 1:
            names = [f"category {r.category_id} ({r.name})" for r in rows]
            one = dominant_class(predicted, [r.tp + r.fn for r in rows], names, "detections")
            reasons += [one] if one else []
        if metrics.map == metrics.map and metrics.map < NEAR_ZERO_MAP:
            reasons.append(f"map {metrics.map:.4f} is below {NEAR_ZERO_MAP:g}: next to nothing is found")
        return reasons

    def per_class(self, reference: TaskMetrics, candidate: TaskMetrics) -> list[Record]:
        assert isinstance(reference, DetectionMetrics) and isinstance(candidate, DetectionMetrics)
        assert reference.per_class is not None and candidate.per_class is not None, "computed metrics, not read back"
        return class_deltas(reference.per_class, candidate.per_class, "category_id", "ap", CategoryDelta)
