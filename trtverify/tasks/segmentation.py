"""Semantic-segmentation task metrics: mIoU, per-class IoU, pixel accuracy, frequency-weighted IoU.

Conventions (those of the usual confusion-matrix definitions, e.g. torchmetrics' and mmseg's):
- pixels whose label is `ignore_index` count for nothing; every other label must be a class index;
- the confusion matrix counts (true class, predicted class) over the counted pixels;
- IoU of class c = TP / (TP + FP + FN); a class absent from both the labels and the predictions
  has no IoU (NaN) and is left out of mIoU (the mean over the other classes);
- pixel accuracy = TP summed over classes / counted pixels; mean accuracy = the mean over classes
  with labelled pixels of TP / those pixels; frequency-weighted IoU = sum over classes of
  (the class's share of the counted pixels) x IoU;
- a pixel whose scores hold a NaN has no prediction: it is a miss for its true class;
- per-image mIoU (for the samples that changed most) is the same mIoU on that image alone.

The accumulator keeps the confusion matrix and, per image, each class's intersection and union
(a few integers per class), so shards merge exactly: their matrices add.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import Field

from trtverify.tasks.base import (
    ClassRow,
    ConfusedPair,
    State,
    Task,
    TaskMetrics,
    call_hook,
    class_deltas,
    class_label,
    confused_pairs,
    dominant_class,
    largest_drops,
    near_chance,
    select_output,
)
from trtverify.tasks.batches import Batch
from trtverify.util.errors import UsageError
from trtverify.util.record import Record, optional

INVALID = -1  # prediction of a pixel whose scores hold a NaN


def _nan_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den, NaN where den is 0."""
    out = np.full(np.broadcast(num, den).shape, np.nan)
    np.divide(num, den, out=out, where=den != 0)
    return out


def _mean(values: np.ndarray) -> float:
    finite = values[~np.isnan(values)]
    return float(finite.mean()) if finite.size else math.nan


class ClassIoU(ClassRow):
    name: str
    iou: float = Field(description="TP / (TP + FP + FN); NaN when the class is neither labelled nor predicted")
    accuracy: float = Field(description="TP / labelled pixels of the class; NaN when it has none")
    support: int = Field(description="labelled pixels")
    predicted: int = Field(description="pixels predicted as the class")


class SegmentationMetrics(TaskMetrics):
    miou: float = Field(description="mean IoU over the classes labelled or predicted")
    pixel_accuracy: float
    mean_accuracy: float
    fw_iou: float = Field(description="frequency-weighted IoU")
    per_class: list[ClassIoU] | None = optional(
        "every class's row; left out above 100 classes (the e2e stage's class_data file holds them)"
    )
    confusion: list[list[int]] | None = optional(
        "rows: true class, columns: predicted class; left out above 100 classes (the e2e stage's class_data file "
        "holds it)"
    )
    samples: int = Field(description="images")
    pixels: int = Field(description="pixels counted")
    ignored: int = Field(description="pixels labelled ignore_index")
    invalid: int = Field(description="pixels whose scores hold a NaN (no prediction)")


class SegmentationAccumulator:
    """Label masks and predicted masks of a validation set, image by image; metrics once at the end."""

    def __init__(
        self, num_classes: int | None, ignore_index: int | None = 255, class_names: Sequence[str] | None = None
    ) -> None:
        """`num_classes` None: taken from the first prediction that says it (logits' channels)."""
        self.ignore_index = ignore_index
        self.class_names = [str(n) for n in class_names] if class_names is not None else None
        self.num_classes: int | None = None
        self._confusion: np.ndarray | None = None
        self._support: np.ndarray | None = None
        if num_classes is not None:
            self._set_classes(int(num_classes))
        self._ids: list[int] = []
        self._inter: list[np.ndarray] = []  # per image: TP per class
        self._union: list[np.ndarray] = []  # per image: TP + FP + FN per class
        self._ignored = 0
        self._invalid = 0

    def _set_classes(self, num_classes: int) -> None:
        if num_classes < 1:
            raise ValueError(f"num_classes must be at least 1, got {num_classes}")
        if self.class_names is not None and len(self.class_names) != num_classes:
            raise ValueError(f"{len(self.class_names)} class names for {num_classes} classes")
        self.num_classes = num_classes
        self._confusion = np.zeros((num_classes, num_classes), np.int64)
        self._support = np.zeros(num_classes, np.int64)

    @property
    def samples(self) -> int:
        return len(self._ids)

    def update(
        self, ids: Sequence[int], labels: Sequence[np.ndarray], predictions: Sequence[np.ndarray], classes: int | None
    ) -> None:
        """Add images: a label mask [H, W] and a predicted mask of the same shape each (class indices,
        INVALID where there is no prediction). `classes`: the number of classes the model scored."""
        if classes is not None and self.num_classes is None:
            self._set_classes(classes)
        if self.num_classes is None:
            raise ValueError("the number of classes is not known: give class_names, or logits [B, C, H, W]")
        if classes is not None and classes != self.num_classes:
            raise ValueError(f"the model scores {classes} classes, expected {self.num_classes}")
        if not len(ids) == len(labels) == len(predictions):
            raise ValueError(f"{len(ids)} ids, {len(labels)} label masks and {len(predictions)} predictions")
        c = self.num_classes
        assert self._confusion is not None and self._support is not None
        for image_id, label, pred in zip(ids, labels, predictions):
            label, pred = np.asarray(label), np.asarray(pred)
            if label.shape != pred.shape:
                raise ValueError(
                    f"image {image_id}: prediction of shape {list(pred.shape)} for a mask of shape {list(label.shape)}"
                )
            counted = label != self.ignore_index if self.ignore_index is not None else np.ones(label.shape, bool)
            truth = label[counted].astype(np.int64)
            bad = (truth < 0) | (truth >= c)
            if bad.any():
                raise ValueError(
                    f"image {image_id}: label value {int(truth[bad][0])} is not a class index in [0, {c})"
                    + (f" nor ignore_index {self.ignore_index}" if self.ignore_index is not None else "")
                )
            guess = pred[counted].astype(np.int64)
            if ((guess < INVALID) | (guess >= c)).any():
                raise ValueError(f"image {image_id}: predicted classes must be in [0, {c})")
            valid = guess != INVALID
            conf = np.bincount(truth[valid] * c + guess[valid], minlength=c * c).reshape(c, c)
            support = np.bincount(truth, minlength=c)
            tp = np.diag(conf)
            self._confusion += conf
            self._support += support
            self._inter.append(tp)
            self._union.append(support + conf.sum(axis=0) - tp)
            self._ids.append(int(image_id))
            self._ignored += int(label.size - np.count_nonzero(counted))
            self._invalid += int(np.count_nonzero(~valid))

    def merge(self, other: SegmentationAccumulator) -> None:
        """Add the images of another shard of the same validation set."""
        if other.num_classes is None:
            return
        if self.num_classes is None:
            self._set_classes(other.num_classes)
        if other.num_classes != self.num_classes:
            raise ValueError(f"cannot merge {other.num_classes} classes into {self.num_classes}")
        both = set(self._ids) & set(other._ids)
        if both:
            raise ValueError(f"the shards overlap: {len(both)} images in both (e.g. {min(both)})")
        assert self._confusion is not None and self._support is not None
        self._confusion += other._confusion  # type: ignore[arg-type]
        self._support += other._support  # type: ignore[arg-type]
        self._ids += other._ids
        self._inter += other._inter
        self._union += other._union
        self._ignored += other._ignored
        self._invalid += other._invalid

    def compute(self) -> SegmentationMetrics:
        if not self._ids or self._confusion is None or self._support is None:
            raise ValueError("no images")
        conf, support = self._confusion, self._support
        c = conf.shape[0]
        tp = np.diag(conf)
        predicted = conf.sum(axis=0)
        iou = _nan_ratio(tp, support + predicted - tp)
        acc = _nan_ratio(tp, support)
        pixels = int(support.sum())
        freq = support / pixels if pixels else np.zeros(c)
        names = self.class_names or [str(i) for i in range(c)]
        return SegmentationMetrics(
            miou=_mean(iou),
            pixel_accuracy=float(tp.sum() / pixels) if pixels else math.nan,
            mean_accuracy=_mean(acc),
            fw_iou=float(np.nansum(freq * iou)) if pixels else math.nan,
            per_class=[
                ClassIoU(
                    class_=i,
                    name=names[i],
                    iou=float(iou[i]),
                    accuracy=float(acc[i]),
                    support=int(support[i]),
                    predicted=int(predicted[i]),
                )
                for i in range(c)
            ],
            confusion=conf.tolist(),
            samples=len(self._ids),
            pixels=pixels,
            ignored=self._ignored,
            invalid=self._invalid,
        )

    def per_image(self) -> dict[int, float]:
        """Image id -> mIoU of that image alone (NaN when it has no counted pixel)."""
        return {i: _mean(_nan_ratio(inter, union)) for i, inter, union in zip(self._ids, self._inter, self._union)}

    def state(self) -> State:
        c = self.num_classes if self.num_classes is not None else 0
        return {
            "num_classes": np.array(self.num_classes if self.num_classes is not None else -1),
            "confusion": self._confusion if self._confusion is not None else np.zeros((0, 0), np.int64),
            "support": self._support if self._support is not None else np.zeros(0, np.int64),
            "ids": np.asarray(self._ids, np.int64),
            "inter": np.stack(self._inter) if self._inter else np.zeros((0, c), np.int64),
            "union": np.stack(self._union) if self._union else np.zeros((0, c), np.int64),
            "ignored": np.array(self._ignored),
            "invalid": np.array(self._invalid),
        }

    @classmethod
    def from_state(
        cls, state: State, ignore_index: int | None, class_names: Sequence[str] | None
    ) -> SegmentationAccumulator:
        acc = cls(None, ignore_index, class_names)
        if int(state["num_classes"]) >= 0:
            acc._set_classes(int(state["num_classes"]))
            acc._confusion = np.array(state["confusion"], np.int64)
            acc._support = np.array(state["support"], np.int64)
            acc._ids = [int(i) for i in state["ids"]]
            acc._inter = list(np.asarray(state["inter"], np.int64))
            acc._union = list(np.asarray(state["union"], np.int64))
            acc._ignored, acc._invalid = int(state["ignored"]), int(state["invalid"])
        return acc


# ----------------------------------------------------------------------------- the e2e task


@dataclass(frozen=True)
class Masks:
    """Predicted masks of a batch, and how many classes the model scored (None: not known)."""

    masks: list[np.ndarray]
    classes: int | None


def resize_nearest(mask: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """A class-index mask resized to (height, width) by nearest neighbour (pixel centres)."""
    h, w = mask.shape
    if (h, w) == tuple(size):
        return mask
    rows = np.minimum(((np.arange(size[0]) + 0.5) * h / size[0]).astype(np.int64), h - 1)
    cols = np.minimum(((np.arange(size[1]) + 0.5) * w / size[1]).astype(np.int64), w - 1)
    return mask[rows[:, None], cols[None, :]]


def argmax_masks(scores: np.ndarray) -> np.ndarray:
    """[B, C, H, W] scores -> [B, H, W] class indices; INVALID where a pixel's scores hold a NaN."""
    pred = np.argmax(scores, axis=1)
    if scores.dtype.kind == "f":
        nan = np.isnan(scores).any(axis=1)
        if nan.any():
            pred[nan] = INVALID
    return pred


class ClassIoUDelta(ClassRow):
    """One class: the reference's IoU, the candidate's and the difference."""

    name: str | None
    reference_iou: float | None
    candidate_iou: float | None
    delta_iou: float | None = optional("candidate - reference")


class SegmentationWorst(Record):
    """An image whose mIoU dropped, largest drop first."""

    index: int = Field(description="position in the dataset")
    id: Any = Field(description="the dataset's id of the image (file name, npz position)")
    reference_miou: float
    candidate_miou: float
    miou_drop: float


class SegmentationTask(Task):
    name = "segmentation"
    metrics_type = SegmentationMetrics
    per_class_type = ClassIoUDelta
    worst_type = SegmentationWorst
    reads_masks = True

    def _classes(self) -> int | None:
        names = self.reader.class_names
        return len(names) if names is not None else None

    def accumulator(self) -> SegmentationAccumulator:
        return SegmentationAccumulator(self._classes(), self.cfg.ignore_index, self.reader.class_names)

    def restore(self, state: State) -> SegmentationAccumulator:
        return SegmentationAccumulator.from_state(state, self.cfg.ignore_index, self.reader.class_names)

    def postprocess(self, outputs: dict[str, np.ndarray], batch: Batch, model: str) -> Masks:
        classes = None
        if self.hook is not None:
            masks = [np.asarray(m) for m in call_hook(self.hook, outputs, image_sizes=batch.sizes)]
        else:
            raw = np.asarray(select_output(outputs, self.cfg.postprocess.output, model))
            if raw.ndim == 4:
                classes = int(raw.shape[1])
                pred = argmax_masks(raw)
            elif raw.ndim == 3 and raw.dtype.kind in "iu":
                pred = raw
            else:
                raise UsageError(
                    f"{model}: segmentation output of shape {list(raw.shape)} ({raw.dtype}) is neither scores "
                    "[B, C, H, W] nor class indices [B, H, W]; name the right output or give a postprocess.hook"
                )
            masks = [resize_nearest(p, size) for p, size in zip(pred, batch.sizes)]
        if len(masks) != len(batch.index):
            raise UsageError(f"{model}: postprocessing returned {len(masks)} masks for a batch of {len(batch.index)}")
        return Masks(masks, classes)

    def update(self, acc: Any, positions: Sequence[int], predictions: Any, labels: Sequence[Any]) -> None:
        try:
            acc.update(list(positions), labels, predictions.masks, predictions.classes)
        except ValueError as exc:  # masks that do not fit the labels or the class names
            raise UsageError(f"segmentation: {exc}") from exc

    def per_sample(self, acc: Any) -> dict[int, float]:
        return acc.per_image()

    def worst(self, reference: Any, candidate: Any, n: int) -> list[Record]:
        rows = largest_drops(reference, candidate, lambda i: i)  # keys are dataset positions
        return [
            SegmentationWorst(
                index=i, id=self.reader.ids[i], reference_miou=reference[i], candidate_miou=candidate[i], miou_drop=d
            )
            for d, i in rows[:n]
        ]

    def sanity(self, metrics: TaskMetrics) -> list[str]:
        assert isinstance(metrics, SegmentationMetrics)
        assert metrics.per_class is not None, "computed metrics, not read back"
        predicted = [r.predicted for r in metrics.per_class]
        labelled = [r.support for r in metrics.per_class]
        names = [class_label(r.class_, r.name) for r in metrics.per_class]
        reasons = [
            dominant_class(predicted, labelled, names, "pixels"),
            near_chance("pixel_accuracy", metrics.pixel_accuracy, labelled),
        ]
        return [r for r in reasons if r]

    def per_class(self, reference: TaskMetrics, candidate: TaskMetrics) -> list[Record]:
        assert isinstance(reference, SegmentationMetrics) and isinstance(candidate, SegmentationMetrics)
        assert reference.per_class is not None and candidate.per_class is not None, "computed metrics, not read back"
        return class_deltas(reference.per_class, candidate.per_class, "class_", "iou", ClassIoUDelta)

    def confused(self, reference: TaskMetrics, candidate: TaskMetrics, n: int) -> list[ConfusedPair]:
        assert isinstance(reference, SegmentationMetrics) and isinstance(candidate, SegmentationMetrics)
        assert reference.confusion is not None and candidate.confusion is not None and reference.per_class
        return confused_pairs(reference.confusion, candidate.confusion, [r.name for r in reference.per_class], n)
