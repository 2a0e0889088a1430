"""The context block (buildlog/context.py) on every log of the corpus: wherever a log states a model file, an
engine file or the TensorRT version, the context names it. The check finds them in the raw text with its own
simple patterns, independent of the parser's; EXCEPTIONS lists what it finds that is not one, with the reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trtverify.buildlog.context import scan
from trtverify.buildlog.entities import trt_number
from trtverify.buildlog.lines import split_records
from trtverify.buildlog.parser import stated_version

DATA = Path(__file__).resolve().parents[1] / "data"
LOGS = sorted(DATA.glob("logcorpus/*/*.log")) + sorted(DATA.glob("buildlogs/**/*.log"))

_MODEL = re.compile(r"(?<![\w./-])([\w./-]*\w\.(?:onnx|safetensors|pt|pth|pb|tflite|uff|caffemodel|h5))\b(?![.\w/-])")
_ENGINE = re.compile(r"(?<![\w./-])([\w./-]*\w\.(?:engine|plan|trt))\b(?![.\w/(-])")
_TRT = re.compile(
    r"(?:\bTensorRT[ _-]?(?:[Vv]ersion:?\s*)?v?|\btensorrt[=_-]+|libnvinfer\.so\.|\bTRT[ -]?v?)"
    r"(\d+\.\d+(?:\.\d+)*)\b(?!\.x)"
    r"|\[TensorRT v(\d{4,6})\]"
)

# (log name, value): found by the simple patterns but not a model / engine / version the log states, and why
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("029_rtx_demo_engine_build_runtime_cache_flux_notebook.log", "rtx_demo.utils.engine"): "a Python logger's name "
    "in brackets (`[rtx_demo.utils.engine] [INFO]`), not a file",
}


def _has(values: list[str], want: str) -> bool:
    return any(v == want or v.endswith("/" + want) or want.endswith("/" + v) or want in v for v in values)


@pytest.mark.parametrize("path", LOGS, ids=[p.name for p in LOGS])
def test_context_names_model_engine_and_version(path: Path) -> None:
    text = path.read_text(encoding="utf-8", errors="replace")
    ctx = scan(text)
    stated, _ = stated_version(split_records(text))  # what the parser adds to the context (parser._merge)
    missing = []
    for rx, items, what in ((_MODEL, ctx.models, "model"), (_ENGINE, ctx.engines, "engine")):
        for want in dict.fromkeys(m.group(1) for m in rx.finditer(text)):
            if (path.name, want) not in EXCEPTIONS and not _has([i.value for i in items], want):
                missing.append(f"{what} {want}")
    versions = [t.value for t in ctx.tools if t.detail.get("tool") == "TensorRT"] + [stated]
    for want in dict.fromkeys(m.group(1) or trt_number(m.group(2)) for m in _TRT.finditer(text)):
        if (path.name, want) not in EXCEPTIONS and want not in versions:
            missing.append(f"TensorRT {want}")
    assert not missing, f"{path.name}: the context lacks {missing}"


def test_context_items_carry_their_line() -> None:
    text = (
        "starting\n[I] TensorRT version: 10.4.0\n[I] Loading engine from /m/resnet.engine\n"
        "[I] Selected Device: NVIDIA A100-SXM4-80GB\n[I] Compute Capability: 8.0\n"
    )
    ctx = scan(text)
    assert [(t.value, t.line, t.detail["tool"]) for t in ctx.tools] == [("10.4.0", 2, "TensorRT")]
    assert [(e.value, e.line, e.detail.get("direction")) for e in ctx.engines] == [("/m/resnet.engine", 3, "read")]
    assert ("NVIDIA A100-SXM4-80GB", 4) in [(g.value, g.line) for g in ctx.gpus]
    assert [g.detail.get("compute_capability") for g in ctx.gpus if g.line == 5] == ["8.0"]
