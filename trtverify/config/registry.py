"""What the suite can name: stages, backends and tasks, each registered as a 'module:attribute'
target (imported only when used) with the facts the suite schema needs about it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from trtverify.util.registry import Entry, Registry


def _target(name: str, target: str | None) -> Any:
    """The attribute 'module:attribute' names, imported now (None: None)."""
    return Entry(name, target).load() if target is not None else None


@dataclass(frozen=True)
class StageEntry(Entry):
    """A stage, every fact about it the runner, the merge and the report need, so that none of them names a stage:
    `target` is its `run(context) -> result` function, `result` its result's record type, `config` its section's
    model in the suite (`stages.<name>`). The other facts are 'module:attribute' targets too, imported on use.

    How the run plan takes it (`trtverify/runner.py`): `cases` says how a sharded run splits it: 'whole' (one case,
    run by one shard), 'candidates' (a case per candidate it compares), 'data' (every shard runs it on a slice of the
    dataset; in a run of several suites, one whole case per batch size); `feeds_samples`: it feeds the suite's
    inputs to the models (their warnings are its notes); `shape_swept`: a shape sweep (inputs.shapes) runs it once
    per shape set; `batch_swept`: its section's `batch_sizes` runs it once per batch size, at `batch_size`;
    `weight`: the rough cost of one of its cases, for dealing the cases of several suites over shards.

    `merge`: `merge(ran, shape, suite)` -> one result from the shards that ran it (`trtverify merge`; `ran`: (shard
    folder, result) pairs; `suite()` loads the suite file); None: the one shard's result that ran it.
    `lines`: `lines(result) -> list[str]`, its own lines of the terminal summary, under its status line.
    `partial`: the template (report/templates/) of its own part of its section of report.html; `causes`: the
    template of its own items in the report's list of why the run failed. `layers`: what the report links between
    stages (report/links.py): 'build' (the engine layers its build logs list), 'engine' (the layers of the engines
    it timed); `metric_deltas`: its checks' detail holds a metric's `reference` and `candidate` values, which the
    summary says."""

    result: str
    config: str
    cases: Literal["whole", "candidates", "data"] = "whole"
    feeds_samples: bool = False
    shape_swept: bool = False
    batch_swept: bool = False
    weight: int = 1
    merge: str | None = None
    lines: str | None = None
    partial: str | None = None
    causes: str | None = None
    layers: Literal["build", "engine"] | None = None
    metric_deltas: bool = False

    def result_type(self) -> Any:
        return _target(self.name, self.result)

    def config_type(self) -> Any:
        return _target(self.name, self.config)

    def merger(self) -> Any:
        return _target(self.name, self.merge)

    def liner(self) -> Any:
        return _target(self.name, self.lines)


STAGES: Registry[StageEntry] = Registry(
    "stage",
    [  # in the order they run
        StageEntry(
            "framework",
            "trtverify.stages.framework:run",
            result="trtverify.stages.framework:FrameworkResult",
            config="trtverify.config.stages:FrameworkStage",
            feeds_samples=True,
            shape_swept=True,
            lines="trtverify.report.frameworktext:framework_lines",
            partial="stages/framework.html.j2",
        ),
        StageEntry(
            "layerwise",
            "trtverify.stages.layerwise.stage:run",
            result="trtverify.stages.layerwise.models:LayerwiseResult",
            config="trtverify.config.stages:LayerwiseStage",
            cases="candidates",
            feeds_samples=True,
            shape_swept=True,
            weight=2,
            merge="trtverify.stages.layerwise.merge:merge",
            lines="trtverify.report.layerwisetext:layerwise_lines",
            partial="stages/layerwise.html.j2",
            causes="stages/layerwise_causes.html.j2",
        ),
        StageEntry(
            "repair",
            "trtverify.repair.stage:run",
            result="trtverify.repair.stage:RepairResult",
            config="trtverify.config.stages:RepairStage",
            feeds_samples=True,
            weight=4,
            lines="trtverify.report.repairtext:repair_lines",
            partial="stages/repair.html.j2",
        ),
        StageEntry(
            "e2e",
            "trtverify.stages.e2e.stage:run",
            result="trtverify.stages.e2e.models:E2EResult",
            config="trtverify.config.stages:E2EStage",
            cases="data",
            batch_swept=True,
            weight=4,
            merge="trtverify.stages.e2e.merge:merge",
            lines="trtverify.report.e2etext:e2e_lines",
            partial="stages/e2e.html.j2",
            metric_deltas=True,
        ),
        StageEntry(
            "buildlog",
            "trtverify.stages.buildlog:run",
            result="trtverify.stages.buildlog:BuildlogResult",
            config="trtverify.config.stages:BuildlogStage",
            partial="stages/buildlog.html.j2",
            layers="build",
        ),
        StageEntry(
            "perf",
            "trtverify.stages.perf:run",
            result="trtverify.stages.perf:PerfResult",
            config="trtverify.config.perfstage:PerfStage",
            weight=2,
            lines="trtverify.report.perftext:perf_lines",
            partial="stages/perf.html.j2",
            layers="engine",
        ),
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
    # 'module:Model' of the task's own settings (a Strict pydantic model), the suite's `e2e.options`; None: none
    options: str | None = None
    lower_is_better: tuple[str, ...] = ()  # metrics whose gates take max_rise / max_rel_rise / max (errors)
    labels: bool = True  # its npz dataset holds labels (`labels_key`); False: inputs only (task compare)

    def options_model(self) -> Any:
        """The model of the task's settings (`e2e.options`), imported now; None when the task takes none."""
        return _target(self.name, self.options)

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
        TaskEntry(
            "depth",
            "trtverify.tasks.depth:DepthTask",
            datasets=("npz",),
            metrics=("abs_rel", "sq_rel", "rmse", "rmse_log", "delta1", "delta2", "delta3"),
            options="trtverify.tasks.depth:DepthOptions",
            lower_is_better=("abs_rel", "sq_rel", "rmse", "rmse_log"),
        ),
        TaskEntry(
            "regression",
            "trtverify.tasks.regression:RegressionTask",
            datasets=("npz",),
            metrics=("mae", "rmse", "max_error", "rel_error", "nonfinite"),
            lower_is_better=("mae", "rmse", "max_error", "rel_error", "nonfinite"),
            options="trtverify.tasks.regression:RegressionOptions",
        ),
        TaskEntry(
            "compare",
            "trtverify.tasks.compare:CompareTask",
            datasets=("npz",),
            metrics=("rel_l2_p50", "rel_l2_p95", "rel_l2_max", "max_abs", "inf_rows"),
            lower_is_better=("rel_l2_p50", "rel_l2_p95", "rel_l2_max", "max_abs", "inf_rows"),
            options="trtverify.tasks.compare:CompareOptions",
            labels=False,
        ),
        TaskEntry(
            "restoration",
            "trtverify.tasks.restoration:RestorationTask",
            datasets=("npz",),
            metrics=("psnr", "ssim", "psnr_min", "ssim_min"),
            options="trtverify.tasks.restoration:RestorationOptions",
        ),
        TaskEntry(
            "keypoints",
            "trtverify.tasks.keypoints:KeypointTask",
            datasets=("coco",),
            metrics=(
                "map",
                "ap50",
                "ap75",
                "ap_medium",
                "ap_large",
                "ar",
                "ar50",
                "ar75",
                "ar_medium",
                "ar_large",
                "pck",
                "mean_oks",
            ),  # fmt: skip
            options="trtverify.tasks.keypoints:KeypointOptions",
        ),
    ],
)
