"""One line of a TensorRT layer-information dump: `Layer(Type): name, Tactic: t, in -> out` (TensorRT 8.x
verbose build logs) and `Name: n, LayerType: t, ..., TacticName/TacticValue, Metadata` (8.4+ / TensorRT-RTX
detailed dumps, and trtexec's `--dumpLayerInfo` console listing). The one reader of this format: the build-log
parser (trtverify.buildlog) and the engine audit (trtverify.engine) both call it."""

from __future__ import annotations

import re

from pydantic import Field

from trtverify.record import Record


class EngineLayer(Record):
    """One engine layer from a layer-information dump."""

    name: str
    type: str
    precision: str | None = Field(description="of its output: FP32, FP16, BF16, INT8, FP8, INT32, ...")
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
        fmt = _FORMAT.search(outs.group("v")) if outs else None
        tn, tv = _TACTIC_NAME.search(text), _TACTIC_VALUE.search(text)
        return EngineLayer(
            name=m.group("name"),
            type=m.group("type").strip(),
            precision=precision_of(fmt.group("v")) if fmt else None,
            tactic=tv.group("v") if tv else None,
            tactic_name=tn.group("v").strip() if tn else None,
            onnx_nodes=[x.strip() for x in _ONNX.findall(text)],
            line=line,
        )
    return None
