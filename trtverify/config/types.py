"""Field types shared by the suite models: strict base model, paths resolved against the suite file.

Paths are resolved against the suite file's folder (passed in the validation context as
`base_dir`); input files must exist unless the context says `check_files: false`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo

from trtverify.util.hooks import is_hook_spec


class Strict(BaseModel):
    """Unknown keys are errors; models are frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


def resolve_path(value: Path | None, info: ValidationInfo) -> Path | None:
    """A relative path is relative to the suite file's folder."""
    if value is None:
        return None
    base = (info.context or {}).get("base_dir")
    p = Path(value).expanduser()
    if not p.is_absolute() and base is not None:
        p = Path(base) / p
    return p.resolve() if base is not None else p


def _check_files(info: ValidationInfo) -> bool:
    return bool((info.context or {}).get("check_files", True))


def _existing_file(value: Path, info: ValidationInfo) -> Path:
    p = resolve_path(value, info)
    assert p is not None
    if _check_files(info):
        if not p.exists():
            raise ValueError(f"file not found: {p}")
        if not p.is_file():
            raise ValueError(f"not a file: {p}")
    return p


def _existing_dir(value: Path, info: ValidationInfo) -> Path:
    p = resolve_path(value, info)
    assert p is not None
    if _check_files(info) and not p.is_dir():
        raise ValueError(f"folder not found: {p}")
    return p


def _existing_path(value: Path, info: ValidationInfo) -> Path:
    p = resolve_path(value, info)
    assert p is not None
    if _check_files(info) and not p.exists():
        raise ValueError(f"file or folder not found: {p}")
    return p


def _resolved(value: Path, info: ValidationInfo) -> Path:
    p = resolve_path(value, info)
    assert p is not None
    return p


def _hook(value: str) -> str:
    if not is_hook_spec(value):
        raise ValueError(f"'{value}' is not of the form 'module:callable' (for example 'mypkg.data:make_feeds')")
    return value


def suffix(*suffixes: str) -> Callable[[Path], Path]:
    """A validator: the path ends in one of `suffixes` (case-insensitive)."""

    def check(p: Path) -> Path:
        if p.suffix.lower() not in suffixes:
            raise ValueError(f"expected a {' or '.join(suffixes)} file, got '{p.name}'")
        return p

    return check


FilePath = Annotated[Path, AfterValidator(_existing_file)]
OnnxPath = Annotated[Path, AfterValidator(_existing_file), AfterValidator(suffix(".onnx"))]
DirPath = Annotated[Path, AfterValidator(_existing_dir)]
PathOrDir = Annotated[Path, AfterValidator(_existing_path)]
OutPath = Annotated[Path, AfterValidator(_resolved)]
HookSpec = Annotated[str, AfterValidator(_hook)]
Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")]

DType = Literal["float32", "float16", "float64", "bfloat16", "int8", "uint8", "int16", "int32", "int64", "bool"]
