"""Every tool-console rule and kind of trtverify/buildlog/tools/, gathered for the parser and config.findings."""

from __future__ import annotations

from trtverify.buildlog.tools import builder, engines, modelopt, torch_trt, trtllm
from trtverify.buildlog.tools.engines import attach_engine_files

RULES = trtllm.RULES + torch_trt.RULES + modelopt.RULES + engines.RULES + builder.RULES
KINDS = {**trtllm.KINDS, **torch_trt.KINDS, **modelopt.KINDS, **engines.KINDS, **builder.KINDS}

__all__ = ["KINDS", "RULES", "attach_engine_files"]
