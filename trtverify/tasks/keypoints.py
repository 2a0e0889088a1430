"""Keypoint (pose) task: COCO keypoint AP by COCO's OKS evaluation (faster-coco-eval), and PCK, for top-down models.

Definitions:
- a sample is one person: a COCO annotation with `keypoints` [x1, y1, v1, ...] (K triplets), num_keypoints > 0,
  not a crowd, with a bbox of positive size. Its image is the crop of the bbox, widened by `options.padding`
  (default 1.25, as SimpleBaselines/HRNet crop) around the box centre to the model input's aspect ratio
  (`preprocess.resize`; square without it); pixels outside the image are black. Preprocessing resizes the crop;
- the built-in post-processing reads heatmaps [B, K, H, W] (`postprocess.output`, default the first output): per
  keypoint the arg-max, optionally moved a quarter pixel towards the higher neighbour on each axis
  (`options.refine: quarter`, the shift of Newell et al. 2016 and Xiao et al. 2018), mapped to the crop with pixel
  centres at integers (heatmap x -> (x + 0.5) * crop_width / W - 0.5) and to the image by the crop's offset; its
  score is the peak value. A NaN heatmap value is never the peak, +inf is; a heatmap holding a NaN or an inf counts
  in `nonfinite_keypoints` (its peak may be wrong); a keypoint whose heatmap has no peak at all (all NaN) or a
  hook's non-finite coordinates is placed at the crop centre with score 0 (a miss, and counted too);
- a `postprocess.hook` returns [B, K, 3] (x, y, score) or [B, K, 2] per sample in the crop's pixels
  (`image_sizes`: each crop's (height, width)); the task adds the crop's offset;
- COCO keypoint AP/AR: COCOeval(iouType='keypoints') of faster-coco-eval (= pycocotools', tested) with
  `params.kpt_oks_sigmas` the suite's `options.sigmas` (default COCO's 17 person sigmas when K == 17), over the
  images of the evaluated samples, with their ground truth the evaluated persons plus the crowd regions (persons
  not evaluated never count as misses).
  One prediction per person, its score the mean of its keypoint scores. The 10 numbers of COCOeval.summarize() for
  keypoints: map (AP@[.5:.95], maxDets 20), ap50, ap75, ap_medium, ap_large, ar, ar50, ar75, ar_medium, ar_large;
  NaN where COCO writes -1 (no ground truth of that area);
- OKS of a prediction with its own person (per sample, `mean_oks` and the worst samples): COCO's
  sum over labelled keypoints (v > 0) of exp(-d^2 / (2 s^2 k^2)) / their count, s^2 the annotation's `area`
  (the bbox's w x h without one), k = 2 sigma (pycocotools' computeOks);
- PCK@alpha (`options.pck_alpha`, default 0.2): the share of labelled keypoints (v > 0) predicted within
  alpha x max(bbox width, bbox height) pixels of the truth (Yang & Ramanan, "Articulated human detection with
  flexible mixtures of parts", TPAMI 2013, section 7; MMPose's PCKAccuracy with norm_item='bbox'); per keypoint
  in `per_class`.
"""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from trtverify.config.stages import E2EStage
from trtverify.config.types import Strict
from trtverify.tasks.base import ClassRow, State, Task, TaskMetrics, call_hook, class_deltas, largest_drops
from trtverify.tasks.batches import Batch
from trtverify.tasks.coco import is_int, is_real, read_coco
from trtverify.tasks.datasets import Reader, _read_image
from trtverify.util.errors import UsageError
from trtverify.util.record import Record, optional

# COCO's person keypoint sigmas (pycocotools' COCOeval Params.setKpParams), in COCO's keypoint order
COCO_SIGMAS = tuple(
    s / 10.0
    for s in (0.26, 0.25, 0.25, 0.35, 0.35, 0.79, 0.79, 0.72, 0.72, 0.62, 0.62, 1.07, 1.07, 0.87, 0.87, 0.89, 0.89)
)
KPT_STATS = ("map", "ap50", "ap75", "ap_medium", "ap_large", "ar", "ar50", "ar75", "ar_medium", "ar_large")
NEAR_ZERO_MAP = 0.01


class KeypointOptions(Strict):
    """`stages.e2e.options` of task keypoints."""

    sigmas: list[float] | None = Field(
        default=None,
        description="per-keypoint OKS sigmas, in the keypoint order of the annotations (default: COCO's 17 person "
        "sigmas when there are 17 keypoints; required otherwise)",
    )
    pck_alpha: float = Field(default=0.2, gt=0, description="PCK threshold: alpha x max(bbox width, height)")
    padding: float = Field(default=1.25, ge=1, description="the person crop: the bbox widened by this factor")
    refine: Literal["quarter", "none"] = Field(
        default="quarter", description="heatmap peak: quarter-pixel shift towards the higher neighbour, or none"
    )

    @field_validator("sigmas")
    @classmethod
    def _positive(cls, v: list[float] | None) -> list[float] | None:
        if v is not None and (not v or any(not (math.isfinite(s) and s > 0) for s in v)):
            raise ValueError("sigmas must be a non-empty list of finite numbers > 0")
        return v


# ----------------------------------------------------------------------------- ground truth


class KeypointTruth:
    """The persons of a COCO person_keypoints file: samples (by position) and their crops, checked once."""

    def __init__(self, data: Any, source: str, limit: int | None, aspect: float, padding: float) -> None:
        problems: list[str] = []
        if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("images", "annotations")):
            raise UsageError(f"{source}: a COCO keypoints file is an object with lists 'images' and 'annotations'")
        cats = [c for c in data.get("categories") or [] if isinstance(c, dict) and isinstance(c.get("keypoints"), list)]
        self.names: list[str] | None = [str(n) for n in cats[0]["keypoints"]] if cats else None
        self.category = int(cats[0]["id"]) if cats and is_int(cats[0].get("id")) else 1
        self.images = {im["id"]: im for im in data["images"] if isinstance(im, dict) and is_int(im.get("id"))}
        persons, crowds, k = [], [], None
        for i, a in enumerate(data["annotations"]):
            if not isinstance(a, dict) or a.get("image_id") not in self.images:
                problems.append(f"annotations[{i}] has no 'image_id' of 'images'")
                continue
            bb = a.get("bbox")
            if not (isinstance(bb, list) and len(bb) == 4 and all(is_real(v) and math.isfinite(v) for v in bb)):
                problems.append(f"annotations[{i}] 'bbox' must be [x, y, width, height], got {bb!r}")
                continue
            if a.get("iscrowd", 0):
                crowds.append(a)
                continue
            kp = a.get("keypoints")
            if not (isinstance(kp, list) and kp and len(kp) % 3 == 0 and all(is_real(v) for v in kp)):
                problems.append(f"annotations[{i}] 'keypoints' must be [x1, y1, v1, ...] (K triplets)")
                continue
            if k is None:
                k = len(kp) // 3
            elif len(kp) // 3 != k:
                problems.append(f"annotations[{i}] has {len(kp) // 3} keypoints, the first {k}")
                continue
            if any(v > 0 for v in kp[2::3]) and bb[2] > 0 and bb[3] > 0:
                persons.append(a)
            if len(problems) >= 10:
                break
        if problems:
            raise UsageError(f"{source}: invalid COCO keypoints ground truth: " + "; ".join(problems[:10]))
        if not persons or k is None:
            raise UsageError(f"{source}: no person with labelled keypoints (v > 0) and a bbox; nothing to evaluate")
        if self.names is not None and len(self.names) != k:
            raise UsageError(f"{source}: the category names {len(self.names)} keypoints, the annotations hold {k}")
        persons.sort(key=lambda a: (a["image_id"], a.get("id", 0)))
        self.persons = persons[:limit] if limit else persons
        self.crowds = crowds
        self.k = k
        self.source = source
        kp = np.array([a["keypoints"] for a in self.persons], np.float64).reshape(-1, k, 3)
        self.xy, self.visible = kp[..., :2], kp[..., 2] > 0
        self.bbox = np.array([a["bbox"] for a in self.persons], np.float64)
        self.area = np.array([float(a.get("area") or b[2] * b[3]) for a, b in zip(self.persons, self.bbox)])
        self.crops = np.array([crop_box(b, aspect, padding) for b in self.bbox], np.int64)  # x0, y0, w, h

    def image_path(self, root: Path, i: int) -> Path:
        im = self.images[self.persons[i]["image_id"]]
        name = im.get("file_name")
        if not isinstance(name, str) or not name:
            raise UsageError(f"{self.source}: image {im['id']} has no 'file_name' string, got {name!r}")
        return root / name


def crop_box(bbox: Sequence[float], aspect: float, padding: float) -> tuple[int, int, int, int]:
    """(x0, y0, width, height), whole pixels: the bbox around its centre widened by `padding` to width/height =
    `aspect`."""
    x, y, w, h = bbox
    w, h = (w, w / aspect) if w / h > aspect else (h * aspect, h)
    w, h = max(1, round(w * padding)), max(1, round(h * padding))
    cx, cy = x + bbox[2] / 2, y + bbox[3] / 2
    return round(cx - w / 2), round(cy - h / 2), int(w), int(h)


def crop(image: np.ndarray, box: Sequence[int]) -> np.ndarray:
    """The pixels of `box` (x0, y0, w, h) of an HWC image; black outside it."""
    x0, y0, w, h = (int(v) for v in box)
    out = np.zeros((h, w, image.shape[2]), image.dtype)
    ih, iw = image.shape[:2]
    sx0, sy0, sx1, sy1 = max(x0, 0), max(y0, 0), min(x0 + w, iw), min(y0 + h, ih)
    if sx1 > sx0 and sy1 > sy0:
        out[sy0 - y0 : sy1 - y0, sx0 - x0 : sx1 - x0] = image[sy0:sy1, sx0:sx1]
    return out


# ----------------------------------------------------------------------------- metrics


def oks(pred: np.ndarray, xy: np.ndarray, visible: np.ndarray, area: np.ndarray, sigmas: np.ndarray) -> np.ndarray:
    """OKS [N] of predictions [N, K, 2] with their own persons, as pycocotools' computeOks; NaN coordinates
    contribute 0."""
    var = (2 * sigmas) ** 2
    d2 = ((pred - xy) ** 2).sum(-1)
    e = d2 / var[None] / (area[:, None] + np.spacing(1)) / 2
    term = np.where(visible & np.isfinite(e), np.exp(-np.where(np.isfinite(e), e, 0)), 0.0)
    return term.sum(1) / np.maximum(visible.sum(1), 1)


def pck_hits(pred: np.ndarray, xy: np.ndarray, bbox: np.ndarray, alpha: float) -> np.ndarray:
    """[N, K]: the keypoint lies within alpha x max(bbox w, h) of the truth (NaN: not)."""
    d = np.sqrt(((pred - xy) ** 2).sum(-1))
    return np.nan_to_num(d, nan=np.inf) <= alpha * np.maximum(bbox[:, 2], bbox[:, 3])[:, None]


def coco_keypoint_stats(truth: KeypointTruth, rows: np.ndarray, pred: np.ndarray, sigmas: np.ndarray) -> list[float]:
    """COCOeval(iouType='keypoints').stats of predictions [N, K, 3] of the persons at `rows`; NaN for -1. Computed by
    faster-coco-eval, the COCO evaluator trtverify installs (as detection's, tasks/coco.py); the tests check it
    against pycocotools'."""
    from faster_coco_eval import COCO, COCOeval_faster

    persons = [truth.persons[i] for i in rows]
    image_ids = sorted({a["image_id"] for a in persons})
    wanted = set(image_ids)
    anns = []
    for n, a in enumerate([*persons, *(c for c in truth.crowds if c["image_id"] in wanted)], start=1):
        kp = [float(v) for v in a.get("keypoints") or [0.0] * 3 * truth.k]
        bb = [float(v) for v in a["bbox"]]
        nk = sum(1 for v in kp[2::3] if v > 0)
        area = float(a.get("area") or bb[2] * bb[3])
        crowd = int(bool(a.get("iscrowd", 0)))
        anns.append({"id": n, "image_id": a["image_id"], "category_id": truth.category, "bbox": bb, "area": area,
                     "iscrowd": crowd, "keypoints": kp, "num_keypoints": nk})  # fmt: skip
    p = np.where(np.isfinite(pred), pred, 0.0)
    results = [
        {
            "image_id": a["image_id"],
            "category_id": truth.category,
            "keypoints": [float(v) for v in np.column_stack([p[n, :, :2], np.ones(truth.k)]).ravel()],
            "score": float(np.mean(p[n, :, 2])),
        }
        for n, a in enumerate(persons)
    ]
    with contextlib.redirect_stdout(io.StringIO()):  # the evaluator prints its progress and summary
        gt = COCO({"images": [{"id": i} for i in image_ids], "annotations": anns,
                   "categories": [{"id": truth.category, "name": "person"}]})  # fmt: skip
        ev = COCOeval_faster(gt, gt.loadRes(results), "keypoints", kpt_oks_sigmas=np.asarray(sigmas, np.float64))
        ev.params.imgIds = image_ids
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return [float(s) if s > -1 else math.nan for s in ev.stats[:10]]


class KeypointRow(ClassRow):
    """One keypoint (its index is written as "class")."""

    name: str
    pck: float = Field(description="share of its labelled occurrences predicted within the PCK radius")
    mean_error: float = Field(description="mean distance to the truth over its labelled occurrences, in pixels")
    labelled: int = Field(description="persons on which it is labelled (v > 0)")


class KeypointMetrics(TaskMetrics):
    map: float = Field(description="COCO keypoint AP@[.5:.95] (OKS), pycocotools")
    ap50: float
    ap75: float
    ap_medium: float
    ap_large: float
    ar: float = Field(description="COCO keypoint AR@[.5:.95], maxDets 20")
    ar50: float
    ar75: float
    ar_medium: float
    ar_large: float
    pck: float = Field(description="share of labelled keypoints within pck_alpha x max(bbox w, h)")
    mean_oks: float = Field(description="mean OKS of each person's prediction with that person")
    pck_alpha: float
    persons: int
    nonfinite_keypoints: int = Field(description="keypoints whose heatmap holds a NaN or inf (or hook coordinates do)")
    per_class: list[KeypointRow] | None = optional("per keypoint")


class KeypointDelta(ClassRow):
    """One keypoint: the reference's PCK, the candidate's and the difference."""

    name: str | None
    reference_pck: float | None
    candidate_pck: float | None
    delta_pck: float | None = optional("candidate - reference")


class KeypointWorst(Record):
    """A person whose OKS dropped, largest drop first."""

    index: int = Field(description="position in the dataset (persons in image id, annotation id order)")
    id: Any = Field(description="the COCO annotation id")
    image_id: int
    reference_oks: float
    candidate_oks: float
    oks_drop: float


class KeypointAccumulator:
    """Predictions [K, 3] (x, y, score in image pixels) of persons by dataset position."""

    def __init__(self, truth: KeypointTruth, sigmas: np.ndarray, alpha: float) -> None:
        self.truth, self.sigmas, self.alpha = truth, sigmas, alpha
        self._pred: dict[int, np.ndarray] = {}
        self._nonfinite = 0

    def update(self, positions: Sequence[int], predictions: Sequence[np.ndarray], nonfinite: int = 0) -> None:
        for i, p in zip(positions, predictions):
            self._pred[int(i)] = np.asarray(p, np.float64)
        self._nonfinite += nonfinite

    def merge(self, other: KeypointAccumulator) -> None:
        both = self._pred.keys() & other._pred.keys()
        if both:
            raise ValueError(f"the shards overlap: {len(both)} persons in both (e.g. position {min(both)})")
        self._pred.update(other._pred)
        self._nonfinite += other._nonfinite

    def _rows(self) -> tuple[np.ndarray, np.ndarray]:
        if not self._pred:
            raise ValueError("no persons: add predictions before computing")
        rows = np.array(sorted(self._pred), np.int64)
        return rows, np.stack([self._pred[int(i)] for i in rows])

    def per_person(self) -> dict[int, float]:
        rows, pred = self._rows()
        t = self.truth
        values = oks(pred[..., :2], t.xy[rows], t.visible[rows], t.area[rows], self.sigmas)
        return dict(zip(rows.tolist(), values.tolist()))

    def compute(self) -> KeypointMetrics:
        rows, pred = self._rows()
        t = self.truth
        stats = coco_keypoint_stats(t, rows, pred, self.sigmas)
        vis = t.visible[rows]
        hits = pck_hits(pred[..., :2], t.xy[rows], t.bbox[rows], self.alpha) & vis
        dist = np.sqrt(((pred[..., :2] - t.xy[rows]) ** 2).sum(-1))
        names = t.names or [str(j) for j in range(t.k)]
        per = []
        for j in range(t.k):
            n = int(vis[:, j].sum())
            d = dist[vis[:, j], j]
            per.append(KeypointRow(class_=j, name=names[j], pck=hits[:, j].sum() / n if n else math.nan,
                                   mean_error=float(d.mean()) if n else math.nan, labelled=n))  # fmt: skip
        oks_values = oks(pred[..., :2], t.xy[rows], vis, t.area[rows], self.sigmas)
        return KeypointMetrics(
            **dict(zip(KPT_STATS, stats)),
            pck=float(hits.sum() / vis.sum()),
            mean_oks=float(oks_values.mean()),
            pck_alpha=self.alpha,
            persons=len(rows),
            nonfinite_keypoints=self._nonfinite,
            per_class=per,
        )

    def state(self) -> State:
        rows = sorted(self._pred)
        pred = np.stack([self._pred[i] for i in rows]) if rows else np.zeros((0, self.truth.k, 3))
        return {"rows": np.asarray(rows, np.int64), "pred": pred, "nonfinite": np.array(self._nonfinite)}

    @classmethod
    def from_state(cls, state: State, truth: KeypointTruth, sigmas: np.ndarray, alpha: float) -> KeypointAccumulator:
        acc = cls(truth, sigmas, alpha)
        acc._pred = {int(i): p for i, p in zip(state["rows"], state["pred"])}
        acc._nonfinite = int(state["nonfinite"])
        return acc


# ----------------------------------------------------------------------------- heatmaps


def decode_heatmaps(heatmaps: np.ndarray, refine: bool = True) -> tuple[np.ndarray, int]:
    """[B, K, H, W] -> ([B, K, 3] x, y, peak in heatmap pixels; how many heatmaps hold a NaN or an inf).

    NaN is never the peak; +inf is the largest value. A keypoint whose heatmap is all NaN or -inf gets NaN
    coordinates."""
    b, k, h, w = heatmaps.shape
    flat = heatmaps.reshape(b, k, h * w).astype(np.float64)
    clean = np.where(np.isnan(flat), -np.inf, flat)
    idx = np.argmax(clean, axis=-1)
    peak = np.take_along_axis(clean, idx[..., None], -1)[..., 0]
    y, x = (idx // w).astype(np.float64), (idx % w).astype(np.float64)
    if refine:
        hm = clean.reshape(b, k, h, w)
        bi, ki = np.indices((b, k))
        yi, xi = y.astype(np.int64), x.astype(np.int64)
        for axis_val, lo_ok, hi_ok, get in (
            (x, xi > 0, xi < w - 1, lambda o: hm[bi, ki, yi, np.clip(xi + o, 0, w - 1)]),
            (y, yi > 0, yi < h - 1, lambda o: hm[bi, ki, np.clip(yi + o, 0, h - 1), xi]),
        ):
            with np.errstate(invalid="ignore"):
                diff = get(1) - get(-1)
            shift = np.where(lo_ok & hi_ok & np.isfinite(diff), 0.25 * np.sign(np.nan_to_num(diff)), 0.0)
            axis_val += shift
    none = ~np.isfinite(peak) & (peak != np.inf)  # every value NaN or -inf
    x[none], y[none] = np.nan, np.nan
    nonfinite = int((~np.isfinite(flat)).any(-1).sum())
    return np.stack([x, y, np.where(np.isfinite(peak), peak, np.where(peak > 0, 1.0, 0.0))], -1), nonfinite


class KeypointTask(Task):
    name = "keypoints"
    metrics_type = KeypointMetrics
    per_class_type = KeypointDelta
    worst_type = KeypointWorst

    def __init__(self, cfg: E2EStage, reader: Reader, search_path: Sequence[Path] = ()) -> None:
        super().__init__(cfg, reader, search_path)
        truth: KeypointTruth = reader.truth
        sig = self.options.sigmas
        if sig is None and truth.k != len(COCO_SIGMAS):
            raise UsageError(f"{truth.source}: {truth.k} keypoints, not COCO's 17: give their OKS sigmas in "
                             "stages.e2e.options.sigmas")  # fmt: skip
        if sig is not None and len(sig) != truth.k:
            raise UsageError(f"stages.e2e.options.sigmas: {len(sig)} sigmas for {truth.k} keypoints ({truth.source})")
        self.sigmas = np.asarray(sig if sig is not None else COCO_SIGMAS, np.float64)

    @classmethod
    def read(cls, cfg: E2EStage) -> tuple[Reader, E2EStage]:
        """The persons of the suite's COCO keypoints file, each a crop of its image (what `open` and the
        drill-down read)."""
        path = Path(cfg.dataset.coco)  # type: ignore[arg-type]  # the loader allows this task dataset.coco only
        options = cfg.task_options()
        resize = cfg.preprocess.resize
        aspect = resize[1] / resize[0] if resize else 1.0
        try:
            data = read_coco(path)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        truth = KeypointTruth(data, str(path), cfg.dataset.limit, aspect, options.padding)
        root = Path(cfg.dataset.images) if cfg.dataset.images else path.parent / "images"
        reader = Reader(
            [a.get("id") for a in truth.persons],
            lambda i: crop(_read_image(truth.image_path(root, i)), truth.crops[i]),
            lambda i: None,
            truth.names,
            truth=truth,
            info={"source": str(path), "images": str(root)},
        )
        return reader, cfg

    def accumulator(self) -> KeypointAccumulator:
        return KeypointAccumulator(self.reader.truth, self.sigmas, self.options.pck_alpha)

    def restore(self, state: State) -> KeypointAccumulator:
        return KeypointAccumulator.from_state(state, self.reader.truth, self.sigmas, self.options.pck_alpha)

    def postprocess(self, outputs: dict[str, np.ndarray], batch: Batch, model: str) -> tuple[list[np.ndarray], int]:
        k = self.reader.truth.k
        if self.hook is not None:
            kp = np.asarray(call_hook(self.hook, outputs, image_sizes=batch.sizes), np.float64)
            if kp.ndim != 3 or kp.shape[:2] != (len(batch.index), k) or kp.shape[2] not in (2, 3):
                raise UsageError(f"{model}: postprocess.hook returned shape {list(kp.shape)}; expected "
                                 f"[{len(batch.index)}, {k}, 3] (x, y, score) or [..., 2] in crop pixels")  # fmt: skip
            if kp.shape[2] == 2:
                kp = np.concatenate([kp, np.ones(kp.shape[:2] + (1,))], -1)
            bad = ~np.isfinite(kp[..., :2]).all(-1)
            kp[bad] = np.nan
            nonfinite = int(bad.sum())
        else:
            name = self.cfg.postprocess.output
            raw = np.asarray(outputs[name] if name else next(iter(outputs.values())))
            if name and name not in outputs:
                raise UsageError(f"postprocess.output '{name}' is not an output of {model} ({', '.join(outputs)})")
            if raw.ndim != 4 or raw.shape[:2] != (len(batch.index), k):
                raise UsageError(f"{model}: output of shape {list(raw.shape)} is not heatmaps [{len(batch.index)}, "
                                 f"{k}, H, W]; name the right output or give a postprocess.hook")  # fmt: skip
            kp, nonfinite = decode_heatmaps(raw, self.options.refine == "quarter")
            h, w = raw.shape[2:]
            for n, (ch, cw) in enumerate(batch.sizes):
                kp[n, :, 0] = (kp[n, :, 0] + 0.5) * cw / w - 0.5
                kp[n, :, 1] = (kp[n, :, 1] + 0.5) * ch / h - 0.5
        crops = self.reader.truth.crops
        for n, i in enumerate(batch.index):
            ch, cw = batch.sizes[n]
            miss = np.isnan(kp[n, :, 0]) | np.isnan(kp[n, :, 1])
            kp[n, miss] = [(cw - 1) / 2, (ch - 1) / 2, 0.0]
            kp[n, :, 0] += crops[i][0]
            kp[n, :, 1] += crops[i][1]
        return list(kp), nonfinite

    def update(self, acc: Any, positions: Sequence[int], predictions: Any, labels: Sequence[Any]) -> None:
        kp, nonfinite = predictions
        acc.update(positions, kp, nonfinite)

    def per_sample(self, acc: Any) -> dict[int, float]:
        return acc.per_person()

    def worst(self, reference: Any, candidate: Any, n: int) -> list[Record]:
        persons = self.reader.truth.persons
        return [
            KeypointWorst(
                index=i,
                id=persons[i].get("id"),
                image_id=persons[i]["image_id"],
                reference_oks=reference[i],
                candidate_oks=candidate[i],
                oks_drop=d,
            )  # fmt: skip
            for d, i in largest_drops(reference, candidate, lambda i: i)[:n]
        ]

    def sanity(self, metrics: TaskMetrics) -> list[str]:
        assert isinstance(metrics, KeypointMetrics)
        if not metrics.map >= NEAR_ZERO_MAP:  # NaN too
            return [f"map {metrics.map:.4f} is below {NEAR_ZERO_MAP:g}: next to no keypoint lands near its truth"]
        return []

    def per_class(self, reference: TaskMetrics, candidate: TaskMetrics) -> list[Record]:
        assert isinstance(reference, KeypointMetrics) and isinstance(candidate, KeypointMetrics)
        assert reference.per_class is not None and candidate.per_class is not None, "computed metrics, not read back"
        return class_deltas(reference.per_class, candidate.per_class, "class_", "pck", KeypointDelta)
