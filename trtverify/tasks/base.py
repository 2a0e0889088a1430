"""The contract every e2e task keeps, so the e2e stage has no task branches.

A task (classification, detection, segmentation) says:
- how a model's raw outputs become predictions (`postprocess`, or the suite's hook);
- how predictions are accumulated: an `Accumulator` with `update` (through `Task.update`, which
  maps dataset positions to what the accumulator wants), `compute`, `merge` and `state`
  (torchmetrics style: the math in the accumulator, the class holds only state);
- which samples changed most between the reference and a candidate (`worst`), the per-class
  comparison (`per_class`) and, for a task with a confusion matrix, the confusions a candidate
  makes more often than the reference (`confused`);
- the typed records it returns: `metrics_type`, `per_class_type`, `worst_type`.

Tasks are registered in `trtverify.config.registry.TASKS` and imported when used.
"""

from __future__ import annotations

import inspect
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

import numpy as np
from pydantic import ConfigDict, Field

from trtverify.config.stages import E2EStage
from trtverify.tasks.batches import Batch
from trtverify.tasks.datasets import Reader, open_dataset
from trtverify.util.errors import UsageError
from trtverify.util.hooks import load_hook
from trtverify.util.record import Record

State = dict[str, np.ndarray]

# A reference is degenerate (`Task.sanity`) when one class takes more than DOMINANT_SHARE of its
# predictions and at least DOMINANT_MARGIN more than the labels give that class, or when its
# accuracy is near chance: at most chance + CHANCE_MARGIN x (1 - chance), chance being the share of
# the most frequent label (what always predicting that class scores: 1 / classes when balanced).
DOMINANT_SHARE = 0.9
DOMINANT_MARGIN = 0.1
CHANCE_MARGIN = 0.05


class TaskMetrics(Record):
    """A task's metrics of one model: scalar metrics by name, per-class rows and task extras."""

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True, validate_by_alias=True)

    def scalars(self) -> dict[str, int | float]:
        """Every numeric metric (not the booleans, lists or strings), by name."""
        out: dict[str, int | float] = {}
        fields = [(f.alias or k, getattr(self, k)) for k, f in type(self).model_fields.items()]
        for k, v in [*fields, *(self.model_extra or {}).items()]:  # model_dump's order, without dumping
            if isinstance(v, (int, float)) and not isinstance(v, bool):  # the lists (confusion matrix) neither
                out[k] = v
        return out


class ClassRow(Record):
    """A row about one class; its index is written as "class" (a Python keyword)."""

    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True, validate_by_alias=True)

    class_: int = Field(alias="class")


class ConfusedPair(Record):
    """A confusion a candidate makes more often than the reference: samples (pixels, in segmentation) of class
    `label` predicted as class `predicted`."""

    label: int = Field(description="the true class")
    label_name: str
    predicted: int = Field(description="the class predicted instead")
    predicted_name: str
    reference: int = Field(description="how many the reference predicted so")
    candidate: int = Field(description="how many the candidate predicted so")


def confused_pairs(
    reference: Sequence[Sequence[int]], candidate: Sequence[Sequence[int]], names: Sequence[str], n: int
) -> list[ConfusedPair]:
    """The `n` cells off the diagonal of two confusion matrices (rows: true class, columns: predicted) that grew
    most from `reference` to `candidate`, largest growth first, ties in (true, predicted) order; only those that
    grew."""
    ref, cand = np.asarray(reference, dtype=np.int64), np.asarray(candidate, dtype=np.int64)
    grown = cand - ref
    np.fill_diagonal(grown, 0)
    cells = np.flatnonzero(grown > 0)
    cells = cells[np.lexsort((cells, -grown.flat[cells]))][:n]
    c = grown.shape[1]
    return [
        ConfusedPair(
            label=int(i // c),
            label_name=names[i // c],
            predicted=int(i % c),
            predicted_name=names[i % c],
            reference=int(ref.flat[i]),
            candidate=int(cand.flat[i]),
        )
        for i in cells
    ]


class Accumulator(Protocol):
    """Predictions of one model on (part of) a validation set."""

    def compute(self) -> TaskMetrics: ...

    def merge(self, other: Any) -> None: ...

    def state(self) -> State: ...


def call_hook(hook: Any, outputs: dict[str, np.ndarray], **context: Any) -> Any:
    """Call a user hook with the context keywords it declares (all of them if it takes **kwargs)."""
    try:
        params = inspect.signature(hook).parameters
    except (TypeError, ValueError):
        return hook(outputs, **context)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return hook(outputs, **context)
    return hook(outputs, **{k: v for k, v in context.items() if k in params})


def select_output(outputs: dict[str, np.ndarray], wanted: str | None, model: str) -> np.ndarray:
    """The output the suite names (postprocess.output), or the first one."""
    if wanted is None:
        return next(iter(outputs.values()))
    if wanted not in outputs:
        raise UsageError(f"postprocess.output '{wanted}' is not an output of {model} (outputs: {', '.join(outputs)})")
    return outputs[wanted]


def input_size(batch: Batch, layout: str) -> tuple[int, int]:
    """(height, width) of the model input of a batch."""
    shape = batch.inputs.shape
    return (int(shape[2]), int(shape[3])) if layout == "NCHW" else (int(shape[1]), int(shape[2]))


def class_deltas(
    reference: Sequence[Any], candidate: Sequence[Any], key: str, value: str, make: Callable[..., Record]
) -> list[Record]:
    """Per class (rows matched on `key`): `make(key, name, reference_<value>, candidate_<value>, delta_<value>)`,
    the delta None when the candidate has no such class."""
    by = {getattr(row, key): row for row in candidate}
    out: list[Record] = []
    for row in reference:
        ref = getattr(row, value)
        match = by.get(getattr(row, key))
        cand = getattr(match, value) if match is not None else None
        delta = cand - ref if cand is not None and ref is not None else None
        fields = {f"reference_{value}": ref, f"candidate_{value}": cand, f"delta_{value}": delta}
        out.append(make(**{key: getattr(row, key)}, name=row.name, **fields))
    return out


def dominant_class(
    predicted: Sequence[int], labelled: Sequence[int], names: Sequence[str], what: str = "samples"
) -> str | None:
    """Why the predictions look degenerate, or None: one class takes more than DOMINANT_SHARE of
    them, and at least DOMINANT_MARGIN more than the labels give it. `predicted` and `labelled`: counts
    per class; `names`: how each class is named ('class 3 (Dress)')."""
    total, total_labels = sum(predicted), sum(labelled)
    if total <= 0:
        return None
    k = max(range(len(predicted)), key=lambda i: (predicted[i], -i))
    share = predicted[k] / total
    label_share = labelled[k] / total_labels if total_labels else 0.0
    if share > DOMINANT_SHARE and share - label_share >= DOMINANT_MARGIN:
        return f"{share:.1%} of the {what} predicted as {names[k]}; the labels give it {label_share:.1%}"
    return None


def class_label(index: int, name: str | None) -> str:
    """'class 3 (Dress)', or 'class 3' when the name is the index."""
    return f"class {index}" if name is None or name == str(index) else f"class {index} ({name})"


def near_chance(metric: str, value: float, labelled: Sequence[int]) -> str | None:
    """Why `value` (an accuracy) is near chance, or None: at most chance + CHANCE_MARGIN x (1 - chance),
    chance being the share of the most frequent label in `labelled` (counts per class)."""
    total = sum(labelled)
    if total <= 0 or value != value:
        return None
    chance = max(labelled) / total
    limit = chance + CHANCE_MARGIN * (1 - chance)
    if value <= limit:
        return (
            f"{metric} {value:.4f} is near chance: always predicting the most frequent label scores {chance:.4f} "
            f"(limit {limit:.4f})"
        )
    return None


def largest_drops(
    reference: dict[Any, float], candidate: dict[Any, float], position: Callable[[Any], int]
) -> list[tuple[float, Any]]:
    """(drop, key) of the samples whose value fell from `reference` to `candidate` (both defined, not
    NaN), largest drop first, ties by the sample's `position` in the dataset."""
    rows = []
    for k, r in reference.items():
        c = candidate.get(k, math.nan)
        if r != r or c != c or r - c <= 0:  # undefined (nothing to measure) or not worse
            continue
        rows.append((r - c, k))
    rows.sort(key=lambda row: (-row[0], position(row[1])))
    return rows


class Task(ABC):
    """One task over one validation set (`reader`), configured by the suite's e2e stage."""

    name: ClassVar[str]
    metrics_type: ClassVar[type[TaskMetrics]]
    per_class_type: ClassVar[type[Record]]
    worst_type: ClassVar[type[Record]]
    reads_masks: ClassVar[bool] = False  # its labels are label images (masks), not class indices
    reads_arrays: ClassVar[bool] = False  # its labels are arrays of any shape and type (targets), as stored

    def __init__(self, cfg: E2EStage, reader: Reader, search_path: Sequence[Path] = ()):
        self.cfg = cfg
        self.options = cfg.task_options()  # the task's own settings (`e2e.options`), checked; None: it takes none
        self.reader = reader
        hook = cfg.postprocess.hook
        self.hook = load_hook(hook, search_path, what="postprocess.hook") if hook else None

    @classmethod
    def open(cls, cfg: E2EStage, search_path: Sequence[Path] = ()) -> Task:
        """The task over the validation set the suite names (opened and checked now)."""
        reader, cfg = cls.read(cfg)
        return cls(cfg, reader, search_path)

    @classmethod
    def read(cls, cfg: E2EStage) -> tuple[Reader, E2EStage]:
        """The validation set the suite names, and the stage settings to read it with (a task whose inputs are not
        images adapts the preprocessing); what `open` and the drill-down (`--samples worst`) read."""
        return open_dataset(cfg.dataset, masks=cls.reads_masks, arrays=cls.reads_arrays), cfg

    @abstractmethod
    def accumulator(self) -> Accumulator:
        """An empty accumulator for one model."""

    @abstractmethod
    def restore(self, state: State) -> Accumulator:
        """An accumulator from `state()` of another (a shard's)."""

    @abstractmethod
    def postprocess(self, outputs: dict[str, np.ndarray], batch: Batch, model: str) -> Any:
        """A batch of raw model outputs -> the task's predictions (the hook's, or the built-in)."""

    @abstractmethod
    def update(self, acc: Any, positions: Sequence[int], predictions: Any, labels: Sequence[Any]) -> None:
        """Add a batch of predictions of the samples at `positions` (their labels beside them)."""

    @abstractmethod
    def per_sample(self, acc: Any) -> Any:
        """One model's results per sample, as `worst` compares them (computed once per model)."""

    @abstractmethod
    def worst(self, reference: Any, candidate: Any, n: int) -> list[Record]:
        """The `n` samples whose result changed most: `reference` and `candidate` are `per_sample` of
        the reference's and the candidate's accumulator."""

    def sanity(self, metrics: TaskMetrics) -> list[str]:
        """Why a model's metrics (the reference's) look degenerate: one class for nearly every
        prediction, or an accuracy near chance. Empty when they do not."""
        return []

    @abstractmethod
    def per_class(self, reference: TaskMetrics, candidate: TaskMetrics) -> list[Record]:
        """Per class: the reference's value, the candidate's and the difference."""

    def confused(self, reference: TaskMetrics, candidate: TaskMetrics, n: int) -> list[ConfusedPair]:
        """The `n` confusions (true class -> predicted class) that grew most from the reference to the candidate;
        empty for a task without a confusion matrix."""
        return []
