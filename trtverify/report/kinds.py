"""Which stage a result is, importing that stage's module only when a result of its name is present: a layerwise
run's report never loads the build-log parser, the repair search or the e2e tasks (about 0.1 s of imports)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trtverify.config.registry import STAGES


def is_stage(result: Any, name: str) -> bool:
    """isinstance(result, <the result type stage `name` registers>); False, without importing it, for another name
    (a stage that failed before its result was made is a plain StageResult of its name: False too)."""
    if getattr(result, "name", None) != name:
        return False
    return isinstance(result, STAGES.get(name).result_type())


def with_layers(stages: Iterable[Any], kind: str) -> Any:
    """The first stage whose registry entry says it lists engine layers of `kind` ('build': from build logs,
    'engine': of the engines it timed), or None; what the report links between stages, named by no stage."""
    for s in stages:
        name = getattr(s, "name", None)
        if name in STAGES and STAGES.get(name).layers == kind and is_stage(s, name):
            return s
    return None
