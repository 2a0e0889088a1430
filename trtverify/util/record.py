"""The base of every typed result record (results.json is built from these, and read back into them).

Records are frozen pydantic models; unknown keys are refused when a file is read back. Fields
declared with `optional()` or `omitted()` are left out of the JSON when they are empty, so a
row lists only what applies to it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    def dump(self) -> dict[str, Any]:
        """Plain Python data (floats stay floats; `fsutil.to_json` writes non-finite ones as strings)."""
        return self.model_dump(mode="python")


def _none(value: Any) -> bool:
    return value is None


def _empty(value: Any) -> bool:
    return not value


def optional(description: str = "", **kw: Any) -> Any:
    """A field that is None by default and left out of the JSON while it is None."""
    return Field(default=None, exclude_if=_none, description=description or None, **kw)


def omitted(factory: type = dict, description: str = "") -> Any:
    """A collection field left out of the JSON while it is empty."""
    return Field(default_factory=factory, exclude_if=_empty, description=description or None)
