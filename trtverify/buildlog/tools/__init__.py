"""Tool consoles beyond TensorRT's own logger (issue 39): TensorRT-LLM builds and build memory (trtllm.py),
Torch-TensorRT (torch_trt.py), ModelOpt (modelopt.py), engine files and Polygraphy's convert / inspect and the
engine loader's version checks (engines.py), verbose builder lines and TensorRT-RTX (builder.py). Each module has
RULES and KINDS (kind -> (category, family)); config.findings registers the kinds (TOOL_KINDS)."""

from __future__ import annotations

from trtverify.buildlog.tools import builder, engines, modelopt, torch_trt, trtllm
from trtverify.buildlog.tools.engines import attach_engine_files

RULES = trtllm.RULES + torch_trt.RULES + modelopt.RULES + engines.RULES + builder.RULES
KINDS = {**trtllm.KINDS, **torch_trt.KINDS, **modelopt.KINDS, **engines.KINDS, **builder.KINDS}

__all__ = ["KINDS", "RULES", "attach_engine_files"]
