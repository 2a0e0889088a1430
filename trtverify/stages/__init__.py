"""Stages in the order they run; each is 'module:function' so importing this imports nothing heavy."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from trtverify.stages.base import StageContext, StageResult

STAGES: dict[str, str] = {
    "framework": "trtverify.stages.framework:run",
    "layerwise": "trtverify.stages.layerwise:run",
    "e2e": "trtverify.stages.e2e:run",
    "buildlog": "trtverify.stages.buildlog:run",
}


def stage_function(name: str) -> Callable[[StageContext], StageResult]:
    module, fn = STAGES[name].split(":")
    return getattr(importlib.import_module(module), fn)
