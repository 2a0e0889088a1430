"""The typed result of the e2e stage. Its task-specific parts (metrics, per-class rows, most
changed samples) are the record types each registered task declares."""

from __future__ import annotations

from typing import Literal, Union

from pydantic import Field

from trtverify.config.registry import TASKS
from trtverify.stages.base import StageResult
from trtverify.stages.baseline import VsBaseline
from trtverify.stages.e2e.classdata import INLINE_CLASSES, WORST_CLASSES, ClassData
from trtverify.tasks.base import ConfusedPair
from trtverify.util.record import Record, omitted, optional

_TASKS = [entry.load() for entry in TASKS.entries()]
# each task's records have their own required fields, so a value validates as exactly one of them
TaskMetricsRecord = Union[tuple(t.metrics_type for t in _TASKS)]  # type: ignore[valid-type]  # noqa: UP007
PerClassRecord = Union[tuple(t.per_class_type for t in _TASKS)]  # type: ignore[valid-type]  # noqa: UP007
WorstRecord = Union[tuple(t.worst_type for t in _TASKS)]  # type: ignore[valid-type]  # noqa: UP007


class DatasetInfo(Record):
    source: str = Field(description="the file or folder the samples come from")
    layout: str | None = optional("npz: the images' layout")
    images: str | None = optional("the image folder")
    samples: int = Field(description="samples in the dataset (all of them, not only this shard's)")


class ReferenceSanity(Record):
    """Whether the reference's predictions are degenerate (one class nearly always, a metric near chance)."""

    mode: Literal["warn", "fail"] = Field(description="stages.e2e.reference_sanity: fail adds a failing check")
    degenerate: bool
    reasons: list[str] = Field(description="what looks degenerate; empty when nothing does")


class E2ECandidate(Record):
    name: str
    metrics: TaskMetricsRecord  # type: ignore[valid-type]
    deltas: dict[str, int | float] = Field(description="candidate - reference, per scalar metric")
    per_class: list[PerClassRecord] = Field(  # type: ignore[valid-type]
        description=f"every class, in class order; with class_data (more than {INLINE_CLASSES} classes) only the "
        f"{WORST_CLASSES} whose value dropped most, largest drop first"
    )
    confused: list[ConfusedPair] = omitted(
        list,
        f"up to {WORST_CLASSES} confusions (true class -> predicted class) that grew most from the reference to the "
        "candidate, largest growth first (tasks with a confusion matrix: classification, segmentation)",
    )
    worst: list[WorstRecord] = Field(  # type: ignore[valid-type]
        description="the samples whose prediction changed (no other), most changed first"
    )  # type: ignore[valid-type]
    passed: bool = Field(description="every gate of this candidate passed")
    vs_baseline: dict[str, VsBaseline] = omitted(
        dict,
        "gated metric -> this candidate against the stored baseline (max_drop_vs_baseline; after --update-baseline: "
        "what was written)",
    )


class E2EResult(StageResult):
    """Stage e2e: task metrics of the reference and each candidate, gated on the drop."""

    name: Literal["e2e"] = "e2e"
    workers: int | None = optional("background threads that read and preprocessed the data")
    chunks: int | None = optional("passes over the data (each model runs over a chunk before the next model)")
    overhead_vs_inference: float | None = optional("stage wall time over the models' inference time, minus 1")
    task: str | None = optional()
    dataset: DatasetInfo | None = optional()
    samples: int | None = optional("samples evaluated")
    gated: list[str] | None = optional("the metrics the gates name, in the suite's order")
    reference: TaskMetricsRecord | None = optional("the reference's metrics")  # type: ignore[valid-type]
    reference_sanity: ReferenceSanity | None = optional(
        "whether the reference looks degenerate (stages.e2e.reference_sanity; absent with ignore)"
    )
    candidates: list[E2ECandidate] | None = optional()
    class_data: ClassData | None = optional(
        f"more than {INLINE_CLASSES} classes: every model's per-class rows and confusion matrix are in this file, "
        "not inline"
    )
    shard_slice: list[int] | None = optional("[start, stop) of the dataset positions this shard evaluated")
    shard_states: dict[str, str] | None = optional("model -> its accumulator state file, for `trtverify merge`")
    baseline_file: str | None = optional(
        "the accuracy baseline compared with or written (reference_outputs/<suite>/e2e/baseline.json)"
    )
