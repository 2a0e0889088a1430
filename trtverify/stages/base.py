"""What every stage receives and returns."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.compare.checks import CheckResult
from trtverify.config.loader import LoadedSuite
from trtverify.onnxinfo import TensorMeta
from trtverify.reference import ReferenceStore

# progress(stage, done, total, what): called by stages on long work; the CLI renders it
Progress = Callable[[str, int, int, str], None]


def no_progress(stage: str, done: int, total: int, what: str) -> None:
    return None


@dataclass
class StageContext:
    loaded: LoadedSuite
    samples: list[dict[str, np.ndarray]]
    model_inputs: list[TensorMeta]
    store: ReferenceStore
    update_reference: bool = False
    progress: Progress = no_progress
    shard: Any = None  # trtverify.shard.Shard when this run is one shard of several
    out_dir: Path | None = None  # where the run writes (a shard's raw predictions go there)


@dataclass
class StageResult:
    name: str
    status: str  # passed | failed | error | skipped
    checks: list[CheckResult] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    duration_s: float = 0.0
    error: dict[str, Any] | None = None  # {kind: user|dependency|internal, message, traceback?, exit_code}

    @classmethod
    def from_checks(cls, name: str, checks: list[CheckResult], **kw: Any) -> StageResult:
        status = "passed" if checks and all(c.passed for c in checks) else "failed"
        return cls(name, status, checks, **kw)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "duration_s": round(self.duration_s, 4),
            "checks": [c.to_dict() for c in self.checks],
            "notes": list(self.notes),
            "timings": {k: round(v, 6) for k, v in self.timings.items()},
            "error": self.error,
            **self.details,
        }
