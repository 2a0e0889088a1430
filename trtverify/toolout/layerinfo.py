"""One line of a TensorRT layer-information dump: `Layer(Type): name, Tactic: t, in -> out` (TensorRT 8.x
verbose build logs) and `Name: n, LayerType: t, ..., TacticName/TacticValue, Metadata` (8.4+ / TensorRT-RTX
detailed dumps, and trtexec's `--dumpLayerInfo` console listing). The one reader of this format: the build-log
parser (trtverify.buildlog) and the engine audit (trtverify.engine) both call it. `nodes_of`: the ONNX nodes of one
`--exportLayerInfo` layer record, for the engine audit and for naming captured TensorRT tensors (toolout.layermap)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field

from trtverify.util.record import Record


class EngineLayer(Record):
    """One engine layer from a layer-information dump."""

    name: str
    type: str
    precision: str | None = Field(
        description="FP32, FP16, BF16, INT8, FP8, INT32, ...: its quantized weights' type where it has such weights, "
        "else the narrowest of its outputs' types"
    )
    tactic: str | None
    tactic_name: str | None
    onnx_nodes: list[str] = Field(description="the ONNX nodes fused into it, where the dump lists them")
    line: int


_OLD = re.compile(
    r"^Layer\((?P<type>[^)]*)\): (?P<name>.+?), Tactic: (?P<tactic>-?(?:0x)?[0-9a-fA-F]+), (?P<io>.*)$", re.S
)
_NEW = re.compile(r"^Name: (?P<name>.+?), LayerType: (?P<type>[^,]+),")
_TACTIC_NAME = re.compile(r"TacticName: (?P<v>[^,]+)")
_TACTIC_VALUE = re.compile(r"TacticValue: (?P<v>-?(?:0x)?[0-9a-fA-F]+)")
_OUTPUTS = re.compile(r"Outputs: \[(?P<v>.*?)\}\s*\]", re.S)
_CONSTANTS = re.compile(r"Constants: \[(?P<v>.*?)\}\s*\]", re.S)
_FORMAT = re.compile(r"Datatype: (?P<v>[^,}]*)")
_ONNX = re.compile(r"\[ONNX Layer: (?P<v>[^\]]*)\]")
_OLD_OUT = re.compile(r"\[(?P<t>[A-Za-z0-9]+)\([^\[\]]*\)\]\s*$")

_PRECISION_WORDS = [
    ("FP32", re.compile(r"\b(?:FP32|Float|float32)\b", re.I)),
    ("FP16", re.compile(r"\b(?:FP16|Half|float16)\b", re.I)),
    ("BF16", re.compile(r"\b(?:BF16|BFloat16)\b", re.I)),
    ("INT8", re.compile(r"\b(?:Int8|INT8)\b")),
    ("FP8", re.compile(r"\b(?:FP8|Fp8)\b")),
    ("INT32", re.compile(r"\b(?:Int32|INT32)\b")),
    ("INT64", re.compile(r"\b(?:Int64|INT64)\b")),
    ("BOOL", re.compile(r"\bBool\b", re.I)),
]


_NARROW = {"INT4": 0, "FP8": 1, "INT8": 1, "FP16": 2, "BF16": 2, "FP32": 3}


def narrowest(formats: list[str]) -> str | None:
    """The narrowest floating or quantized type among output formats (a Myelin kernel that writes a marked FP32
    output beside its INT8 one computes in INT8); else the first output's type."""
    precs = [p for p in (precision_of(f) for f in formats) if p is not None]
    ranked = [p for p in precs if p in _NARROW]
    return min(ranked, key=lambda p: _NARROW[p]) if ranked else (precs[0] if precs else None)


def precision_of(fmt: str) -> str | None:
    for name, rx in _PRECISION_WORDS:
        if rx.search(fmt):
            return name
    return None


def parse_layer_line(text: str, line: int = 0) -> EngineLayer | None:
    """The layer one dump line describes, or None when the line is not a layer line."""
    m = _OLD.match(text)
    if m:
        out = _OLD_OUT.search(m.group("io"))
        return EngineLayer(
            name=m.group("name"),
            type=m.group("type"),
            precision=precision_of(out.group("t")) if out else None,
            tactic=m.group("tactic"),
            tactic_name=None,
            onnx_nodes=[],
            line=line,
        )
    m = _NEW.match(text)
    if m:
        outs = _OUTPUTS.search(text)
        formats = [f.group("v") for f in _FORMAT.finditer(outs.group("v"))] if outs else []
        consts = _CONSTANTS.search(text)
        weights = [precision_of(f.group("v")) for f in _FORMAT.finditer(consts.group("v"))] if consts else []
        quantized = [w for w in weights if w in ("INT4", "INT8", "FP8")]  # quantized weights: it computes in them
        tn, tv = _TACTIC_NAME.search(text), _TACTIC_VALUE.search(text)
        return EngineLayer(
            name=m.group("name"),
            type=m.group("type").strip(),
            precision=quantized[0] if quantized else narrowest(formats),
            tactic=tv.group("v") if tv else None,
            tactic_name=tn.group("v").strip() if tn else None,
            onnx_nodes=[x.strip() for x in _ONNX.findall(text)],
            line=line,
        )
    return None


ONNX_META = re.compile(r"\[ONNX Layer: ([^\]]+)\]")
PWN_SPLIT = re.compile(r"[(),]")


def nodes_of(name: str, layer: dict[str, Any] | None = None) -> list[str]:
    """The ONNX nodes a layer implements: its `Metadata` where given, else the parts of its (fused) name."""
    meta = (layer or {}).get("Metadata")
    if isinstance(meta, str) and ONNX_META.search(meta):
        return list(dict.fromkeys(ONNX_META.findall(meta)))
    if name.startswith("{ForeignNode[") and name.endswith("]}"):
        return [p for p in name[len("{ForeignNode[") : -2].split("...") if p]  # a Myelin region's first and last node
    out = []
    for part in (p.strip() for p in name.split(" + ")):
        if part.startswith("PWN("):  # TensorRT 8's fused pointwise layer: PWN(PWN(/act/Sigmoid), /act/Mul)
            out += [q.strip() for q in PWN_SPLIT.split(part.replace("PWN(", "(")) if q.strip()]
        elif part:
            out.append(part)
    return out
