"""Classification task metrics: accuracy, top-k, per-class P/R/F1 and the confusion matrix.

Conventions (chosen so every number equals scikit-learn's over `labels=range(num_classes)`):
- precision, recall and F1 of a class follow `precision_recall_fscore_support(zero_division=0)`:
  a 0/0 ratio is 0, F1 = 2 tp / (support + predicted);
- macro F1 averages over all `num_classes` classes, those without support or predictions
  included; weighted F1 weights by support; micro F1 pools tp/fp/fn over the classes;
- the prediction of a score row is its argmax (lowest index on ties) and top-k ranks
  break ties the same way, so top-1 accuracy is the accuracy; `top{k}_accuracy` is reported
  for each k <= num_classes, for k > 1 only when every batch gave scores (not predictions);
- a score row holding a NaN has no prediction (`invalid`): it is wrong for accuracy and
  top-k, a miss for its true class, and absent from the confusion matrix's columns;
- no samples is an error, never a pass.

Samples are accumulated batch by batch (a label, a prediction and the rank of the true
class each, a few bytes) and the metrics computed once at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

INVALID = -1  # prediction of a score row holding a NaN


def _plain(x: Any) -> Any:
    """Python scalar of a numpy scalar, for JSON."""
    return x.item() if isinstance(x, np.generic) else x


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den elementwise, 0 where den is 0 (scikit-learn's zero_division=0)."""
    num = np.asarray(num, dtype=np.float64)
    den = np.asarray(den, dtype=np.float64)
    out = np.zeros(np.broadcast(num, den).shape)
    np.divide(num, den, out=out, where=den != 0)
    return out


class ClassificationAccumulator:
    """Labels and predictions of a validation set, batch by batch; metrics once at the end."""

    def __init__(
        self, num_classes: int, top_k: Sequence[int] = (1, 5), class_names: Sequence[str] | None = None
    ) -> None:
        if int(num_classes) < 1:
            raise ValueError(f"num_classes must be at least 1, got {num_classes}")
        self.num_classes = int(num_classes)
        ks = sorted({int(k) for k in top_k})
        if any(k < 1 for k in ks):
            raise ValueError(f"top_k values must be at least 1, got {list(top_k)}")
        self.top_k = tuple(ks)
        if class_names is not None and len(class_names) != self.num_classes:
            raise ValueError(f"{len(class_names)} class names for {self.num_classes} classes")
        self.class_names = [str(n) for n in class_names] if class_names is not None else None
        self._labels: list[np.ndarray] = []
        self._preds: list[np.ndarray] = []
        self._ranks: list[
            np.ndarray | None
        ] = []  # rank of the true class per sample; None: batch gave predictions only
        self._ids: list[Any] = []

    @property
    def samples(self) -> int:
        return len(self._ids)

    def update(self, labels: np.ndarray, scores: np.ndarray, ids: Sequence[Any] | None = None) -> None:
        """Add a batch: `scores` is [B, C] logits/probabilities or [B] predicted class indices."""
        labels = np.asarray(labels)
        if labels.ndim != 1:
            raise ValueError(f"labels must have shape [B], got {list(labels.shape)}")
        b, c = labels.shape[0], self.num_classes
        labels = self._indices(labels, "labels")
        scores = np.asarray(scores)
        if scores.ndim == 2:
            if scores.shape != (b, c):
                raise ValueError(f"scores must have shape [B, C] = [{b}, {c}], got {list(scores.shape)}")
            preds, ranks = self._rank(labels, scores)
        elif scores.ndim == 1:
            if scores.shape[0] != b:
                raise ValueError(f"{scores.shape[0]} predictions for {b} labels")
            preds = self._indices(scores, "predictions")
            ranks = None
        else:
            raise ValueError(f"scores must have shape [B, C] or predictions [B], got {list(scores.shape)}")
        if ids is None:
            batch_ids = list(range(self.samples, self.samples + b))
        else:
            if len(ids) != b:
                raise ValueError(f"{len(ids)} ids for {b} samples")
            batch_ids = [_plain(i) for i in ids]
        self._labels.append(labels)
        self._preds.append(preds)
        self._ranks.append(ranks)
        self._ids.extend(batch_ids)

    def merge(self, other: ClassificationAccumulator) -> None:
        """Add the samples of another accumulator (a shard of the same validation set)."""
        if other.num_classes != self.num_classes:
            raise ValueError(f"cannot merge {other.num_classes} classes into {self.num_classes}")
        self._labels.extend(other._labels)
        self._preds.extend(other._preds)
        self._ranks.extend(other._ranks)
        self._ids.extend(other._ids)

    def compute(self) -> dict[str, Any]:
        """All metrics over every sample added so far."""
        if self.samples == 0:
            raise ValueError("no samples")
        c = self.num_classes
        labels, preds = np.concatenate(self._labels), np.concatenate(self._preds)
        valid = preds != INVALID
        confusion = np.bincount(labels[valid] * c + preds[valid], minlength=c * c).reshape(c, c)
        tp = np.diag(confusion)
        predicted = confusion.sum(axis=0)
        support = np.bincount(labels, minlength=c)
        precision = _ratio(tp, predicted)
        recall = _ratio(tp, support)
        f1 = _ratio(2 * tp, support + predicted)
        n = labels.shape[0]
        accuracy = float(np.count_nonzero(preds == labels)) / n
        out: dict[str, Any] = {"accuracy": accuracy}
        ranks = None if any(r is None for r in self._ranks) else np.concatenate(self._ranks)
        for k in self.top_k:
            if k > c:
                continue
            if k == 1:
                out["top1_accuracy"] = accuracy
            elif ranks is not None:  # top-k for k > 1 needs scores in every batch
                out[f"top{k}_accuracy"] = float(np.count_nonzero(ranks < k)) / n
        tp_sum, pred_sum = int(tp.sum()), int(predicted.sum())
        out["macro_f1"] = float(f1.mean())
        out["micro_f1"] = float(_ratio(2 * tp_sum, n + pred_sum))
        out["weighted_f1"] = float(np.average(f1, weights=support))
        names = self.class_names or [str(i) for i in range(c)]
        out["per_class"] = [
            {
                "class": i,
                "name": names[i],
                "precision": float(precision[i]),
                "recall": float(recall[i]),
                "f1": float(f1[i]),
                "support": int(support[i]),
            }
            for i in range(c)
        ]
        out["confusion"] = confusion.tolist()
        out["samples"] = n
        out["invalid"] = int(np.count_nonzero(~valid))
        return out

    def per_sample(self) -> dict[str, list[Any]]:
        """Per-sample label, prediction (-1: NaN scores) and correctness, for drill-down."""
        if self.samples == 0:
            return {"ids": [], "labels": [], "predictions": [], "correct": []}
        labels, preds = np.concatenate(self._labels), np.concatenate(self._preds)
        return {
            "ids": list(self._ids),
            "labels": labels.tolist(),
            "predictions": preds.tolist(),
            "correct": (labels == preds).tolist(),
        }

    def _indices(self, x: np.ndarray, what: str) -> np.ndarray:
        """Class indices as int64, checked to be whole numbers in [0, num_classes)."""
        if x.dtype.kind == "b" or x.dtype.kind not in "iuf":
            raise ValueError(f"{what} must be integer class indices, got dtype {x.dtype}")
        if x.dtype.kind == "f":
            if not np.all(np.isfinite(x)) or not np.all(x == np.round(x)):
                raise ValueError(f"{what} must be whole class indices")
        out = x.astype(np.int64)
        bad = (out < 0) | (out >= self.num_classes)
        if np.any(bad):
            raise ValueError(f"{what} must be in [0, {self.num_classes}), got {out[bad][0]}")
        return out

    def _rank(self, labels: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Argmax prediction and rank of the true class per row (0 = top); lower index wins ties."""
        s = scores if scores.dtype.kind == "f" and scores.dtype.itemsize >= 4 else scores.astype(np.float64)
        nan_rows = np.isnan(s).any(axis=1) if s.dtype.kind == "f" else np.zeros(s.shape[0], bool)
        preds = np.argmax(s, axis=1).astype(np.int64)
        rows = np.arange(s.shape[0])
        true = s[rows, labels][:, None]
        before = np.arange(s.shape[1])[None, :] < labels[:, None]
        ranks = np.count_nonzero((s > true) | ((s == true) & before), axis=1)
        preds[nan_rows] = INVALID
        ranks[nan_rows] = s.shape[1]  # never within any top-k
        return preds, ranks
