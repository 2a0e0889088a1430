"""What every stage receives (a context and its part of the run plan) and returns (a typed result)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, TypeVar

import numpy as np
from pydantic import Field, PrivateAttr, field_serializer

from trtverify.compare.checks import CheckResult
from trtverify.config.loader import LoadedSuite
from trtverify.data.reference import ReferenceStore
from trtverify.graph.onnxinfo import TensorMeta
from trtverify.util.errors import EXIT_CHECK_FAILED, EXIT_DEPENDENCY, EXIT_INTERNAL, EXIT_OK, UsageError
from trtverify.util.record import Record

# progress(stage, done, total, what): called by stages on long work; the CLI renders it (total 0: no count)
Progress = Callable[[str, int, int, str], None]


def no_progress(stage: str, done: int, total: int, what: str) -> None:
    return None


class Shard(Record):
    """Shard `index` (from 1) of `count`."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if not m:
            raise UsageError(f"--shard {text!r}: expected I/N, e.g. 1/4 (shard I of N, counted from 1)")
        i, n = int(m.group(1)), int(m.group(2))
        if n < 1 or not 1 <= i <= n:
            raise UsageError(f"--shard {text}: I must be between 1 and N (N >= 1)")
        return cls(index=i, count=n)

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    def positions(self, total: int, batch_size: int) -> range:
        """This shard's samples of `total`: whole batches split as evenly as possible, so every batch
        holds the same samples as in an unsharded run."""
        nb = -(-total // batch_size)
        lo, hi = (self.index - 1) * nb // self.count, self.index * nb // self.count
        return range(min(lo * batch_size, total), min(hi * batch_size, total))


@dataclass(frozen=True)
class StageWork:
    """What the run plan gives one stage: the candidates it runs, or its slice of the dataset.

    `candidates` None: every candidate the stage is configured with. `data` None: the whole dataset."""

    candidates: tuple[str, ...] | None = None
    data: Shard | None = None


@dataclass(kw_only=True)
class StageContext:
    loaded: LoadedSuite
    samples: list[dict[str, np.ndarray]]
    model_inputs: list[TensorMeta]
    store: ReferenceStore
    update_reference: bool = False
    progress: Progress = no_progress
    work: StageWork = StageWork()
    out_dir: Path | None = None  # where the run writes (a shard's e2e accumulator states go there)
    update_baseline: bool = False  # rewrite the stored baselines (perf, e2e, layerwise: docs/baselines.md)
    chosen_by: str | None = None  # what chose `samples` instead of the suite's inputs (`--samples worst`)
    shape: str | None = None  # in a sweep: the shape set or batch size this run is at (its result's `shape`)

    def samples_upto(self, cap: int | None) -> list[dict[str, np.ndarray]]:
        """The samples a stage uses: its `samples: N` cap applies to the suite's inputs; samples chosen on
        the command line (`--samples worst`) are fed exactly, every one of them."""
        if cap and self.chosen_by is None:
            return self.samples[:cap]
        return self.samples

    def candidates(self, configured: Sequence[str]) -> list[str]:
        """The candidates this run of a stage covers: the plan's, or every configured one."""
        if self.work.candidates is None:
            return list(configured)
        return [c for c in configured if c in self.work.candidates]


class StageError(Record):
    """Why a stage could not run."""

    kind: Literal["user", "dependency", "internal", "crash"] = Field(
        description="user: the suite or a model under test; dependency: a missing library or hardware; internal: a bug "
        "in trtverify; crash: the process died of a signal in native code (contained: the run went on)"
    )
    message: str
    traceback: str | None = Field(default=None, exclude_if=lambda v: v is None)
    exit_code: int


Status = Literal["passed", "failed", "error", "skipped"]


class StageResult(Record):
    """The fields every stage result has; each stage adds its own (see the subclasses)."""

    name: str
    status: Status
    duration_s: float = 0.0
    checks: list[CheckResult] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict, description="seconds per part of the work")
    error: StageError | None = None
    sharded_away: bool = Field(
        default=False, exclude_if=lambda v: not v, description="skipped because another shard runs it"
    )
    shape: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="the shape set this result is for, in a shape sweep (inputs.shapes): 'x=8x3x224x224'",
    )
    kept_from: str | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="not run by this run (another --stage chosen, or the run stopped before it): the result of the "
        "earlier run of the same suite that started then (ISO 8601), kept",
    )

    # files that go beside results.json (file name -> bytes), which results.json refers to; not part of the record
    _files: dict[str, bytes] = PrivateAttr(default_factory=dict)

    def with_files(self: _R, files: dict[str, bytes]) -> _R:
        """This result, carrying `files` (file name -> bytes) that the results writer puts beside results.json
        before results.json itself (`results.record.write_results`). Copies of the result carry them too."""
        self._files = {**self._files, **files}
        return self

    @property
    def files(self) -> dict[str, bytes]:
        """The files this result carries (empty for a result read back from results.json)."""
        return dict(self._files)

    @field_serializer("duration_s")
    def _round_duration(self, v: float) -> float:
        return round(v, 4)

    @field_serializer("timings")
    def _round_timings(self, v: dict[str, float]) -> dict[str, float]:
        return {k: round(x, 6) for k, x in v.items()}

    @property
    def done(self) -> bool:
        """Passed, or skipped because another shard runs it."""
        return self.status == "passed" or (self.status == "skipped" and self.sharded_away)


_R = TypeVar("_R", bound=StageResult)


def exit_code_for(stages: Sequence[StageResult]) -> int:
    """The run's exit code: an internal error > a missing dependency > a failed check."""
    codes = [EXIT_OK]
    for s in stages:
        if s.error is not None:
            codes.append(s.error.exit_code)
        elif s.status == "failed":
            codes.append(EXIT_CHECK_FAILED)
    for code in (EXIT_INTERNAL, EXIT_DEPENDENCY, EXIT_CHECK_FAILED):
        if code in codes:
            return code
    return max(codes)


def status_of(checks: Sequence[CheckResult]) -> Status:
    """Passed when there are checks and every one passed; never on nothing."""
    return "passed" if checks and all(c.passed for c in checks) else "failed"


def timed(timings: dict[str, float], key: str, seconds: float) -> None:
    """Add `seconds` to `timings[key]`."""
    timings[key] = timings.get(key, 0.0) + seconds


def sum_timings(parts: Iterable[dict[str, float]]) -> dict[str, float]:
    """Each key's seconds summed over `parts` (the timings of a stage's shards)."""
    out: dict[str, float] = {}
    for part in parts:
        for key, seconds in part.items():
            timed(out, key, seconds)
    return out
