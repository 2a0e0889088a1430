"""What the suite can name: stages, backends and tasks, each registered as a 'module:attribute'
target (imported only when used) with the facts the suite schema needs about it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trtverify.util.registry import Entry, Registry


@dataclass(frozen=True)
class StageEntry(Entry):
    """A stage: `target` is its `run(context) -> result` function, `result` its result's record type."""

    result: str

    def result_type(self) -> Any:
        return Entry(self.name, self.result).load()


STAGES: Registry[StageEntry] = Registry(
    "stage",
    [  # in the order they run
        StageEntry("framework", "trtverify.stages.framework:run", "trtverify.stages.framework:FrameworkResult"),
        StageEntry(
            "layerwise", "trtverify.stages.layerwise.stage:run", "trtverify.stages.layerwise.models:LayerwiseResult"
        ),
        StageEntry("repair", "trtverify.repair.stage:run", "trtverify.repair.stage:RepairResult"),
        StageEntry("e2e", "trtverify.stages.e2e.stage:run", "trtverify.stages.e2e.models:E2EResult"),
        StageEntry("buildlog", "trtverify.stages.buildlog:run", "trtverify.stages.buildlog:BuildlogResult"),
        StageEntry("perf", "trtverify.stages.perf:run", "trtverify.stages.perf:PerfResult"),
    ],
)


@dataclass(frozen=True)
class BackendEntry(Entry):
    """A backend class (its options: the suite's `backends:` section, read by its `from_config`)."""

    runs_candidates: bool  # can run a candidate ONNX model (models.candidates.*.backend)


BACKENDS: Registry[BackendEntry] = Registry(
    "backend",
    [
        BackendEntry("onnxruntime", "trtverify.backends.onnxruntime:OnnxRuntimeBackend", True),
        BackendEntry("torch", "trtverify.backends.torch:TorchBackend", False),
        BackendEntry("tensorrt", "trtverify.backends.tensorrt:TensorRTBackend", True),
        BackendEntry("tensorrt-rtx", "trtverify.backends.tensorrt:TensorRTRTXBackend", True),
        # a candidate captured on another machine (models.candidates.*.captured): read, never run
        BackendEntry("captured", "trtverify.backends.captured:CapturedBackend", False),
    ],
)


@dataclass(frozen=True)
class TaskEntry(Entry):
    """An e2e task: `target` is its `Task` class; `datasets` the dataset sources it reads."""

    datasets: tuple[str, ...]
    metrics: tuple[str, ...]  # metrics a gate may name, besides those `extra_metrics` adds
    extra_metrics: Callable[[Sequence[int]], tuple[str, ...]] = lambda top_k: ()

    def gate_metrics(self, top_k: Sequence[int] = ()) -> tuple[str, ...]:
        return self.metrics + self.extra_metrics(top_k)


# the 12 numbers of COCOeval.summarize(), in its order
COCO_STATS = (
    "map",
    "ap50",
    "ap75",
    "ap_small",
    "ap_medium",
    "ap_large",
    "ar1",
    "ar10",
    "ar100",
    "ar_small",
    "ar_medium",
    "ar_large",
)


def _top_k_metrics(top_k: Sequence[int]) -> tuple[str, ...]:
    return tuple(f"top{k}_accuracy" for k in top_k)


TASKS: Registry[TaskEntry] = Registry(
    "task",
    [
        TaskEntry(
            "classification",
            "trtverify.tasks.classification:ClassificationTask",
            datasets=("npz", "folder", "csv"),
            metrics=("accuracy", "macro_f1", "micro_f1", "weighted_f1"),
            extra_metrics=_top_k_metrics,
        ),
        TaskEntry(
            "detection",
            "trtverify.tasks.detection:DetectionTask",
            datasets=("coco",),
            metrics=(*COCO_STATS, "precision", "recall", "f1"),
        ),
        TaskEntry(
            "segmentation",
            "trtverify.tasks.segmentation:SegmentationTask",
            datasets=("masks", "npz"),
            metrics=("miou", "pixel_accuracy", "fw_iou", "mean_accuracy"),
        ),
    ],
)
