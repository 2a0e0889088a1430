"""Which stage a result is, importing that stage's module only when a result of its name is present: a layerwise
run's report never loads the build-log parser, the repair search or the e2e tasks (about 0.1 s of imports)."""

from __future__ import annotations

import importlib
from typing import Any

# stage name -> (module, class) of its result
_RESULTS = {
    "buildlog": ("trtverify.stages.buildlog", "BuildlogResult"),
    "e2e": ("trtverify.stages.e2e.models", "E2EResult"),
    "framework": ("trtverify.stages.framework", "FrameworkResult"),
    "perf": ("trtverify.stages.perf", "PerfResult"),
    "repair": ("trtverify.repair.stage", "RepairResult"),
}


def is_stage(result: Any, name: str) -> bool:
    """isinstance(result, <the result class of stage `name`>); False, without importing it, for another name (a
    stage that failed before its result was made is a plain StageResult of its name: False too)."""
    if getattr(result, "name", None) != name:
        return False
    module, cls = _RESULTS[name]
    return isinstance(result, getattr(importlib.import_module(module), cls))
