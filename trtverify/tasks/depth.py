"""Depth-estimation task metrics: AbsRel, SqRel, RMSE, RMSE log and the δ < 1.25^k accuracies.

Definitions (Eigen, Puhrsch & Fergus, "Depth Map Prediction from a Single Image using a Multi-Scale Deep
Network", NIPS 2014, section 4; as computed by monodepth / monodepth2's `compute_errors` and the KITTI and NYU
literature since), over the valid pixels i of one image, d the ground truth and p the prediction:
- abs_rel = mean |p - d| / d;  sq_rel = mean (p - d)^2 / d;
- rmse = sqrt(mean (p - d)^2);  rmse_log = sqrt(mean (ln p - ln d)^2);
- delta1/2/3 = share of the pixels with max(p / d, d / p) < 1.25, 1.25^2, 1.25^3.
Each metric is computed per image and then averaged over the images (monodepth's convention, so RMSE is the
mean of the per-image RMSEs, not the RMSE of all pixels pooled).

Conventions:
- a pixel is valid when its ground truth is finite and within [min_depth, max_depth] (0 and NaN mark missing
  depth in KITTI / NYU files); an image without a valid pixel counts for nothing (`empty_images`);
- the prediction is the model's depth, or `disparity_scale / disparity` when the model outputs disparity;
  with `scale: median` it is multiplied per image by median(d) / median(p) over the valid pixels (monodepth's
  median scaling for scale-ambiguous models);
- then it is clamped to [min_depth, max_depth] (monodepth's clamp; no upper clamp without max_depth);
- a NaN prediction on a valid pixel has no value: it fails every δ and makes the image's error metrics
  infinite, so it cannot pass unnoticed (counted in `nan_pixels`).

The accumulator keeps the seven metrics of each image (and its pixel counts), so shards merge exactly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from trtverify.config.types import Strict
from trtverify.tasks.base import State, Task, TaskMetrics, call_hook, largest_drops, select_output
from trtverify.tasks.batches import Batch
from trtverify.util.errors import UsageError
from trtverify.util.record import Record

METRICS = ("abs_rel", "sq_rel", "rmse", "rmse_log", "delta1", "delta2", "delta3")
LOWER_IS_BETTER = ("abs_rel", "sq_rel", "rmse", "rmse_log")  # the error metrics: their gates take rises
THRESHOLD = 1.25


class DepthOptions(Strict):
    """The depth task's settings (`stages.e2e.options`)."""

    min_depth: float = Field(
        default=1e-3, gt=0, description="ground truth below this is invalid; predictions are clamped up to it"
    )
    max_depth: float | None = Field(
        default=None, gt=0, description="ground truth above this is invalid; predictions are clamped down to it "
        "(KITTI: 80, NYU: 10; null: no upper limit)"
    )  # fmt: skip
    scale: Literal["none", "median"] = Field(
        default="none", description="median: scale each prediction by median(truth) / median(prediction) over the "
        "valid pixels (monodepth's, for models whose depth is known only up to scale)"
    )  # fmt: skip
    output: Literal["depth", "disparity"] = Field(
        default="depth", description="what the model outputs: depth, or disparity (depth = disparity_scale / it)"
    )
    disparity_scale: float = Field(
        default=1.0, gt=0, description="output disparity: depth = disparity_scale / disparity (e.g. focal x baseline)"
    )

    ranges: list[float] | None = Field(
        default=None, description="edges of the ground-truth depth ranges compared one by one (e.g. [0, 10, 20, 80]); "
        "default: three equal ranges of [min_depth, max_depth], none without max_depth"
    )  # fmt: skip

    @model_validator(mode="after")
    def _range(self) -> DepthOptions:
        if self.max_depth is not None and self.max_depth <= self.min_depth:
            raise ValueError(f"max_depth {self.max_depth:g} must be above min_depth {self.min_depth:g}")
        if self.ranges is not None and (
            len(self.ranges) < 2 or any(b <= a for a, b in zip(self.ranges, self.ranges[1:]))
        ):
            raise ValueError(f"ranges {self.ranges} must be at least two increasing edges")
        return self

    def edges(self) -> np.ndarray:
        """The edges of the depth ranges (none: no ranges)."""
        if self.ranges is not None:
            return np.asarray(self.ranges, np.float64)
        if self.max_depth is None:
            return np.zeros(0)
        return np.linspace(self.min_depth, self.max_depth, 4)


def image_errors(truth: np.ndarray, pred: np.ndarray, opts: DepthOptions) -> tuple[np.ndarray, int, int, np.ndarray]:
    """The seven metrics (METRICS order) of one image, its valid pixels, its NaN predictions among them, and per
    depth range (`opts.edges()`, by ground truth) the pixels, their sum of |p - d| / d and their count of δ < 1.25.
    `truth`, `pred`: depth maps of one shape (the prediction as depth, not yet scaled or clamped)."""
    edges = opts.edges()
    ranges = np.zeros((max(len(edges) - 1, 0), 3))
    truth = np.asarray(truth, np.float64)
    pred = np.asarray(pred, np.float64)
    valid = np.isfinite(truth) & (truth >= opts.min_depth)
    if opts.max_depth is not None:
        valid &= truth <= opts.max_depth
    d, p = truth[valid], pred[valid]
    if d.size == 0:
        return np.full(len(METRICS), np.nan), 0, 0, ranges
    nan = np.isnan(p)
    if opts.scale == "median" and not nan.all():
        med = np.median(p[~nan])
        p = p * (np.median(d) / med) if med > 0 else p
    p = np.clip(p, opts.min_depth, opts.max_depth if opts.max_depth is not None else np.inf)
    ratio = np.maximum(p / d, d / p)
    deltas = [float(np.mean(np.where(nan, False, ratio < THRESHOLD**k))) for k in (1, 2, 3)]
    if len(edges):
        rel = np.where(nan, np.inf, np.abs(p - d) / d)
        hit = ~nan & (ratio < THRESHOLD)
        at = np.searchsorted(edges, d, side="right") - 1  # range k holds edges[k] <= d < edges[k + 1]
        at[d == edges[-1]] = len(edges) - 2  # the last range holds its upper edge
        inside = (at >= 0) & (at < len(edges) - 1)
        for k in range(len(edges) - 1):
            m = inside & (at == k)
            ranges[k] = (m.sum(), rel[m].sum(), hit[m].sum())
    if nan.any():
        return np.array([math.inf] * 4 + deltas), int(d.size), int(nan.sum()), ranges
    with np.errstate(over="ignore", invalid="ignore"):
        diff = p - d
        out = [
            np.mean(np.abs(diff) / d),
            np.mean(diff**2 / d),
            np.sqrt(np.mean(diff**2)),
            np.sqrt(np.mean((np.log(p) - np.log(d)) ** 2)),
        ]
    return np.array([float(v) for v in out] + deltas), int(d.size), 0, ranges


class DepthRangeRow(Record):
    """One ground-truth depth range, its pixels pooled over the images."""

    depth_range: str = Field(description="[low, high) of the ground truth, in the depth's unit")
    pixels: int
    abs_rel: float = Field(description="mean |p - d| / d over the range's pixels (NaN without any)")
    delta1: float = Field(description="share of the range's pixels with max(p/d, d/p) < 1.25 (NaN without any)")


def range_rows(edges: np.ndarray, totals: np.ndarray) -> list[DepthRangeRow]:
    rows = []
    for k in range(len(edges) - 1):
        n, rel, hit = totals[k]
        close = "]" if k == len(edges) - 2 else ")"
        label = f"[{edges[k]:g}, {edges[k + 1]:g}{close}"
        mean_rel, share = (float(rel / n), float(hit / n)) if n else (math.nan, math.nan)
        rows.append(DepthRangeRow(depth_range=label, pixels=int(n), abs_rel=mean_rel, delta1=share))
    return rows


def _plane(depth: Any) -> np.ndarray:
    """A depth map [H, W] from [1, H, W] or [H, W, 1] (one channel); other shapes as they are."""
    a = np.asarray(depth)
    if a.ndim == 3 and a.shape[0] == 1:
        return a[0]
    if a.ndim == 3 and a.shape[-1] == 1:
        return a[..., 0]
    return a


class DepthMetrics(TaskMetrics):
    abs_rel: float = Field(description="mean over images of mean |p - d| / d (lower is better)")
    sq_rel: float = Field(description="mean over images of mean (p - d)^2 / d (lower is better)")
    rmse: float = Field(description="mean over images of sqrt(mean (p - d)^2), in the depth's unit (lower is better)")
    rmse_log: float = Field(description="mean over images of sqrt(mean (ln p - ln d)^2) (lower is better)")
    delta1: float = Field(description="mean over images of the share of pixels with max(p/d, d/p) < 1.25")
    delta2: float = Field(description="the same below 1.25^2")
    delta3: float = Field(description="the same below 1.25^3")
    samples: int = Field(description="images with at least one valid pixel")
    empty_images: int = Field(description="images without a valid ground-truth pixel (left out)")
    pixels: int = Field(description="valid ground-truth pixels counted")
    invalid_pixels: int = Field(description="pixels whose ground truth is missing or outside [min_depth, max_depth]")
    nan_pixels: int = Field(description="valid pixels whose prediction is NaN (they fail every metric)")
    per_range: list[DepthRangeRow] = Field(description="per ground-truth depth range (options.ranges), pixels pooled")


class DepthAccumulator:
    """The seven metrics of each image of a validation set; their means once at the end."""

    def __init__(self, opts: DepthOptions) -> None:
        self.opts = opts
        self._ids: list[int] = []
        self._rows: list[np.ndarray] = []  # per image: METRICS
        self._counts: list[np.ndarray] = []  # per image: valid, invalid, nan pixels
        self._bins = max(len(opts.edges()) - 1, 0)
        self._ranges: list[np.ndarray] = []  # per image, per range: pixels, sum of abs rel, δ1 hits

    def update(self, ids: Sequence[int], truths: Sequence[np.ndarray], preds: Sequence[np.ndarray]) -> None:
        if not len(ids) == len(truths) == len(preds):
            raise ValueError(f"{len(ids)} ids, {len(truths)} depth maps and {len(preds)} predictions")
        for image_id, truth, pred in zip(ids, truths, preds):
            truth, pred = _plane(truth), _plane(pred)
            if truth.ndim != 2 or truth.shape != pred.shape:
                raise ValueError(
                    f"image {image_id}: prediction of shape {list(pred.shape)} for a depth map of shape "
                    f"{list(truth.shape)} (both must be [H, W] of one size; resize in a postprocess.hook)"
                )
            if truth.dtype.kind not in "iuf" or pred.dtype.kind not in "iuf":
                raise ValueError(f"image {image_id}: depth maps must be numbers, got {truth.dtype} and {pred.dtype}")
            row, valid, nan, ranges = image_errors(truth, pred, self.opts)
            self._ranges.append(ranges)
            self._ids.append(int(image_id))
            self._rows.append(row)
            self._counts.append(np.array([valid, truth.size - valid, nan], np.int64))

    def merge(self, other: DepthAccumulator) -> None:
        both = set(self._ids) & set(other._ids)
        if both:
            raise ValueError(f"the shards overlap: {len(both)} images in both (e.g. {min(both)})")
        self._ids += other._ids
        self._rows += other._rows
        self._counts += other._counts
        self._ranges += other._ranges

    def compute(self) -> DepthMetrics:
        if not self._ids:
            raise ValueError("no images")
        rows, counts = np.stack(self._rows), np.stack(self._counts)
        kept = counts[:, 0] > 0
        with np.errstate(invalid="ignore"):
            means = rows[kept].mean(axis=0) if kept.any() else np.full(len(METRICS), np.nan)
        return DepthMetrics(
            **{k: float(v) for k, v in zip(METRICS, means)},
            samples=int(kept.sum()),
            empty_images=int((~kept).sum()),
            pixels=int(counts[:, 0].sum()),
            invalid_pixels=int(counts[:, 1].sum()),
            nan_pixels=int(counts[:, 2].sum()),
            per_range=range_rows(self.opts.edges(), np.stack(self._ranges).sum(axis=0)),
        )

    def per_image(self) -> dict[int, float]:
        """Image id -> its abs_rel (NaN without a valid pixel)."""
        return {i: float(row[0]) for i, row in zip(self._ids, self._rows)}

    def state(self) -> State:
        return {
            "ids": np.asarray(self._ids, np.int64),
            "rows": np.stack(self._rows) if self._rows else np.zeros((0, len(METRICS))),
            "counts": np.stack(self._counts) if self._counts else np.zeros((0, 3), np.int64),
            "ranges": np.stack(self._ranges) if self._ranges else np.zeros((0, self._bins, 3)),
        }

    @classmethod
    def from_state(cls, state: State, opts: DepthOptions) -> DepthAccumulator:
        acc = cls(opts)
        acc._ids = [int(i) for i in state["ids"]]
        acc._rows = list(np.asarray(state["rows"], np.float64))
        acc._counts = list(np.asarray(state["counts"], np.int64))
        acc._ranges = list(np.asarray(state["ranges"], np.float64))
        return acc


# ----------------------------------------------------------------------------- the e2e task


class DepthRangeDelta(Record):
    """One ground-truth depth range (the e2e result's per-class rows): δ1 and AbsRel of the reference and the
    candidate, the largest δ1 drop first in the report."""

    depth_range: str
    pixels: int
    reference_delta1: float
    candidate_delta1: float
    delta_delta1: float = Field(description="candidate - reference")
    reference_abs_rel: float
    candidate_abs_rel: float


class DepthWorst(Record):
    """An image whose abs_rel rose, largest rise first."""

    index: int = Field(description="position in the dataset")
    id: Any = Field(description="the dataset's id of the image (npz position)")
    reference_abs_rel: float
    candidate_abs_rel: float
    abs_rel_rise: float


class DepthTask(Task):
    name = "depth"
    metrics_type = DepthMetrics
    per_class_type = DepthRangeDelta
    worst_type = DepthWorst
    reads_arrays = True

    def accumulator(self) -> DepthAccumulator:
        return DepthAccumulator(self.options)

    def restore(self, state: State) -> DepthAccumulator:
        return DepthAccumulator.from_state(state, self.options)

    def postprocess(self, outputs: dict[str, np.ndarray], batch: Batch, model: str) -> list[np.ndarray]:
        if self.hook is not None:
            maps = [np.asarray(m) for m in call_hook(self.hook, outputs, image_sizes=batch.sizes)]
        else:
            raw = np.asarray(select_output(outputs, self.cfg.postprocess.output, model))
            if raw.ndim == 4 and raw.shape[1] == 1:
                raw = raw[:, 0]
            if raw.ndim != 3 or raw.dtype.kind != "f":
                raise UsageError(
                    f"{model}: depth output of shape {list(raw.shape)} ({raw.dtype}) is not a float map [B, H, W] or "
                    "[B, 1, H, W]; name the right output (postprocess.output) or give a postprocess.hook"
                )
            maps = list(raw)
        if len(maps) != len(batch.index):
            raise UsageError(
                f"{model}: postprocessing returned {len(maps)} depth maps for a batch of {len(batch.index)}"
            )
        if self.options.output == "disparity":
            with np.errstate(divide="ignore"):
                scale = self.options.disparity_scale  # disparity 0 or below: infinitely far; NaN stays NaN
                maps = [
                    np.where(m > 0, scale / np.maximum(m, 1e-30), np.where(np.isnan(m), np.nan, np.inf)) for m in maps
                ]
        return maps

    def update(self, acc: Any, positions: Sequence[int], predictions: Any, labels: Sequence[Any]) -> None:
        try:
            acc.update(list(positions), labels, predictions)
        except ValueError as exc:
            raise UsageError(f"depth: {exc}") from exc

    def per_sample(self, acc: Any) -> dict[int, float]:
        return acc.per_image()

    def worst(self, reference: Any, candidate: Any, n: int) -> list[Record]:
        # lower is better: a rise of abs_rel is the drop of its negation
        neg = {i: -v for i, v in reference.items()}
        rows = largest_drops(neg, {i: -v for i, v in candidate.items()}, lambda i: i)
        return [
            DepthWorst(
                index=i,
                id=self.reader.ids[i],
                reference_abs_rel=reference[i],
                candidate_abs_rel=candidate[i],
                abs_rel_rise=d,
            )
            for d, i in rows[:n]
        ]

    def per_class(self, reference: TaskMetrics, candidate: TaskMetrics) -> list[Record]:
        assert isinstance(reference, DepthMetrics) and isinstance(candidate, DepthMetrics)
        return [
            DepthRangeDelta(
                depth_range=r.depth_range,
                pixels=r.pixels,
                reference_delta1=r.delta1,
                candidate_delta1=c.delta1,
                delta_delta1=c.delta1 - r.delta1,
                reference_abs_rel=r.abs_rel,
                candidate_abs_rel=c.abs_rel,
            )
            for r, c in zip(reference.per_range, candidate.per_range)
        ]
