"""Every tool-console rule and kind of trtverify/buildlog/tools/, gathered for the parser and config.findings."""

from __future__ import annotations

from trtverify.buildlog.tools import builder, deepstream, engines, modelopt, ort_ep, torch_trt, triton, trtllm
from trtverify.buildlog.tools.engines import attach_engine_files

RULES = (
    trtllm.RULES
    + torch_trt.RULES
    + modelopt.RULES
    + engines.RULES
    + builder.RULES
    + triton.RULES
    + ort_ep.RULES
    + deepstream.RULES
)
KINDS = {
    **trtllm.KINDS,
    **torch_trt.KINDS,
    **modelopt.KINDS,
    **engines.KINDS,
    **builder.KINDS,
    **triton.KINDS,
    **ort_ep.KINDS,
    **deepstream.KINDS,
}

__all__ = ["KINDS", "RULES", "attach_engine_files"]
