"""The `stages:` section of a suite: one model per stage, each optional."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, ValidationError, ValidationInfo, field_validator, model_validator

from trtverify.config.checks import Check
from trtverify.config.findings import LINT_KINDS, Severity, gate_names
from trtverify.config.layerwise import LayerwiseDetections, TensorOverride
from trtverify.config.perfstage import PerfStage
from trtverify.config.postprocess import Postprocess
from trtverify.config.registry import TASKS
from trtverify.config.types import DirPath, FilePath, HookSpec, Name, Strict, suffix

TaskName = Literal[tuple(TASKS.names())]  # type: ignore[valid-type]


class OutputOverride(Strict):
    checks: list[Check] = Field(min_length=1, description="checks for this output, replacing the stage's")


def _default_framework_checks() -> list[Check]:
    return [Check(metric="rel_l2", max=1e-4), Check(metric="cosine", min=0.99999)]


class FrameworkStage(Strict):
    """Stage 1: the PyTorch model vs the reference ONNX under ONNX Runtime."""

    checks: list[Check] = Field(
        default_factory=_default_framework_checks,
        min_length=1,
        description="checks on every output (default: rel_l2 <= 1e-4 and cosine >= 0.99999)",
    )
    outputs: dict[str, OutputOverride] = Field(default_factory=dict, description="per-output checks replacing `checks`")
    rename: dict[str, str] = Field(default_factory=dict, description="PyTorch output name -> ONNX output name")
    ignore: list[str] = Field(default_factory=list, description="outputs to leave out (listed as ignored)")
    samples: int | None = Field(default=None, ge=1, description="use only the first N input samples")


CandidatePrecision = Literal["fp32", "tf32", "fp16", "bf16", "int8", "fp8", "int4"]

# Layerwise checks per candidate precision, when a suite sets none (docs/stages/layerwise.md#defaults-per-precision).
# rel_l2 catches scale errors cosine cannot see. Measured worst tensors with nothing wrong: FP16 0.0017 on the three
# demos; INT8 0.014-0.024 on symmetric per-channel ResNet- and MobileNet-style CNNs, 0.19 in the demo U-Net's deepest
# encoder layer (symmetric INT8 after ReLU, its mIoU drops 0.003). Broken quantisation (a wrong scale or zero point,
# clipped calibration, overflow) is rel_l2 >= 0.5.
PRECISION_CHECKS: dict[str, tuple[tuple[float, float], str]] = {
    "fp32": ((0.01, 0.999), "TensorRT runs FP32 convolutions and matrix products in TF32 by default (10-bit mantissa)"),
    "tf32": ((0.01, 0.999), "TF32 keeps a 10-bit mantissa, like FP16"),
    "fp16": (
        (0.1, 0.999),
        "FP16 rounding accumulates with depth: correct conversions of PP-OCRv4 reach 0.056 (worst "
        "tensor) while reading every line right; cosine >= 0.999 carries the sensitivity",
    ),
    "bf16": ((0.1, 0.999), "BF16 keeps 7 mantissa bits, 8x FP16's rounding; no looser than FP16 until measured deeper"),
    "int8": ((0.25, 0.97), "8-bit activations add about 1% per quantised layer, up to 0.19 in a deep narrow layer"),
    "fp8": ((0.25, 0.97), "FP8 E4M3 keeps 3 mantissa bits, about INT8's error per layer"),
    "int4": ((0.25, 0.97), "weight-only INT4 blocks (activations stay FP16): 16 levels per block of weights"),
}


def precision_checks(precision: str) -> list[Check]:
    (rel_l2, cosine), _ = PRECISION_CHECKS[precision]
    return [Check(metric="rel_l2", max=rel_l2), Check(metric="cosine", min=cosine)]


class LayerwiseLint(Strict):
    """The static precision lint as a gate."""

    fail_on: list[str] = Field(
        default_factory=list,
        description="severities (high, medium, info) or lint finding kinds whose findings fail the stage, "
        "one failing check per kind; default: none (findings are reported, the verdict lists the high ones)",
    )

    @field_validator("fail_on")
    @classmethod
    def _known(cls, v: list[str]) -> list[str]:
        return gate_names(v, LINT_KINDS, "lint severity or kind")


class LayerwiseStage(Strict):
    """Stage 2: every intermediate tensor of the reference vs each candidate; first divergence and root causes."""

    candidates: list[Name] | None = Field(default=None, description="names from models.candidates (default: all)")
    checks: list[Check] | None = Field(
        default=None,
        min_length=1,
        description="applied to every compared tensor (default: by the candidate's precision: rel_l2 <= 0.01 and "
        "cosine >= 0.999 for FP32/TF32, 0.1 and 0.999 for FP16/BF16, 0.25 and 0.97 for INT8/FP8/INT4)",
    )
    candidate_checks: dict[Name, list[Check]] = Field(default_factory=dict, description="per-candidate `checks`")
    tensors: dict[str, TensorOverride] = Field(
        default_factory=dict, description="per-tensor checks replacing the candidate's checks"
    )
    rename: dict[str, str] = Field(default_factory=dict, description="reference tensor name -> candidate tensor name")
    ignore: list[str] = Field(default_factory=list, description="tensors left out (listed as ignored)")
    pair_by_structure: bool = Field(default=True, description="pair the tensors names leave unpaired by what "
                                    "computes them (two exports of one model: same operations on paired inputs, "
                                    "equal weights; docs/stages/layerwise.md#pairing)")  # fmt: skip
    min_paired: float = Field(default=0.5, ge=0, le=1, description="the check `tensors paired`: at least this share "
                              "of the reference's tensors that have a counterpart in the candidate by op type must "
                              "pair, else the candidate fails (a verdict on few says little); 0: off")  # fmt: skip
    allow_uncompared: list[str] = Field(
        default_factory=list,
        description="graph outputs that may go uncomputed (after a plugin node without a reference) without "
        "failing the check `graph outputs compared`",
    )
    samples: int | None = Field(default=None, ge=1, description="use only the first N input samples (default: all)")
    root_causes: int = Field(default=5, ge=1, description="how many root-cause suspects to report")
    root_cause_method: Literal["auto", "isolate", "amplification"] = Field(
        default="auto",
        description="isolate: run each candidate node on the reference's inputs (ONNX candidates); "
        "amplification: rank by error added at each layer (any backend); auto: isolate where possible",
    )
    confirm_top: int = Field(
        default=0,
        ge=0,
        description="with amplification ranking: run the top N suspects in isolation on the candidate's own backend "
        "(for TensorRT one sub-engine build) and re-rank them by their confirmed own error",
    )
    memory_budget_mb: float = Field(
        default=2048, gt=0, description="bound on intermediate tensors held in memory at once"
    )
    lint: LayerwiseLint = Field(default_factory=LayerwiseLint, description="the precision lint as a gate")
    max_increase_vs_baseline: float | None = Field(default=None, ge=0, description="each candidate's worst tensor "
                                                   "rel_l2 - the stored baseline's (written by run --update-baseline) "
                                                   "may not exceed this (docs/baselines.md)")  # fmt: skip
    detections: LayerwiseDetections = Field(default_factory=LayerwiseDetections, description="detection outputs "
                                            "compared box to box, and their checks")  # fmt: skip


class Sensitivity(Strict):
    """After the search, the sensitivity table: each suspect node and op type kept alone in FP32 and lowered alone,
    ranked by the share of the output error it accounts for (docs/stages/repair.md#sensitivity)."""

    suspects: int = Field(default=10, ge=1, description="at most this many suspect nodes tried (the rest are listed)")
    max_trials: int = Field(default=40, ge=1, description="bound on the evaluations of the table")
    seconds: float = Field(default=300.0, gt=0, description="bound on the table's time, in seconds")
    op_types: bool = Field(default=True, description="also each lowered op type, all its nodes at once")
    suspects_from: Annotated[FilePath, AfterValidator(suffix(".json"))] | None = Field(
        default=None,
        description="the results.json of a layerwise run of this candidate: its first divergence and root causes are "
        "tried first",
    )


class RepairStage(Strict):
    """The smallest set of nodes to keep in FP32 so the reference lowered to `precision` passes, verified."""

    precision: Literal["fp16", "bf16", "int8", "fp8", "int4"] = Field(
        description="what the reference is lowered to: fp16 and int8 are made here from the reference; bf16, fp8 "
        "and int4 come from ModelOpt as the `candidate`"
    )
    checks: list[Check] | None = Field(
        default=None,
        min_length=1,
        description="the target, on every model output (default: the precision's layerwise defaults: rel_l2 <= 0.1 "
        "and cosine >= 0.999 for FP16/BF16, 0.25 and 0.97 for INT8/FP8/INT4); no tensor may be "
        "non-finite where the reference's is finite, whatever the checks",
    )
    tensors: Literal["outputs", "all"] = Field(default="outputs", description="where the checks apply")
    target: Literal["tensors", "e2e"] = Field(
        default="tensors",
        description="tensors: the checks above; e2e: the e2e stage's gates on the validation set (each evaluation "
        "runs it), instead of the checks. Non-finite values fail either way",
    )
    candidate: Name | None = Field(
        default=None,
        description="repair this candidate (from models.candidates): a Q/DQ model, an FP16/BF16 model or both, "
        "e.g. ModelOpt's INT8 with its FP16 rest; default: the reference lowered here (FP16, or INT8 symmetric "
        "per-channel calibrated on the inputs)",
    )
    samples: int | None = Field(default=None, ge=1, description="use only the first N input samples")
    holdout: float = Field(
        default=0.25,
        ge=0,
        lt=1,
        description="share of the samples the search does not use; the repaired model is verified on them (0: "
        "verify on the search's own samples; with fewer than 4 samples nothing is held out)",
    )
    calibration: Annotated[FilePath, AfterValidator(suffix(".npz"))] | None = Field(
        default=None,
        description="INT8 calibration data: .npz, keys = input names, first axis = rows (default: the inputs)",
    )
    max_evaluations: int = Field(default=50, ge=1, description="bound on the models built and compared")
    method: Literal["auto", "minmax", "entropy", "percentile"] = Field(
        default="auto",
        description="int8 made here (no candidate): the calibration method, as `convert --method`; auto calibrates "
        "with each of minmax, entropy and percentile on the first 3/4 of the calibration rows and keeps the one with "
        "the smallest output rel_l2 on the rest",
    )
    sensitivity: Sensitivity | None = Field(
        default=None,
        description="after the search, the sensitivity table and its exclusion lists (ModelOpt, trtexec, keep-list); "
        "judged on the checks (or the precision's defaults with target: e2e)",
    )

    @model_validator(mode="after")
    def _candidate_where_needed(self) -> RepairStage:
        if self.candidate is None and self.precision in ("bf16", "fp8", "int4"):
            raise ValueError(
                f"precision {self.precision}: trtverify lowers to fp16 and int8 itself; a {self.precision} model comes "
                "from ModelOpt: name it as the candidate"
            )
        if self.method != "auto" and (self.precision != "int8" or self.candidate is not None):
            why = "the candidate is calibrated already" if self.candidate else f"{self.precision} has no calibration"
            raise ValueError(f"method: {self.method} calibrates the int8 model repair makes from the reference; {why}")
        return self

    def target_checks(self) -> list[Check]:
        """The checks, or the precision's defaults."""
        if self.checks is not None:
            return list(self.checks)
        return precision_checks(self.precision)


class Gate(Strict):
    """A gate on a task metric: allowed drop from the reference (absolute or relative) and/or a floor."""

    metric: str = Field(description="a metric of the task, e.g. accuracy, macro_f1, map, ap50, f1, miou")
    max_drop: float | None = Field(default=None, ge=0, description="reference - candidate may not exceed this")
    max_rel_drop: float | None = Field(
        default=None, ge=0, le=1, description="(reference - candidate) / reference may not exceed this"
    )
    min: float | None = Field(default=None, description="the candidate's value may not fall below this")
    max_drop_vs_baseline: float | None = Field(default=None, ge=0, description="the stored baseline's value (the "
                                               "last release's, written by run --update-baseline) - candidate may not "
                                               "exceed this (docs/baselines.md)")  # fmt: skip
    # lower-is-better metrics (a task's TaskEntry.lower_is_better, e.g. depth's abs_rel, rmse) take these instead
    max_rise: float | None = Field(
        default=None, ge=0, description="lower-is-better metrics: candidate - reference may not exceed this"
    )
    max_rel_rise: float | None = Field(
        default=None,
        ge=0,
        description="lower-is-better metrics: (candidate - reference) / reference may not exceed this",
    )
    max: float | None = Field(
        default=None, description="lower-is-better metrics: the candidate's value may not exceed this"
    )

    @model_validator(mode="after")
    def _some(self) -> Gate:
        if all(getattr(self, k) is None for k in (*DROP_LIMITS, *RISE_LIMITS)):
            raise ValueError(
                f"gate on '{self.metric}' needs max_drop, max_rel_drop, min or max_drop_vs_baseline (higher-is-better "
                "metrics), or max_rise, max_rel_rise or max (lower-is-better metrics)"
            )
        return self

    def limits(self) -> list[str]:
        """The limits this gate gives."""
        return [k for k in (*DROP_LIMITS, *RISE_LIMITS) if getattr(self, k) is not None]


DROP_LIMITS = ("max_drop", "max_rel_drop", "min", "max_drop_vs_baseline")  # for higher-is-better metrics
RISE_LIMITS = ("max_rise", "max_rel_rise", "max")  # for lower-is-better metrics (no baseline gate yet)


def gate_direction(gate: Gate, lower_is_better: bool) -> str | None:
    """Why `gate`'s limits do not fit its metric's direction (a drop limit on an error never fails), or None."""
    wrong, right, what = (
        (DROP_LIMITS, RISE_LIMITS, "lower") if lower_is_better else (RISE_LIMITS, DROP_LIMITS, "higher")
    )
    given = [k for k in gate.limits() if k in wrong]
    if given:
        return f"'{gate.metric}' is {what}-is-better: give {', '.join(right)}, not {', '.join(given)}"
    return None


DATASET_SOURCES = ("npz", "folder", "csv", "coco", "masks")


class Dataset(Strict):
    """Where the validation set is: exactly one of npz, folder, csv, coco, masks.

    Classification: npz arrays, an image-folder tree (one folder per class) or a CSV of file,label.
    Detection: COCO instances JSON plus its image folder. Segmentation: an image folder and a folder
    of label images (masks), or npz arrays of images and masks."""

    npz: Annotated[FilePath, AfterValidator(suffix(".npz"))] | None = Field(
        default=None, description="npz file of images (NCHW or NHWC uint8) and labels or masks"
    )
    images_key: str = Field(default="images", description="npz: the array of images")
    labels_key: str = Field(default="labels", description="npz, classification: the array of class indices")
    masks_key: str = Field(default="masks", description="npz, segmentation: the array of label masks [N, H, W]")
    layout: Literal["NCHW", "NHWC"] | None = Field(
        default=None, description="layout of npz images (default: guessed from the channel axis)"
    )
    folder: DirPath | None = Field(default=None, description="image-folder tree: FOLDER/<class name>/<image>")
    csv: Annotated[FilePath, AfterValidator(suffix(".csv"))] | None = Field(
        default=None, description="CSV with columns file,label (a header row is allowed)"
    )
    image_root: DirPath | None = Field(
        default=None, description="folder the CSV's files are relative to (default: the CSV's folder)"
    )
    coco: Annotated[FilePath, AfterValidator(suffix(".json"))] | None = Field(
        default=None, description="COCO instances JSON"
    )
    masks: DirPath | None = Field(
        default=None,
        description="segmentation: folder of single-channel label images (PNG), one per image in `images` with the "
        "same file stem; pixel value = class index",
    )
    images: DirPath | None = Field(
        default=None,
        description="image folder: COCO images (default: 'images' beside the JSON), or the images of `masks`",
    )
    class_names: list[str] | None = Field(default=None, description="class names, in class-index order")
    limit: int | None = Field(default=None, ge=1, description="use only the first N samples")

    @model_validator(mode="after")
    def _one(self) -> Dataset:
        given = [k for k in DATASET_SOURCES if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of {', '.join(DATASET_SOURCES)} (got {', '.join(given) or 'none'})")
        if self.masks is not None and self.images is None:
            raise ValueError("masks: give the folder of the images as well (images: FOLDER)")
        return self

    @property
    def source(self) -> str:
        """Which of DATASET_SOURCES is given."""
        return next(k for k in DATASET_SOURCES if getattr(self, k) is not None)


class Preprocess(Strict):
    """Image (uint8 HWC) -> one sample of model input."""

    hook: HookSpec | None = Field(
        default=None,
        description="'module:callable'(image uint8 HWC) -> array for one sample; replaces the built-ins",
    )
    input: str | None = Field(default=None, description="model input to feed (default: the only input)")
    resize: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] | None = Field(
        default=None, description="[height, width]"
    )
    grayscale: bool = Field(default=False, description="convert to one channel")
    scale: float = Field(default=1 / 255, description="multiply pixels by this")
    mean: list[float] | None = Field(default=None, description="subtracted per channel, after scaling")
    std: list[float] | None = Field(default=None, description="divided per channel, after the mean")
    layout: Literal["NCHW", "NHWC"] = Field(default="NCHW", description="layout of the model input")
    dtype: Literal["float32", "float16"] = Field(default="float32", description="type of the model input")


class E2EStage(Strict):
    """Stage 3: task metrics of the reference and each candidate on a validation set, gated on the drop."""

    task: TaskName = Field(description=f"one of: {', '.join(TASKS.names())}")
    dataset: Dataset = Field(description="the validation set")
    preprocess: Preprocess = Field(default_factory=Preprocess, description="image -> model input")
    postprocess: Postprocess = Field(default_factory=Postprocess, description="model outputs -> predictions")
    candidates: list[Name] | None = Field(default=None, description="default: every candidate")
    gates: list[Gate] = Field(min_length=1, description="the metrics gated, and how far each may drop")
    batch_size: int = Field(default=32, ge=1, description="samples per inference call")
    batch_sizes: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, min_length=1, description="a sweep instead of batch_size: one run per batch size (batch=N)"
    )
    workers: int | None = Field(
        default=None,
        ge=0,
        description="background threads reading and preprocessing (0: inline); default: a quarter of the usable "
        "cores, at least 2 and at most 4",
    )
    chunk_mb: float = Field(
        default=1024,
        gt=0,
        description="preprocessed inputs kept in memory at once: every model runs over a chunk before the next "
        "model does (a larger set is done in several chunks)",
    )
    top_k: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [1, 5], description="classification: top-k accuracies to compute"
    )
    iou: float = Field(default=0.5, gt=0, le=1, description="detection: IoU for precision / recall / F1")
    score_threshold: float = Field(
        default=0.3, ge=0, le=1, description="detection: score threshold for precision / recall / F1"
    )
    ignore_index: int | None = Field(
        default=255, ge=0, description="segmentation: label value of pixels that count for nothing (null: none)"
    )
    worst: int = Field(
        default=20, ge=0, description="how many changed samples to list (only samples whose prediction changed)"
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="the task's own settings, checked by the task (docs/stages/e2e.md lists each task's); the tasks "
        "that came first take theirs above (top_k, iou, score_threshold, ignore_index)",
    )
    reference_sanity: Literal["warn", "fail", "ignore"] = Field(
        default="warn",
        description="a degenerate reference (one class for more than 90 % of its predictions and at least 10 points "
        "more than the labels give it; accuracy, pixel accuracy near chance: at most chance + 0.05 x (1 - chance), "
        "chance being the most frequent label's share; detection: no detections, or mAP under 0.01) makes every drop "
        "gate meaningless. warn: a note; fail: also the failing check 'reference sanity: not degenerate'; "
        "ignore: not looked at",
    )

    @model_validator(mode="after")
    def _one_batch_setting(self) -> E2EStage:
        if self.batch_sizes is not None and "batch_size" in self.model_fields_set:
            raise ValueError("give batch_size (one run) or batch_sizes (a sweep), not both")
        if self.batch_sizes is not None and len(set(self.batch_sizes)) != len(self.batch_sizes):
            raise ValueError(f"batch_sizes {self.batch_sizes} lists a batch size twice")
        return self

    @field_validator("options")
    @classmethod
    def _task_options(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if "task" in info.data:  # else the task itself was refused
            _checked_options(info.data["task"], value)
        return value

    def task_options(self) -> Any:
        """`options` checked by the task's settings model (None for a task that takes none)."""
        return _checked_options(self.task, self.options)

    def gate_metrics(self) -> tuple[str, ...]:
        """The metrics a gate may name for this task."""
        return TASKS.get(self.task).gate_metrics(self.top_k)


def _checked_options(task: str, options: dict[str, Any]) -> Any:
    model = TASKS.get(task).options_model()
    if model is None:
        if options:
            raise ValueError(f"task {task} takes no options (given: {', '.join(options)})")
        return None
    try:
        return model.model_validate(options)
    except ValidationError as exc:
        raise ValueError(
            "; ".join(f"{'.'.join(map(str, e['loc'])) or 'options'}: {e['msg']}" for e in exc.errors())
        ) from None


class BuildlogStage(Strict):
    """Audit: TensorRT build logs (fallbacks, calibration, tactics, FP16 risks), gated on findings."""

    logs: list[Annotated[FilePath, AfterValidator(suffix(".log", ".txt"))]] = Field(
        default_factory=list,
        description="build logs to read (default: the build_log files of backends.tensorrt / tensorrt_rtx, "
        "when they exist)",
    )
    against: Annotated[FilePath, AfterValidator(suffix(".log", ".txt"))] | None = Field(
        default=None,
        description="an older build log: list layers whose precision/tactic/fusion changed and new warnings",
    )
    fail_on: list[str] = Field(
        default_factory=list,
        description="categories (fallback, calibration, tactics, accuracy, build), kinds or kind globs that fail "
        "the stage",
    )
    fail_severity: list[Severity] = Field(
        default_factory=lambda: ["high", "medium"], description="severities that fail_on counts"
    )
    max: dict[str, int] = Field(
        default_factory=dict, description="category / kind / glob -> largest allowed count, e.g. {'fp16_weights_*': 0}"
    )


class Stages(Strict):
    """The stages to run (at least one); they run in this order."""

    framework: FrameworkStage | None = Field(default=None, description="PyTorch against ONNX Runtime")
    layerwise: LayerwiseStage | None = Field(default=None, description="every intermediate tensor, each candidate")
    repair: RepairStage | None = Field(default=None, description="the smallest FP32 keep-list that passes, verified")
    e2e: E2EStage | None = Field(default=None, description="task metrics on a validation set")
    buildlog: BuildlogStage | None = Field(default=None, description="TensorRT build-log audit")
    perf: PerfStage | None = Field(default=None, description="latency, throughput, speed-up and engine audit")

    @model_validator(mode="after")
    def _some(self) -> Stages:
        if not any(getattr(self, n) is not None for n in type(self).model_fields):
            raise ValueError(f"no stage configured; add one of: {', '.join(type(self).model_fields)}")
        return self

    def configured(self) -> list[str]:
        """Names of the configured stages, in running order."""
        return [n for n in type(self).model_fields if getattr(self, n) is not None]
