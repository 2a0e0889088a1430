"""Suite options of every backend (pydantic only; imports no backend library).

`backends.onnxruntime` and `backends.torch` are small. `backends.tensorrt` / `tensorrt_rtx`:

Two build modes, chosen by `strongly_typed` (None = automatic, see `resolve_strongly_typed`):

- weakly typed (TensorRT <= 10 only): the ONNX graph is FP32 and builder flags allow lower
  precisions (`precisions: [fp16, int8, ...]`), INT8 scales come from calibration
  (`calibration_*`) or from Q/DQ nodes, and `layer_precisions` + `precision_constraints`
  pin single layers;
- strongly typed (TensorRT >= 11, where weak typing was removed, and TensorRT-RTX): every
  tensor's type comes from the graph (FP16 tensors, Q/DQ nodes). No precision flags, no
  calibration, no layer precisions; only `tf32` (a math mode for FP32 tensors, not a type)
  is still accepted.

Everything that needs the installed TensorRT version is checked by the backend at build time
(`trtverify.backends.tensorrt`); the rest is checked here, when the suite is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from trtverify.config.types import FilePath, OutPath, Strict, resolve_path

Precision = Literal["fp16", "bf16", "int8", "fp8", "tf32"]
LayerPrecision = Literal["fp32", "fp16", "bf16", "int8", "fp8"]
Dim = Annotated[int, Field(ge=0)]

# precision flags that are data types (removed in TensorRT 11, rejected by TensorRT-RTX);
# tf32 is a math mode for FP32 tensors and stays allowed in strongly typed builds
TYPE_FLAGS = ("fp16", "bf16", "int8", "fp8")
# options that only matter when an engine is built from the ONNX model
BUILD_OPTIONS = (
    "precisions",
    "strongly_typed",
    "calibration_cache",
    "calibration_samples",
    "layer_precisions",
    "precision_constraints",
    "profiles",
    "builder_optimization_level",
    "workspace_mb",
    "timing_cache",
    "save_engine",
    "build_log",
)


class ShapeRange(Strict):
    """min / opt / max shape of one input in an optimisation profile."""

    min: list[Dim] = Field(description="smallest shape the engine accepts")
    opt: list[Dim] = Field(description="shape TensorRT tunes kernels for (and calibrates with)")
    max: list[Dim] = Field(description="largest shape the engine accepts")

    @model_validator(mode="after")
    def _ordered(self) -> ShapeRange:
        if not len(self.min) == len(self.opt) == len(self.max):
            raise ValueError(f"min, opt and max need the same rank, got {self.min}, {self.opt}, {self.max}")
        for i, (lo, mid, hi) in enumerate(zip(self.min, self.opt, self.max)):
            if not lo <= mid <= hi:
                raise ValueError(f"dimension {i}: need min <= opt <= max, got {lo}, {mid}, {hi}")
        return self


class TensorRTOptions(Strict):
    """How the candidate engine is built (or which prebuilt engine is loaded), and what it exposes."""

    precisions: list[Precision] = Field(
        default_factory=list,
        description=(
            "builder precision flags for weakly typed builds (TensorRT <= 10): fp16, bf16, int8, fp8, tf32. "
            "Strongly typed builds (TensorRT >= 11, TensorRT-RTX) take precision from the ONNX graph "
            "(FP16 tensors, Q/DQ nodes) and accept only tf32 here. fp8 needs FP8 Q/DQ nodes in the graph "
            "and TensorRT >= 8.6; int8 needs calibration data, a calibration cache or Q/DQ nodes"
        ),
    )
    strongly_typed: bool | None = Field(
        default=None,
        description=(
            "build a strongly typed network; null = automatic: true for TensorRT >= 11 and TensorRT-RTX, "
            "false for TensorRT <= 10"
        ),
    )
    calibration_cache: OutPath | None = Field(
        default=None,
        description="INT8 calibration cache (weakly typed int8 only): read if it exists, written after calibrating; "
        "the layerwise stage judges its ranges against the reference's values (TensorRT <= 10's text format)",
    )
    calibration_samples: int | None = Field(
        default=None,
        ge=1,
        description="calibrate INT8 with the first N input samples of the suite (default: all of them)",
    )
    calibration_algorithm: Literal["entropy2", "entropy", "minmax", "legacy"] | None = Field(
        default=None,
        description="TensorRT's INT8 calibrator (weakly typed int8 only), through Polygraphy's Calibrator: "
        "entropy2 (IInt8EntropyCalibrator2, the default), entropy, minmax (IInt8MinMaxCalibrator), legacy "
        "(IInt8LegacyCalibrator, with the quantile and regression cutoff below)",
    )
    calibration_quantile: float | None = Field(
        default=None, gt=0, le=1, description="legacy calibrator: the quantile of |x| its ranges take (Polygraphy: 0.5)"
    )
    calibration_regression_cutoff: float | None = Field(
        default=None, gt=0, le=1, description="legacy calibrator: its regression cutoff (Polygraphy: 0.5)"
    )
    layer_precisions: dict[str, LayerPrecision] = Field(
        default_factory=dict,
        description=(
            "TensorRT layer name -> compute precision (fp32, fp16, bf16, int8, fp8); weakly typed only, "
            "needs precision_constraints prefer or obey"
        ),
    )
    precision_constraints: Literal["none", "prefer", "obey"] = Field(
        default="none",
        description="whether TensorRT must (obey) or should (prefer) follow layer_precisions; weakly typed only",
    )
    profiles: list[dict[str, ShapeRange]] = Field(
        default_factory=list,
        description=(
            "optimisation profiles, each input name -> {min, opt, max}; default: one profile spanning the "
            "shapes of the suite's input samples (dynamic dimensions set to 1 when there are none)"
        ),
    )
    builder_optimization_level: int | None = Field(
        default=None, ge=0, le=5, description="TensorRT builder optimisation level 0..5 (default: TensorRT's, 3)"
    )
    workspace_mb: int | None = Field(default=None, ge=1, description="workspace memory pool limit in MiB")
    timing_cache: OutPath | None = Field(
        default=None, description="tactic timing cache file: loaded if it exists, updated after the build"
    )
    engine: Path | None = Field(
        default=None,
        description=(
            "a prebuilt serialized engine to run instead of building one from the ONNX model; outputs only "
            "(intermediate tensors cannot be added to a built engine); excludes every build option"
        ),
    )
    save_engine: OutPath | None = Field(default=None, description="write the built serialized engine to this file")
    build_log: OutPath | None = Field(default=None, description="write the captured build log to this file")
    log_verbosity: Literal["verbose", "info", "warning"] = Field(
        default="verbose", description="lowest TensorRT severity kept in the captured build log"
    )
    outputs_mode: Literal["mark_all", "debug_tensors"] = Field(
        default="mark_all",
        description=(
            "how intermediate tensors are exposed: mark_all marks them as network outputs (any TensorRT); "
            "debug_tensors marks them as debug tensors (TensorRT >= 10 with IDebugListener support)"
        ),
    )

    @field_validator("engine")
    @classmethod
    def _existing_engine(cls, v: Path | None, info: ValidationInfo) -> Path | None:
        p = resolve_path(v, info)
        if p is not None and (info.context or {}).get("check_files", True):
            if not p.is_file():
                raise ValueError(f"engine file not found: {p}")
        return p

    @field_validator("precisions")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError(f"precisions has duplicates: {v}")
        return v

    @field_validator("profiles")
    @classmethod
    def _non_empty_profiles(cls, v: list[dict[str, ShapeRange]]) -> list[dict[str, ShapeRange]]:
        for i, p in enumerate(v):
            if not p:
                raise ValueError(f"profile {i} is empty: give input name -> {{min, opt, max}}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> TensorRTOptions:
        given = self.model_fields_set
        if self.engine is not None:
            clash = [k for k in BUILD_OPTIONS if k in given and getattr(self, k) not in (None, [], {}, "none")]
            if clash:
                raise ValueError(
                    f"'engine' loads a prebuilt engine, so the build options {', '.join(clash)} have no effect; "
                    "remove them or remove 'engine'"
                )
        type_flags = [p for p in self.precisions if p in TYPE_FLAGS]
        if self.strongly_typed is True:
            if type_flags:
                raise ValueError(
                    f"precisions {type_flags} are builder flags of weakly typed builds; a strongly typed network "
                    "takes its precision from the ONNX graph (FP16 tensors, Q/DQ nodes). Convert the model "
                    "(e.g. FP16 conversion, Q/DQ quantisation) or set strongly_typed: false on TensorRT <= 10"
                )
            if self.layer_precisions or self.precision_constraints != "none":
                raise ValueError(
                    "layer_precisions and precision_constraints need a weakly typed build (TensorRT <= 10); "
                    "a strongly typed network takes every layer's type from the ONNX graph"
                )
        calibration = (self.calibration_cache, self.calibration_samples, self.calibration_algorithm,
                       self.calibration_quantile, self.calibration_regression_cutoff)  # fmt: skip
        if "int8" not in self.precisions and any(v is not None for v in calibration):
            raise ValueError("calibration_* keys go with precisions: [int8] (weakly typed INT8 calibration)")
        legacy = self.calibration_quantile is not None or self.calibration_regression_cutoff is not None
        if legacy and self.calibration_algorithm != "legacy":
            raise ValueError(
                "calibration_quantile and calibration_regression_cutoff go with calibration_algorithm: legacy"
            )
        if self.layer_precisions and self.precision_constraints == "none":
            raise ValueError(
                "layer_precisions take effect only with precision_constraints: prefer or obey "
                "(TensorRT ignores per-layer precisions otherwise)"
            )
        needs_flag = sorted({p for p in self.layer_precisions.values() if p != "fp32" and p not in self.precisions})
        if needs_flag:
            raise ValueError(f"layer_precisions use {needs_flag}, which must also be enabled in precisions")
        return self


class OnnxRuntimeOptions(Strict):
    """ONNX Runtime session options, for the reference and ONNX Runtime candidates."""

    providers: list[str] = Field(
        default_factory=lambda: ["CPUExecutionProvider"], min_length=1, description="execution providers, in order"
    )
    graph_optimization_level: Literal["disable", "basic", "extended", "all"] = Field(
        default="all", description="ONNX Runtime graph optimisation (the layerwise stage always runs graphs as written)"
    )
    intra_op_num_threads: int = Field(
        default=0, ge=0, description="threads within an operator; 0 = ONNX Runtime's default"
    )
    inter_op_num_threads: int = Field(
        default=0, ge=0, description="threads across operators; 0 = ONNX Runtime's default"
    )
    allow_spinning: bool = Field(
        default=True,
        description="intra-op threads spin-wait between runs; the e2e stage turns this off for its first model, "
        "which runs while the data is read (spinning threads take the cores the reading needs)",
    )
    fp16_on_cpu: Literal["emulate", "native"] = Field(
        default="emulate",
        description="FP16 graphs on the CPU provider alone: emulate = FP32 compute, every FP16 tensor rounded to FP16 "
        "as a GPU computes it (ONNX Runtime's CPU runs many FP16 ops in FP32 and drops the casts between them, hiding "
        "roundings and overflows); native = ONNX Runtime as it is (the perf stage always times native). BF16 graphs "
        "are always emulated on the CPU (no BF16 kernels)",
    )
    custom_op_libraries: list[FilePath] = Field(
        default_factory=list,
        description="ONNX Runtime custom-op libraries (.so/.dll) registered in every session, e.g. mmdeploy's "
        "libmmdeploy_onnxruntime_ops.so: ONNX Runtime then runs the plugin ops they provide (docs/plugins.md)",
    )
    # set from the suite's `plugins:` and python_path when the suite is loaded (not keys of their own)
    plugins: SkipJsonSchema[dict[str, str]] = Field(default_factory=dict, exclude=True)
    plugin_path: SkipJsonSchema[list[str]] = Field(default_factory=list, exclude=True)

    @field_validator("plugins", "plugin_path")
    @classmethod
    def _not_a_key(cls, v: object) -> object:
        if v:
            raise ValueError("not a key of backends.onnxruntime: name plugin references in the suite's plugins: key")
        return v


class TorchOptions(Strict):
    """Where the PyTorch model runs (stage framework)."""

    device: Annotated[str, Field(pattern=r"^(cpu|cuda(:\d+)?)$")] = Field(
        default="cpu", description="cpu, cuda or cuda:N (exit 3 when no CUDA GPU is visible)"
    )


class Backends(Strict):
    """Options per backend; each applies wherever that backend runs a model."""

    onnxruntime: OnnxRuntimeOptions = Field(default_factory=OnnxRuntimeOptions, description="ONNX Runtime options")
    torch: TorchOptions = Field(default_factory=TorchOptions, description="PyTorch options")
    tensorrt: TensorRTOptions = Field(
        default_factory=TensorRTOptions, description="TensorRT (<= 10: flags and calibration; 11: strongly typed)"
    )
    tensorrt_rtx: TensorRTOptions = Field(default_factory=TensorRTOptions, description="TensorRT-RTX (strongly typed)")
