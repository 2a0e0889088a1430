"""Suite paths: relative ones are relative to the suite file's folder (validation context `base_dir`)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationInfo


def resolve_path(value: Path | None, info: ValidationInfo) -> Path | None:
    if value is None:
        return None
    base = (info.context or {}).get("base_dir")
    p = Path(value).expanduser()
    if not p.is_absolute() and base is not None:
        p = Path(base) / p
    return p.resolve() if base is not None else p
