"""The suite file as pydantic models. Unknown keys are rejected everywhere.

Paths are resolved against the suite file's folder (passed in the validation context as
`base_dir`) and must exist. Nothing here imports torch, onnxruntime or tensorrt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator, model_validator

from trtverify.config.backends import Backends
from trtverify.config.registry import BACKENDS
from trtverify.config.stages import CandidatePrecision, Stages
from trtverify.config.types import (
    DirPath,
    DType,
    FilePath,
    HookSpec,
    Name,
    OnnxPath,
    OutPath,
    PathOrDir,
    Strict,
    suffix,
)
from trtverify.util.errors import unknown


class PyTorchModel(Strict):
    """The PyTorch source: a factory plus weights, a TorchScript file, or a torch.export file."""

    factory: HookSpec | None = Field(default=None, description="'module:callable' returning an nn.Module")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the factory")
    weights: FilePath | None = Field(
        default=None, description="state_dict file, loaded with torch.load(weights_only=True)"
    )
    torchscript: FilePath | None = Field(default=None, description="a TorchScript file (torch.jit.load)")
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


class CalibrationRecipe(Strict):
    """Calibration of an INT8 recipe: the first N samples of the suite's inputs."""

    samples: int = Field(default=256, ge=1, description="how many input samples calibrate (default 256, or all)")


class Candidate(Strict):
    """A model under test: an ONNX file (or a recipe that makes one from the reference) and the backend that runs it."""

    path: OnnxPath | None = Field(default=None, description="the candidate ONNX model (or give `from`)")
    from_: Literal["reference"] | None = Field(
        default=None,
        alias="from",
        description="a recipe: trtverify lowers the reference to `precision` (fp16 or int8) itself and writes the "
        "ONNX into the run folder (cached by content hash)",
    )
    keep: list[str] = Field(default_factory=list, description="recipe: ONNX nodes kept in FP32")
    calibration: CalibrationRecipe | None = Field(default=None, description="recipe, int8: calibration samples")
    symmetric: bool = Field(default=True, description="recipe, int8: symmetric activations (TensorRT needs them)")
    per_channel: bool = Field(default=True, description="recipe, int8: per-channel weight scales")
    method: Literal["auto", "minmax", "entropy", "percentile"] = Field(
        default="auto",
        description="recipe, int8: calibration method; auto calibrates with each of minmax, entropy and percentile on "
        "the first 3/4 of the calibration samples and keeps the one with the smallest output rel_l2 on the rest",
    )
    backend: str = Field(
        default="onnxruntime",
        description=f"one of: {', '.join(e.name for e in BACKENDS.entries() if e.runs_candidates)}",
    )
    captured: PathOrDir | None = Field(
        default=None,
        description="tensors of the engine captured on another machine (docs/captured.md): a Polygraphy "
        "--save-outputs JSON, trtexec --exportOutput JSON, trtexec's debug tensors (their folder or "
        "tensor_summary.json), KServe v2 response JSON or a folder of .npy, kept in the capture kit's folder; `path` "
        "is then the ONNX model the engine was built from (default: the reference)",
    )
    runner: str | None = Field(
        default=None, description="captured: which runner of a Polygraphy file holding several (its name or index)"
    )
    iteration: int | None = Field(
        default=None,
        ge=0,
        description="captured: only this iteration of the capture, compared on the kit's feed of "
        "the same index (default: every iteration, each on its feed)",
    )
    layerinfo: FilePath | None = Field(
        default=None,
        description="captured: the engine's layer information (trtexec --exportLayerInfo with "
        "--profilingVerbosity=detailed), naming captured TensorRT tensors by their ONNX tensors (default: "
        "layer_info.json in the kit's folder, where it is)",
    )
    unmarked: PathOrDir | None = Field(
        default=None,
        description="captured: an outputs-only capture of the same engine, from the same kit, whose outputs the marked "
        "capture's must equal: marking every tensor changes what TensorRT fuses (docs/captured.md#marking-can-hide-"
        "the-bug)",
    )
    unmarked_runner: str | None = Field(
        default=None, description="unmarked: which runner of a Polygraphy file holding several (its name or index)"
    )
    description: str | None = Field(default=None, description="free text, shown in the report")
    precision: CandidatePrecision | None = Field(
        default=None,
        description="what the candidate runs in, for the layerwise default checks (default: read from the graph's "
        "types and Q/DQ nodes, and the TensorRT precision flags)",
    )

    @model_validator(mode="before")
    @classmethod
    def _captured_backend(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("captured") is not None and "backend" not in data:
            return {**data, "backend": "captured"}
        return data

    @property
    def capture(self) -> tuple[Path, str | None, int | None, Path | None] | None:
        """(file, runner, iteration, layer information) of a captured candidate."""
        return (self.captured, self.runner, self.iteration, self.layerinfo) if self.captured is not None else None

    @model_validator(mode="after")
    def _path_or_recipe(self) -> Candidate:
        if (self.captured is not None) != (self.backend == "captured"):
            raise ValueError("backend: captured goes with captured: FILE, and captured: FILE with no other backend")
        if (self.runner is not None or self.iteration is not None or self.layerinfo) and self.captured is None:
            raise ValueError("runner, iteration and layerinfo go with captured: FILE")
        if self.unmarked_runner is not None and self.unmarked is None:
            raise ValueError("unmarked_runner goes with unmarked: FILE")
        if self.unmarked is not None and self.captured is None:
            raise ValueError("unmarked (an outputs-only capture) goes with captured: FILE (the marked capture)")
        if (self.path is None) == (self.from_ is None):
            raise ValueError("give either path (an ONNX file) or from: reference (a recipe), not both or neither")
        recipe_keys = [
            k for k in ("keep", "calibration", "symmetric", "per_channel", "method") if k in self.model_fields_set
        ]
        if self.from_ is None and recipe_keys:
            raise ValueError(f"{', '.join(recipe_keys)}: recipe options, for candidates with from: reference")
        if self.from_ is not None and self.precision not in ("fp16", "int8"):
            raise ValueError("a recipe (from: reference) needs precision: fp16 or int8")
        if self.precision == "fp16" and any(
            k in recipe_keys for k in ("calibration", "symmetric", "per_channel", "method")
        ):
            raise ValueError("calibration, symmetric, per_channel and method are INT8 recipe options")
        return self

    @field_validator("backend")
    @classmethod
    def _known_backend(cls, v: str) -> str:
        if v not in BACKENDS:
            raise ValueError(unknown("backend", v, BACKENDS.names()))
        if v == "captured":  # read, not run: with captured: FILE (checked above)
            return v
        if not BACKENDS.get(v).runs_candidates:
            runs = [e.name for e in BACKENDS.entries() if e.runs_candidates]
            raise ValueError(f"backend '{v}' cannot run candidate ONNX models (use one of: {', '.join(runs)})")
        return v


def _candidate_shorthand(v: Any) -> Any:
    return {"path": v} if isinstance(v, str) else v


def _captured_path(data: Any) -> Any:
    """A captured candidate without `path`: its engine was built from the reference."""
    if not isinstance(data, dict) or not isinstance(data.get("candidates"), dict):
        return data
    cands = {
        k: {**c, "path": data.get("reference")}
        if isinstance(c, dict) and c.get("captured") is not None and c.get("path") is None and c.get("from") is None
        else c
        for k, c in data["candidates"].items()
    }
    return {**data, "candidates": cands}


class Models(Strict):
    """The reference, its PyTorch source, and the candidates."""

    _captured = model_validator(mode="before")(_captured_path)

    reference: OnnxPath = Field(description="the reference FP32 ONNX model")
    pytorch: PyTorchModel | None = Field(default=None, description="the PyTorch model (stage framework)")
    candidates: dict[
        Name, Annotated[Candidate, BeforeValidator(_candidate_shorthand, json_schema_input_type=str | Candidate)]
    ] = Field(default_factory=dict, description="name -> ONNX path, or {path, backend, description, precision}")


class GeneratedInput(Strict):
    """Random values for one model input."""

    shape: list[Annotated[int, Field(ge=1)]] = Field(description="concrete shape; dynamic dimensions given values")
    dtype: DType = Field(default="float32", description="element type")
    range: tuple[float, float] = Field(default=(0.0, 1.0), description="[low, high]; ints drawn inclusive")
    seed: int | None = Field(default=None, description="default: inputs.seed plus the input's position")

    @field_validator("range")
    @classmethod
    def _ordered(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not v[0] < v[1]:
            raise ValueError(f"range must be [low, high] with low < high, got {list(v)}")
        return v


class FileArray(Strict):
    """How one model input is read from the inputs file."""

    key: str | None = Field(default=None, description="array name in the .npz (default: the input name)")
    dtype: DType | None = Field(default=None, description="cast to this type after scaling")
    scale: float = Field(default=1.0, description="multiply by this")
    offset: float = Field(default=0.0, description="then add this")


class Inputs(Strict):
    """The samples fed to the tensor stages: exactly one source, `generate`, `file` or `hook`."""

    samples: int | None = Field(default=None, ge=1, description="number of feeds (default: 4 generated, or all)")
    seed: int = Field(default=0, description="seed of generated inputs")
    generate: dict[str, GeneratedInput] | None = Field(default=None, description="input name -> random values")
    file: Annotated[FilePath, AfterValidator(suffix(".npz", ".npy", ".json"))] | None = Field(
        default=None,
        description=".npz (keys = input names) or .npy, read with allow_pickle=False; first axis = rows, except that "
        "arrays of exactly the model inputs' fixed shapes are one sample; or a Polygraphy inputs JSON (--save-inputs, "
        "--load-inputs: a list of feeds, each one sample)",
    )
    arrays: dict[str, FileArray] | None = Field(
        default=None, description="model input -> how to read it (default: npz keys = input names)"
    )
    batch_size: int | None = Field(default=None, ge=1, description="rows of the file per feed (default 1)")
    hook: HookSpec | None = Field(default=None, description="'module:callable' yielding feed dicts")
    args: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the hook")
    shapes: list[dict[str, list[Annotated[int, Field(ge=1)]]]] | None = Field(
        default=None,
        description="a shape sweep: shape sets, each a generated input -> its concrete shape; the framework and "
        "layerwise stages run once per set (generate only)",
    )

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
        if self.shapes is not None:
            if self.generate is None:
                raise ValueError("'shapes' (a shape sweep) goes with 'generate' only: it sets the generated shapes")
            if not self.shapes:
                raise ValueError("shapes: give at least one shape set")
            seen: dict[tuple, int] = {}
            for k, shape_set in enumerate(self.shapes):
                key = tuple(sorted((n, tuple(v)) for n, v in shape_set.items()))
                if key in seen:  # the same run twice, and one result name for both
                    raise ValueError(f"shapes[{k}] repeats shapes[{seen[key]}]")
                seen[key] = k
                for name, shape in shape_set.items():
                    if name not in self.generate:
                        raise ValueError(f"shapes[{k}]: '{name}' is not a generated input ({', '.join(self.generate)})")
                    if len(shape) != len(self.generate[name].shape):
                        raise ValueError(
                            f"shapes[{k}].{name}: {len(shape)} dimensions, but generate.{name}.shape has "
                            f"{len(self.generate[name].shape)}"
                        )
        if (
            self.file is not None
            and self.file.suffix.lower() == ".npy"
            and (self.arrays is None or len(self.arrays) != 1)
        ):
            raise ValueError("a .npy file holds one array: name the input it feeds with arrays: {INPUT_NAME: {}}")
        return self


def _plugin_spec(spec: str) -> str:
    from trtverify.plugins.registry import check_spec

    problem = check_spec("op", spec)
    if problem:
        raise ValueError(problem)
    return spec


PluginOp = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*$")]
PluginSpec = Annotated[str, AfterValidator(_plugin_spec)]


class Suite(Strict):
    """A suite file: the models, their inputs, and the stages that check them."""

    name: Name = Field(description="[A-Za-z0-9_.-]+; names the reference store and the report folder")
    description: str | None = Field(default=None, description="free text")
    python_path: list[DirPath] = Field(
        default_factory=list, description="folders searched for module:callable hooks (default: the suite's folder)"
    )
    plugins: dict[PluginOp, PluginSpec] = Field(
        default_factory=dict,
        description="references of plugin nodes, by op_type: 'module:callable' (called with the node's inputs as "
        "numpy arrays and its attributes as keyword arguments; returns its outputs), or 'onnxruntime' (a library in "
        "backends.onnxruntime.custom_op_libraries runs it); over the built-in references (docs/plugins.md)",
    )
    reference_dir: OutPath = Field(
        default=Path("reference_outputs"),
        validate_default=True,  # the default too is next to the suite, not in the folder a run starts from
        description="reference store root (default: reference_outputs next to the suite)",
    )
    out: OutPath | None = Field(
        default=None,
        description="where `trtverify run` writes results.json and report.html, relative to the suite file (suites "
        "written by `layerwise` and `repair`: `.`, their own folder); default: `reports/<name>` under the current "
        "folder; `run --out` overrides",
    )
    models: Models = Field(description="the models")
    inputs: Inputs = Field(description="the samples of the tensor stages")
    backends: Backends = Field(default_factory=Backends, description="options per backend")
    stages: Stages = Field(description="what to check")

    def candidates_of(self, stage: Any) -> list[str]:
        """The candidates a stage (layerwise, e2e) runs: its `candidates` list, or every model candidate."""
        return list(stage.candidates) if stage.candidates is not None else list(self.models.candidates)
