"""The suite file as pydantic models. Unknown keys are rejected everywhere.

Paths are resolved against the suite file's folder (passed in the validation context as
`base_dir`) and must exist. Nothing here imports torch, onnxruntime or tensorrt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from trtverify.backends.tensorrt_options import TensorRTOptions
from trtverify.compare.metrics import METRICS
from trtverify.config.paths import resolve_path
from trtverify.errors import unknown
from trtverify.hooks import is_hook_spec


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def _resolve(value: Path, info: ValidationInfo) -> Path:
    return resolve_path(value, info)  # type: ignore[return-value]


def _existing_file(value: Path, info: ValidationInfo) -> Path:
    p = _resolve(value, info)
    if (info.context or {}).get("check_files", True):
        if not p.exists():
            raise ValueError(f"file not found: {p}")
        if not p.is_file():
            raise ValueError(f"not a file: {p}")
    return p


def _existing_dir(value: Path, info: ValidationInfo) -> Path:
    p = _resolve(value, info)
    if (info.context or {}).get("check_files", True) and not p.is_dir():
        raise ValueError(f"folder not found: {p}")
    return p


def _hook(value: str) -> str:
    if not is_hook_spec(value):
        raise ValueError(f"'{value}' is not of the form 'module:callable' (for example 'mypkg.data:make_feeds')")
    return value


def _suffix(*suffixes: str):
    def check(p: Path) -> Path:
        if p.suffix.lower() not in suffixes:
            raise ValueError(f"expected a {' or '.join(suffixes)} file, got '{p.name}'")
        return p

    return check


FilePath = Annotated[Path, AfterValidator(_existing_file)]
OnnxPath = Annotated[Path, AfterValidator(_existing_file), AfterValidator(_suffix(".onnx"))]
DirPath = Annotated[Path, AfterValidator(_existing_dir)]
OutPath = Annotated[Path, AfterValidator(_resolve)]
HookSpec = Annotated[str, AfterValidator(_hook)]
Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")]

DTYPES = ("float32", "float16", "float64", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool")
DType = Literal["float32", "float16", "float64", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool"]


# ----------------------------------------------------------------------------- checks


class Check(Strict):
    """One threshold on one metric, e.g. {metric: cosine, min: 0.9999}."""

    metric: str
    min: float | None = None
    max: float | None = None
    atol: float | None = Field(default=None, ge=0)
    rtol: float | None = Field(default=None, ge=0)
    k: int | None = Field(default=None, ge=1)

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, v: str) -> str:
        if v not in METRICS:
            raise ValueError(unknown("metric", v, METRICS))
        return v

    @model_validator(mode="after")
    def _threshold(self) -> Check:
        spec = METRICS[self.metric]
        want = spec.threshold_key
        other = "min" if want == "max" else "max"
        if getattr(self, other) is not None:
            raise ValueError(
                f"'{self.metric}' is {'lower' if want == 'max' else 'higher'}-is-better: give '{want}', not '{other}'"
            )
        value = getattr(self, want)
        if value is None:
            raise ValueError(f"'{self.metric}' needs a threshold: {{metric: {self.metric}, {want}: VALUE}}")
        if value != value:
            raise ValueError(f"threshold '{want}' is NaN")
        if spec.low is not None and value < spec.low:
            raise ValueError(f"threshold {want}: {value} is out of range for {self.metric} (must be >= {spec.low:g})")
        if spec.high is not None and value > spec.high:
            raise ValueError(f"threshold {want}: {value} is out of range for {self.metric} (must be <= {spec.high:g})")
        for p in ("atol", "rtol", "k"):
            if getattr(self, p) is not None and p not in spec.params:
                allowed = ", ".join(spec.params) or "none"
                raise ValueError(f"'{p}' does not apply to metric '{self.metric}' (its parameters: {allowed})")
        return self

    @property
    def threshold(self) -> float:
        return float(self.max if self.max is not None else self.min)  # type: ignore[arg-type]

    @property
    def params(self) -> dict[str, Any]:
        spec = METRICS[self.metric]
        return {p: (getattr(self, p) if getattr(self, p) is not None else d) for p, d in spec.params.items()}

    def passes(self, value: float) -> bool:
        if value != value:  # NaN never passes
            return False
        return value <= self.threshold if self.max is not None else value >= self.threshold

    @property
    def op(self) -> str:
        return "<=" if self.max is not None else ">="


class OutputOverride(Strict):
    checks: list[Check] = Field(min_length=1)


def _default_framework_checks() -> list[Check]:
    return [Check(metric="rel_l2", max=1e-4), Check(metric="cosine", min=0.99999)]


class FrameworkStage(Strict):
    """Stage 1: the PyTorch model vs the reference ONNX under ONNX Runtime."""

    checks: list[Check] = Field(default_factory=_default_framework_checks, min_length=1)
    outputs: dict[str, OutputOverride] = Field(default_factory=dict, description="per-output checks replacing `checks`")
    rename: dict[str, str] = Field(default_factory=dict, description="PyTorch output name -> ONNX output name")
    ignore: list[str] = Field(
        default_factory=list, description="outputs to leave out (listed as ignored in the results)"
    )
    samples: int | None = Field(default=None, ge=1, description="use only the first N input samples")


def _default_layerwise_checks() -> list[Check]:
    # rel_l2 catches scale errors that cosine cannot see; FP16 activations sit near 1e-3
    return [Check(metric="rel_l2", max=0.01), Check(metric="cosine", min=0.999)]


class TensorOverride(Strict):
    checks: list[Check] = Field(min_length=1)


class LayerwiseStage(Strict):
    """Stage 2: every intermediate tensor of the reference vs each candidate; first divergence and root causes."""

    candidates: list[Name] | None = Field(
        default=None, description="names from models.candidates (default: all of them)"
    )
    checks: list[Check] = Field(
        default_factory=_default_layerwise_checks, min_length=1, description="applied to every compared tensor"
    )
    candidate_checks: dict[Name, list[Check]] = Field(
        default_factory=dict, description="per-candidate checks replacing `checks`"
    )
    tensors: dict[str, TensorOverride] = Field(
        default_factory=dict, description="per-tensor checks replacing the candidate's checks"
    )
    rename: dict[str, str] = Field(default_factory=dict, description="reference tensor name -> candidate tensor name")
    ignore: list[str] = Field(default_factory=list, description="tensors left out (listed as ignored)")
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


class Gate(Strict):
    """A gate on a task metric: allowed drop from the reference (absolute or relative) and/or a floor."""

    metric: str = Field(description="e.g. accuracy, macro_f1, map, ap50, f1")
    max_drop: float | None = Field(default=None, ge=0, description="reference - candidate may not exceed this")
    max_rel_drop: float | None = Field(
        default=None, ge=0, le=1, description="(reference - candidate) / reference may not exceed this"
    )
    min: float | None = Field(default=None, description="the candidate's value may not fall below this")

    @model_validator(mode="after")
    def _some(self) -> Gate:
        if self.max_drop is None and self.max_rel_drop is None and self.min is None:
            raise ValueError(f"gate on '{self.metric}' needs max_drop, max_rel_drop or min")
        return self


class Dataset(Strict):
    """Classification: npz arrays, an image-folder tree (one folder per class) or a CSV of file,label.
    Detection: COCO instances JSON plus its image folder."""

    npz: Annotated[FilePath, AfterValidator(_suffix(".npz"))] | None = None
    images_key: str = "images"
    labels_key: str = "labels"
    layout: Literal["NCHW", "NHWC"] | None = Field(
        default=None, description="layout of npz images (default: guessed from the channel axis)"
    )
    folder: DirPath | None = Field(default=None, description="image-folder tree: FOLDER/<class name>/<image>")
    csv: Annotated[FilePath, AfterValidator(_suffix(".csv"))] | None = Field(
        default=None, description="CSV with columns file,label (a header row is allowed)"
    )
    image_root: DirPath | None = Field(
        default=None, description="folder the CSV's files are relative to (default: the CSV's folder)"
    )
    coco: Annotated[FilePath, AfterValidator(_suffix(".json"))] | None = Field(
        default=None, description="COCO instances JSON"
    )
    images: DirPath | None = Field(default=None, description="COCO image folder (default: 'images' beside the JSON)")
    class_names: list[str] | None = None
    limit: int | None = Field(default=None, ge=1, description="use only the first N samples")

    @model_validator(mode="after")
    def _one(self) -> Dataset:
        given = [k for k in ("npz", "folder", "csv", "coco") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of npz, folder, csv, coco (got {', '.join(given) or 'none'})")
        return self


class Preprocess(Strict):
    hook: HookSpec | None = Field(
        default=None, description="'module:callable'(image uint8 HWC) -> array for one sample; replaces the built-ins"
    )
    input: str | None = Field(default=None, description="model input to feed (default: the only input)")
    resize: tuple[Annotated[int, Field(ge=1)], Annotated[int, Field(ge=1)]] | None = Field(
        default=None, description="[height, width]"
    )
    grayscale: bool = False
    scale: float = Field(default=1 / 255, description="multiply pixels by this")
    mean: list[float] | None = None
    std: list[float] | None = None
    layout: Literal["NCHW", "NHWC"] = "NCHW"
    dtype: Literal["float32", "float16"] = "float32"


class Postprocess(Strict):
    hook: HookSpec | None = Field(
        default=None,
        description="'module:callable'(outputs: dict, image_sizes: list[(h, w)], input_size: (h, w)) -> "
        "classification: scores [B, C]; detection: list of [K, 6] arrays (x1, y1, x2, y2, score, class) in image pixels",
    )
    output: str | None = Field(
        default=None,
        description="model output to read (default: the first); detection: raw [B, K, 6] rows in input pixels",
    )


class E2EStage(Strict):
    """Stage 3: task metrics of the reference and each candidate on a validation set, gated on the drop."""

    task: Literal["classification", "detection"]
    dataset: Dataset
    preprocess: Preprocess = Field(default_factory=Preprocess)
    postprocess: Postprocess = Field(default_factory=Postprocess)
    candidates: list[Name] | None = Field(default=None, description="default: every candidate")
    gates: list[Gate] = Field(min_length=1)
    batch_size: int = Field(default=32, ge=1)
    workers: int | None = Field(
        default=None,
        ge=0,
        description="background threads reading and preprocessing (0: inline); default: a quarter of the usable cores, "
        "at least 2 and at most 4",
    )
    chunk_mb: float = Field(
        default=1024,
        gt=0,
        description="preprocessed inputs kept in memory at once: every model runs over a chunk before the next model does "
        "(a larger set is done in several chunks)",
    )
    top_k: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [1, 5], description="classification top-k accuracies"
    )
    iou: float = Field(default=0.5, gt=0, le=1, description="detection: IoU for precision / recall / F1")
    score_threshold: float = Field(
        default=0.3, ge=0, le=1, description="detection: score threshold for precision / recall / F1"
    )
    worst: int = Field(default=20, ge=0, description="how many most-disagreeing samples to list")


class BuildlogStage(Strict):
    """Audit: TensorRT build logs (fallbacks, calibration, tactics, FP16 risks), gated on findings."""

    logs: list[Annotated[FilePath, AfterValidator(_suffix(".log", ".txt"))]] = Field(
        default_factory=list,
        description="build logs to read (default: the build_log files of backends.tensorrt / tensorrt_rtx, when they exist)",
    )
    against: Annotated[FilePath, AfterValidator(_suffix(".log", ".txt"))] | None = Field(
        default=None,
        description="an older build log: list layers whose precision/tactic/fusion changed and new warnings",
    )
    fail_on: list[str] = Field(
        default_factory=list,
        description="categories (fallback, calibration, tactics, accuracy, build), kinds or kind globs that fail the stage",
    )
    fail_severity: list[Literal["high", "medium", "info"]] = Field(
        default_factory=lambda: ["high", "medium"], description="severities that fail_on counts"
    )
    max: dict[str, int] = Field(
        default_factory=dict, description="category / kind / glob -> largest allowed count, e.g. {'fp16_weights_*': 0}"
    )


class Stages(Strict):
    framework: FrameworkStage | None = None
    layerwise: LayerwiseStage | None = None
    e2e: E2EStage | None = None
    buildlog: BuildlogStage | None = None

    @model_validator(mode="after")
    def _some(self) -> Stages:
        if not any(getattr(self, n) is not None for n in type(self).model_fields):
            raise ValueError(f"no stage configured; add one of: {', '.join(type(self).model_fields)}")
        return self


# ----------------------------------------------------------------------------- models


class PyTorchModel(Strict):
    """The PyTorch source: a factory plus weights, a TorchScript file, or a torch.export file."""

    factory: HookSpec | None = Field(default=None, description="'module:callable' returning an nn.Module")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the factory")
    weights: FilePath | None = Field(
        default=None, description="state_dict file, loaded with torch.load(weights_only=True)"
    )
    torchscript: FilePath | None = None
    exported: FilePath | None = Field(default=None, description="a torch.export .pt2 file")
    input_names: list[str] | None = Field(
        default=None, description="feed names passed positionally to forward(); default: the ONNX inputs in graph order"
    )
    output_names: list[str] | None = Field(
        default=None, description="names of the returned tensors, in order (not needed when forward returns a dict)"
    )

    @model_validator(mode="after")
    def _one_source(self) -> PyTorchModel:
        given = [k for k in ("factory", "torchscript", "exported") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of factory, torchscript, exported (got {', '.join(given) or 'none'})")
        if given[0] != "factory" and (self.weights is not None or self.kwargs):
            raise ValueError("'weights' and 'kwargs' go with 'factory' only")
        for key in ("input_names", "output_names"):
            names = getattr(self, key)
            if names is not None and len(set(names)) != len(names):
                raise ValueError(f"{key} has duplicates: {names}")
        return self


class Candidate(Strict):
    path: OnnxPath
    backend: str = "onnxruntime"
    description: str | None = None

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, v: str) -> str:
        from trtverify.backends import REGISTRY  # a dict of strings: imports no backend library

        if v not in REGISTRY:
            raise ValueError(unknown("backend", v, REGISTRY))
        return v


def _candidate_shorthand(v: Any) -> Any:
    return {"path": v} if isinstance(v, str) else v


class Models(Strict):
    reference: OnnxPath = Field(description="the reference FP32 ONNX model")
    pytorch: PyTorchModel | None = None
    candidates: dict[
        Name, Annotated[Candidate, BeforeValidator(_candidate_shorthand, json_schema_input_type=str | Candidate)]
    ] = Field(default_factory=dict, description="name -> ONNX path, or {path, backend, description}")


# ----------------------------------------------------------------------------- inputs


class GeneratedInput(Strict):
    shape: list[Annotated[int, Field(ge=1)]] = Field(description="concrete shape; dynamic dimensions given values")
    dtype: DType = "float32"
    range: tuple[float, float] = (0.0, 1.0)
    seed: int | None = Field(default=None, description="default: inputs.seed plus the input's position")

    @field_validator("range")
    @classmethod
    def _ordered(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not v[0] < v[1]:
            raise ValueError(f"range must be [low, high] with low < high, got {list(v)}")
        return v


class FileArray(Strict):
    key: str | None = Field(default=None, description="array name in the .npz (default: the input name)")
    dtype: DType | None = Field(default=None, description="cast to this type after scaling")
    scale: float = 1.0
    offset: float = 0.0


class Inputs(Strict):
    """Exactly one source: `generate`, `file` or `hook`."""

    samples: int | None = Field(default=None, ge=1, description="number of feeds (default: 4 generated, or all)")
    seed: int = 0
    generate: dict[str, GeneratedInput] | None = None
    file: Annotated[FilePath, AfterValidator(_suffix(".npz", ".npy"))] | None = None
    arrays: dict[str, FileArray] | None = None
    batch_size: int | None = Field(default=None, ge=1, description="rows of the file per feed (default 1)")
    hook: HookSpec | None = Field(default=None, description="'module:callable' yielding feed dicts")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the hook")

    @model_validator(mode="after")
    def _one_source(self) -> Inputs:
        given = [k for k in ("generate", "file", "hook") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError(
                f"give exactly one input source: generate, file or hook (got {', '.join(given) or 'none'})"
            )
        if self.generate is not None and not self.generate:
            raise ValueError("generate: needs at least one input")
        if (self.arrays is not None or self.batch_size is not None) and self.file is None:
            raise ValueError("'arrays' and 'batch_size' go with 'file' only")
        if self.args and self.hook is None:
            raise ValueError("'args' goes with 'hook' only")
        if (
            self.file is not None
            and self.file.suffix.lower() == ".npy"
            and (self.arrays is None or len(self.arrays) != 1)
        ):
            raise ValueError("a .npy file holds one array: name the input it feeds with arrays: {INPUT_NAME: {}}")
        return self


# ----------------------------------------------------------------------------- backends


class OnnxRuntimeOptions(Strict):
    providers: list[str] = Field(default_factory=lambda: ["CPUExecutionProvider"], min_length=1)
    graph_optimization_level: Literal["disable", "basic", "extended", "all"] = "all"
    intra_op_num_threads: int = Field(default=0, ge=0, description="0 = ONNX Runtime's default")
    inter_op_num_threads: int = Field(default=0, ge=0)
    allow_spinning: bool = Field(
        default=True,
        description="intra-op threads spin-wait between runs; the e2e stage turns this off for its first model, "
        "which runs while the data is read (spinning threads take the cores the reading needs)",
    )


class TorchOptions(Strict):
    device: Annotated[str, Field(pattern=r"^(cpu|cuda(:\d+)?)$")] = "cpu"


class Backends(Strict):
    onnxruntime: OnnxRuntimeOptions = Field(default_factory=OnnxRuntimeOptions)
    torch: TorchOptions = Field(default_factory=TorchOptions)
    tensorrt: TensorRTOptions = Field(
        default_factory=TensorRTOptions, description="TensorRT (<= 10: flags and calibration; 11: strongly typed)"
    )
    tensorrt_rtx: TensorRTOptions = Field(default_factory=TensorRTOptions, description="TensorRT-RTX (strongly typed)")


# ----------------------------------------------------------------------------- suite


class Suite(Strict):
    name: Name
    description: str | None = None
    python_path: list[DirPath] = Field(default_factory=list, description="folders searched for module:callable hooks")
    reference_dir: OutPath = Field(default=Path("reference_outputs"), description="reference store root")
    models: Models
    inputs: Inputs
    backends: Backends = Field(default_factory=Backends)
    stages: Stages

    def candidates_of(self, stage: Any) -> list[str]:
        """The candidates a stage (layerwise, e2e) runs: its `candidates` list, or every model candidate."""
        return list(stage.candidates) if stage.candidates is not None else list(self.models.candidates)
