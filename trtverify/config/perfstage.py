"""The `perf:` stage of a suite: the engines it times and its gates."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from trtverify.config.findings import gate_names
from trtverify.config.types import Name, PathOrDir, Strict
from trtverify.util.errors import unknown

ENGINE_FINDING_KINDS = (
    "reformat_time",
    "qdq_unfused",
    "residual_add_high_precision",
    "below_requested_precision",
    "channels_misaligned",
    "myelin_regions",
    "plugins",
    "top_layers",
)


class PerfEngine(Strict):
    """A TensorRT engine measured elsewhere, read from the files trtexec wrote for it."""

    files: list[PathOrDir] = Field(
        min_length=1,
        description="trtexec exports (--exportLayerInfo, --exportProfile, --exportTimes JSON), its console log, or "
        "a folder holding one engine's files",
    )
    vs: Name | None = Field(
        default=None, description="another engine of `engines` to compare with: speed-up, and the layer diff"
    )
    min_speedup: float | None = Field(default=None, gt=0, description="gate: latency of `vs` / this latency")


class PerfStage(Strict):
    """Latency and throughput: measured here for the models ONNX Runtime and PyTorch run, read from trtexec's
    files for TensorRT engines; gated on speed-up, on regression against a stored baseline, and on engine findings."""

    batch_sizes: list[Annotated[int, Field(ge=1)]] | None = Field(
        default=None, min_length=1, description="batch sizes measured (default: the batch of the suite's inputs)"
    )
    candidates: list[Name] | None = Field(default=None, description="default: every candidate")
    pytorch: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="measure models.pytorch too (speed-up over PyTorch): auto when torch is installed, always "
        "(missing torch is an error), never",
    )
    engines: dict[Name, PerfEngine] = Field(
        default_factory=dict,
        description="TensorRT engines read from trtexec's files: name -> files; a name of a TensorRT candidate "
        "gives that candidate's numbers instead of measuring it with Polygraphy",
    )
    warmup: int = Field(default=10, ge=0, description="untimed runs first")
    window: int = Field(default=20, ge=1, description="timed runs per window")
    max_cv: float = Field(
        default=0.05,
        gt=0,
        description="stable when the coefficient of variation of the last 3 window medians is at most this",
    )
    min_runs: int = Field(default=60, ge=1, description="timed runs at least (the time budget does not cut these)")
    max_runs: int = Field(default=5000, ge=1, description="timed runs at most")
    min_time_s: float = Field(
        default=0.5, ge=0, description="timed seconds at least before a measurement may be called stable"
    )
    budget_s: float = Field(default=10.0, gt=0, description="timed seconds at most, per model and batch size")
    require_stable: bool = Field(default=False, description="fail a measurement that did not become stable")
    min_speedup: float | dict[Name, float] | None = Field(
        default=None,
        description="gate: reference median latency / candidate median latency at each batch size; one number for "
        "every candidate, or name -> number",
    )
    max_regression: float | None = Field(
        default=None,
        ge=0,
        description="gate: (median - baseline median) / baseline median, for rows whose baseline was measured in the "
        "same environment (reference_outputs/<suite>/perf/baseline.json; write it with run --update-baseline)",
    )
    fail_on: list[str] = Field(
        default_factory=list,
        description="engine audit severities (medium, info) or finding kinds that fail the stage, one check per "
        "engine and name",
    )

    @field_validator("fail_on")
    @classmethod
    def _known_findings(cls, v: list[str]) -> list[str]:
        return gate_names(v, ENGINE_FINDING_KINDS, "engine finding severity or kind")

    @model_validator(mode="after")
    def _engines(self) -> PerfStage:
        for name, eng in self.engines.items():
            if eng.vs is not None and eng.vs not in self.engines:
                raise ValueError(unknown(f"engines.{name}.vs: engine", eng.vs, list(self.engines)))
            if eng.vs == name:
                raise ValueError(f"engines.{name}.vs names the engine itself")
            if eng.min_speedup is not None and eng.vs is None:
                raise ValueError(f"engines.{name}.min_speedup needs vs: the engine it is faster than")
        if self.min_runs > self.max_runs:
            raise ValueError(f"min_runs ({self.min_runs}) is larger than max_runs ({self.max_runs})")
        return self
