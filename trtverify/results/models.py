"""The typed results.json. Every stage's result type is registered with the stage
(`trtverify.config.registry.STAGES`); the committed JSON Schema is generated from `Results`."""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal, Union

from pydantic import Field, SerializeAsAny, create_model, field_serializer

from trtverify.config.registry import STAGES
from trtverify.stages.base import Shard, StageResult
from trtverify.util.record import Record, optional

SCHEMA_VERSION = 2


class SuiteInfo(Record):
    name: str
    path: str = Field(description="the suite file, as given")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    description: str | None


class Gpu(Record):
    name: str
    driver: str
    memory: str


class Environment(Record):
    trtverify: str
    python: str
    platform: str
    cpu: str
    cpu_count: int | None
    gpus: list[Gpu]
    libraries: dict[str, str] = Field(description="installed versions of the libraries that matter")


class Merged(Record):
    shards: int = Field(ge=1)
    dirs: list[str]


class Interruption(Record):
    """A run stopped by a signal (Ctrl-C, SIGTERM) before it finished."""

    run_started: str = Field(description="when the stopped run started (ISO 8601, UTC)")
    stopped: str = Field(description="when it was stopped (ISO 8601, UTC)")
    signal: Literal["SIGINT", "SIGTERM"]
    stages_done: int = Field(ge=0, description="the stages it finished before it stopped")
    earlier_kept: bool = Field(
        description="it finished no stage, so the results here are still the earlier run's (started: the earlier "
        "run's start), untouched but for this record"
    )


class Results(Record):
    """Written by `trtverify run` (after every stage) and `trtverify merge`. Non-finite numbers are the
    strings "nan", "inf", "-inf"."""

    schema_version: Literal[2] = SCHEMA_VERSION
    trtverify_version: str
    suite: SuiteInfo
    started: str = Field(description="ISO 8601, UTC")
    duration_s: float
    complete: bool = Field(description="every planned stage ran (false: the run was interrupted)")
    passed: bool = Field(description="complete, and every stage passed (or ran in another shard)")
    exit_code: int | None = Field(description="the exit code of the run; null while incomplete")
    # each stage's result as its own type writes itself; `document()` reads them back by name
    stages: list[SerializeAsAny[StageResult]]
    environment: Environment
    shard: Shard | None = optional("the part of a run this was (`run --shard I/N`)")
    merged: Merged | None = optional("`trtverify merge` combined the shards' results")
    interrupted: Interruption | None = optional("the last run into this folder was stopped by a signal")

    @field_serializer("duration_s")
    def _round(self, v: float) -> float:
        return round(v, 3)

    def stage(self, name: str) -> Any:
        """The result of stage `name`, or None."""
        return next((s for s in self.stages if s.name == name), None)


def all_passed(stages: list[StageResult], complete: bool) -> bool:
    """Complete, and every stage passed or ran in another shard: never on nothing."""
    return bool(stages) and complete and all(s.done for s in stages)


@functools.cache
def document() -> type[Results]:
    """Results whose stages are read as their own types (the stage `name` tells which): for reading a
    results.json back and for its schema. It imports every stage's module, which a run need not: a layerwise run
    writes its one result without the build-log parser, the repair search or the e2e tasks (0.1 s of imports)."""
    record = Annotated[
        Union[tuple(entry.result_type() for entry in STAGES.entries())],  # type: ignore[valid-type]  # noqa: UP007
        Field(discriminator="name"),
    ]
    return create_model(  # type: ignore[call-overload,no-any-return]
        "Results", __base__=Results, __module__=__name__, __doc__=Results.__doc__, stages=(list[record], ...)
    )
