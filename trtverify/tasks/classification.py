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
from pydantic import ConfigDict, Field

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
    near_chance,
    select_output,
)
from trtverify.tasks.batches import Batch
from trtverify.util.errors import UsageError
from trtverify.util.record import Record, optional

INVALID = -1  # prediction of a score row holding a NaN


def _plain(x: Any) -> Any:
    """Python scalar of a numpy scalar, for JSON."""
    return x.item() if isinstance(x, np.generic) else x


def softmax(x: np.ndarray) -> np.ndarray:
    """Row-wise softmax, in float64."""
    z = x.astype(np.float64) - x.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class ClassMetrics(ClassRow):
    name: str
    precision: float
    recall: float
    f1: float
    support: int


class ClassificationMetrics(TaskMetrics):
    """Classification metrics; `top{k}_accuracy` for each k asked for (k <= the number of classes)."""

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, float]

    accuracy: float
    macro_f1: float
    micro_f1: float
    weighted_f1: float
    per_class: list[ClassMetrics] | None = optional(
        "every class's row; left out above 100 classes (the e2e stage's class_data file holds them)"
    )
    confusion: list[list[int]] | None = optional(
        "rows: true class, columns: predicted class; left out above 100 classes (the e2e stage's class_data file "
        "holds it)"
    )
    samples: int
    invalid: int = Field(description="score rows holding a NaN (no prediction)")


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
        self,
        num_classes: int | None,
        top_k: Sequence[int] = (1, 5),
        class_names: Sequence[str] | None = None,
        *,
        keep_probabilities: bool = False,
    ) -> None:
        """`num_classes` None: taken from the first batch of scores. `keep_probabilities`: keep each
        sample's softmax row (float32) for finding the samples that changed most."""
        ks = sorted({int(k) for k in top_k})
        if any(k < 1 for k in ks):
            raise ValueError(f"top_k values must be at least 1, got {list(top_k)}")
        self.top_k = tuple(ks)
        self.class_names = [str(n) for n in class_names] if class_names is not None else None
        self.num_classes: int | None = None
        if num_classes is not None:
            self._set_classes(int(num_classes))
        self.keep_probabilities = keep_probabilities
        self._labels: list[np.ndarray] = []
        self._preds: list[np.ndarray] = []
        self._ranks: list[np.ndarray | None] = []  # rank of the true class; None: batch gave predictions only
        self._probs: list[np.ndarray] = []  # softmax rows (float32), with keep_probabilities
        self._ids: list[Any] = []

    def _set_classes(self, num_classes: int) -> None:
        if num_classes < 1:
            raise ValueError(f"num_classes must be at least 1, got {num_classes}")
        if self.class_names is not None and len(self.class_names) != num_classes:
            raise ValueError(f"{len(self.class_names)} class names for {num_classes} classes")
        self.num_classes = num_classes

    @property
    def samples(self) -> int:
        return len(self._ids)

    def update(self, labels: np.ndarray, scores: np.ndarray, ids: Sequence[Any] | None = None) -> None:
        """Add a batch: `scores` is [B, C] logits/probabilities or [B] predicted class indices."""
        labels = np.asarray(labels)
        if labels.ndim != 1:
            raise ValueError(f"labels must have shape [B], got {list(labels.shape)}")
        scores = np.asarray(scores)
        if self.num_classes is None:
            if scores.ndim != 2:
                raise ValueError("the number of classes is not known: give scores [B, C] or num_classes")
            self._set_classes(int(scores.shape[1]))
        assert self.num_classes is not None
        b, c = labels.shape[0], self.num_classes
        labels = self._indices(labels, "labels")
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
        if self.keep_probabilities:
            if scores.ndim != 2:
                raise ValueError("keep_probabilities needs scores [B, C], not predictions")
            self._probs.append(softmax(scores).astype(np.float32))
        self._labels.append(labels)
        self._preds.append(preds)
        self._ranks.append(ranks)
        self._ids.extend(batch_ids)

    def merge(self, other: ClassificationAccumulator) -> None:
        """Add the samples of another accumulator (a shard of the same validation set)."""
        if other.num_classes is None:
            return
        if self.num_classes is None:
            self._set_classes(other.num_classes)
        if other.num_classes != self.num_classes:
            raise ValueError(f"cannot merge {other.num_classes} classes into {self.num_classes}")
        if other.keep_probabilities != self.keep_probabilities:
            raise ValueError("cannot merge an accumulator that keeps probabilities with one that does not")
        self._labels.extend(other._labels)
        self._preds.extend(other._preds)
        self._ranks.extend(other._ranks)
        self._probs.extend(other._probs)
        self._ids.extend(other._ids)

    def compute(self) -> ClassificationMetrics:
        """All metrics over every sample added so far."""
        if self.samples == 0 or self.num_classes is None:
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
            ClassMetrics(
                class_=i,
                name=names[i],
                precision=float(precision[i]),
                recall=float(recall[i]),
                f1=float(f1[i]),
                support=int(support[i]),
            )
            for i in range(c)
        ]
        out["confusion"] = confusion.tolist()
        out["samples"] = n
        out["invalid"] = int(np.count_nonzero(~valid))
        return ClassificationMetrics(**out)

    def predictions(self) -> dict[int, tuple[int, np.ndarray]]:
        """Sample id -> (predicted class, softmax row), with keep_probabilities."""
        ids = self._ids
        preds = np.concatenate(self._preds) if self._preds else np.zeros(0, np.int64)
        probs = np.concatenate(self._probs) if self._probs else np.zeros((0, 0), np.float32)
        return {i: (int(p), prob) for i, p, prob in zip(ids, preds, probs)}

    def state(self) -> dict[str, np.ndarray]:
        """Everything added so far as plain arrays (no pickle), for a shard to hand to `merge`."""
        has_ranks = bool(self._ranks) and all(r is not None for r in self._ranks)
        cat = np.concatenate
        return {
            "num_classes": np.array(self.num_classes if self.num_classes is not None else -1),
            "labels": cat(self._labels) if self._labels else np.zeros(0, np.int64),
            "preds": cat(self._preds) if self._preds else np.zeros(0, np.int64),
            "ranks": cat(self._ranks) if has_ranks else np.zeros(0, np.int64),  # type: ignore[arg-type]
            "has_ranks": np.array(has_ranks),
            "probs": cat(self._probs) if self._probs else np.zeros((0, 0), np.float32),
            "ids": np.asarray(self._ids, dtype=np.int64),
        }

    @classmethod
    def from_state(
        cls,
        state: dict[str, np.ndarray],
        top_k: Sequence[int] = (1, 5),
        class_names: Sequence[str] | None = None,
        *,
        keep_probabilities: bool = False,
    ) -> ClassificationAccumulator:
        """An accumulator holding what `state()` of another held (integer ids: dataset positions)."""
        acc = cls(None, top_k, class_names, keep_probabilities=keep_probabilities)
        if int(state["num_classes"]) >= 0 and len(state["ids"]):
            acc._set_classes(int(state["num_classes"]))
            acc._labels.append(state["labels"])
            acc._preds.append(state["preds"])
            acc._ranks.append(state["ranks"] if bool(state["has_ranks"]) else None)
            if keep_probabilities:
                acc._probs.append(state["probs"])
            acc._ids.extend(int(i) for i in state["ids"])
        return acc

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


# ----------------------------------------------------------------------------- the e2e task


class ClassDelta(ClassRow):
    """One class: the reference's F1, the candidate's and the difference."""

    name: str | None
    reference_f1: float | None
    candidate_f1: float | None
    delta_f1: float | None = optional("candidate - reference")


class ClassificationWorst(Record):
    """A sample whose predicted class changed: those the reference got right first."""

    index: int = Field(description="position in the dataset")
    id: Any = Field(description="the dataset's id of the sample (npz position, file name)")
    label: int
    reference: int = Field(description="the reference's predicted class")
    candidate: int = Field(description="the candidate's predicted class")
    flipped: bool = Field(description="the predicted class changed (always: only such samples are listed)")
    lost: bool = Field(description="flipped away from a correct reference prediction")
    prob_change: float = Field(description="|change| of the probability of the reference's class")


class ClassificationTask(Task):
    name = "classification"
    metrics_type = ClassificationMetrics
    per_class_type = ClassDelta
    worst_type = ClassificationWorst

    def accumulator(self) -> ClassificationAccumulator:
        return ClassificationAccumulator(None, self.cfg.top_k, self.reader.class_names, keep_probabilities=True)

    def restore(self, state: State) -> ClassificationAccumulator:
        return ClassificationAccumulator.from_state(
            state, self.cfg.top_k, self.reader.class_names, keep_probabilities=True
        )

    def postprocess(self, outputs: dict[str, np.ndarray], batch: Batch, model: str) -> np.ndarray:
        if self.hook is not None:
            scores = np.asarray(call_hook(self.hook, outputs, image_sizes=batch.sizes))
        else:
            scores = np.asarray(select_output(outputs, self.cfg.postprocess.output, model))
        if scores.ndim != 2:
            raise UsageError(f"{model}: classification scores must be [batch, classes], got shape {list(scores.shape)}")
        return scores

    def update(self, acc: Any, positions: Sequence[int], predictions: Any, labels: Sequence[Any]) -> None:
        try:
            acc.update(np.asarray(labels), predictions, ids=list(positions))
        except ValueError as exc:  # scores that do not fit the labels or the class names
            raise UsageError(f"classification: {exc}") from exc

    def per_sample(self, acc: Any) -> dict[int, tuple[int, np.ndarray]]:
        return acc.predictions()

    def worst(self, reference: Any, candidate: Any, n: int) -> list[Record]:
        """The samples whose predicted class changed (no other): those the reference got right first,
        then by the change of the probability of the reference's class."""
        rows = []
        for i, (rp, rprob) in reference.items():
            cp, cprob = candidate[i]
            if rp == cp:
                continue
            label = self.reader.label(i)
            score = abs(float(rprob[rp]) - float(cprob[rp])) if rp >= 0 else float("nan")
            rows.append((rp == label, score, i, rp, cp, label))
        rows.sort(key=lambda r: (not r[0], -r[1] if r[1] == r[1] else 0.0, r[2]))
        return [
            ClassificationWorst(
                index=i,
                id=self.reader.ids[i],
                label=label,
                reference=rp,
                candidate=cp,
                flipped=True,
                lost=lost,
                prob_change=score,
            )
            for lost, score, i, rp, cp, label in rows[:n]
        ]

    def sanity(self, metrics: TaskMetrics) -> list[str]:
        assert isinstance(metrics, ClassificationMetrics)
        assert metrics.confusion is not None and metrics.per_class is not None, "computed metrics, not read back"
        predicted = np.asarray(metrics.confusion, dtype=np.int64).sum(axis=0).tolist()
        labelled = [row.support for row in metrics.per_class]
        names = [class_label(row.class_, row.name) for row in metrics.per_class]
        reasons = [dominant_class(predicted, labelled, names), near_chance("accuracy", metrics.accuracy, labelled)]
        return [r for r in reasons if r]

    def per_class(self, reference: TaskMetrics, candidate: TaskMetrics) -> list[Record]:
        assert isinstance(reference, ClassificationMetrics) and isinstance(candidate, ClassificationMetrics)
        assert reference.per_class is not None and candidate.per_class is not None, "computed metrics, not read back"
        return class_deltas(reference.per_class, candidate.per_class, "class_", "f1", ClassDelta)

    def confused(self, reference: TaskMetrics, candidate: TaskMetrics, n: int) -> list[ConfusedPair]:
        assert isinstance(reference, ClassificationMetrics) and isinstance(candidate, ClassificationMetrics)
        assert reference.confusion is not None and candidate.confusion is not None and reference.per_class
        return confused_pairs(reference.confusion, candidate.confusion, [r.name for r in reference.per_class], n)
