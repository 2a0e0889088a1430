"""Pure-Python analysis of TensorRT build logs (no TensorRT import).

`parse(text)` tokenizes a log of any supported dialect (trtexec / C++ samples, Python API
loggers, Polygraphy, DeepStream, Torch-TensorRT, TF-TRT, ONNX Runtime's TensorRT EP,
TensorRT-RTX) and returns the accuracy-relevant findings, the TensorRT version and build
options the log states, and the engine layer table where layer information is present.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trtverify.buildlog.findings import Finding, collect, precision_fallback
from trtverify.buildlog.layers import layer_table
from trtverify.buildlog.lines import Record, split_records

__all__ = ["BuildLog", "Finding", "parse", "parse_file"]

_VERSIONS = [
    re.compile(r"TensorRT(?:-RTX)? [Vv]ersion:? (?P<v>\d+\.\d+(?:\.\d+)*)"),
    re.compile(r"\[TensorRT v(?P<n>\d{4,6})\]"),
    re.compile(r"libnvinfer(?:_builder_resource)?\.so\.(?P<v>\d+\.\d+\.\d+)"),
    re.compile(r"\bTRT-(?P<n>\d{4,6})-\w*Calibrat"),
    re.compile(r"TensorRT(?:-RTX)? (?P<v>\d+\.\d+\.\d+(?:\.\d+)?)\b"),
]


def _from_number(n: str) -> str:
    """7000 -> 7.0.0, 8502 -> 8.5.2, 100400 -> 10.4.0 (TensorRT's NV_TENSORRT_VERSION)."""
    if len(n) == 4:
        return f"{n[0]}.{n[1]}.{int(n[2:])}"
    return f"{int(n[:-4])}.{int(n[-4:-2])}.{int(n[-2:])}"


def find_version(records: list[Record]) -> str | None:
    for rx in _VERSIONS:
        for r in records:
            m = rx.search(r.text)
            if m:
                return m.group("v") if "v" in m.groupdict() and m.group("v") else _from_number(m.group("n"))
    return None


_OPTION_RULES: list[tuple[str, re.Pattern[str]]] = [
    ("precision", re.compile(r"^Precision: (?P<v>\S+)")),
    ("flags", re.compile(r"--(?P<v>fp16|int8|best|bf16|fp8|int4|stronglyTyped|noTF32)\b")),
    (
        "builder_optimization_level",
        re.compile(r"(?:--builderOptimizationLevel=|Builder Optimization Level:? )(?P<v>\d+)"),
    ),
    (
        "workspace",
        re.compile(r"(?:--workspace=|--memPoolSize=workspace:|Memory Pools: workspace: |Workspace: )(?P<v>[^,\s]+)"),
    ),
    ("dla_core", re.compile(r"(?:--useDLACore=|^DLACore: )(?P<v>\d+)")),
    ("dla", re.compile(r"(?P<v>Default DLA is enabled|setDefaultDeviceType)")),
]


def find_options(records: list[Record]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for r in records:
        for key, rx in _OPTION_RULES:
            m = rx.search(r.text)
            if not m:
                continue
            if key == "flags":
                options.setdefault("flags", [])
                if m.group("v") not in options["flags"]:
                    options["flags"].append(m.group("v"))
            elif key == "dla":
                options["dla"] = True
            else:
                options.setdefault(key, m.group("v"))
    return options


def _requested_precision(options: dict[str, Any]) -> str | None:
    words = " ".join([str(options.get("precision", ""))] + list(options.get("flags", []))).upper()
    for p, keys in (("INT8", ("INT8", "BEST")), ("FP8", ("FP8",)), ("FP16", ("FP16",)), ("BF16", ("BF16",))):
        if any(k in words for k in keys):
            return p
    return None


_KNOWN_BARE = re.compile(r"^(?:Layer\(|Name: .*LayerType:|-{5,}\s*Timing|Tactic:? -?\w+|Fastest Tactic)")


@dataclass(frozen=True)
class BuildLog:
    version: str | None
    dialects: dict[str, int]
    options: dict[str, Any]
    findings: list[Finding] = field(default_factory=list)
    layers: list[dict[str, Any]] = field(default_factory=list)
    unknown_lines: int = 0
    lines: int = 0

    @property
    def dialect(self) -> str | None:
        """The dialect of most records, None if no line carries a known prefix."""
        return max(self.dialects, key=lambda k: self.dialects[k]) if self.dialects else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "dialect": self.dialect,
            "dialects": dict(self.dialects),
            "options": dict(self.options),
            "findings": [f.to_dict() for f in self.findings],
            "layers": [dict(x) for x in self.layers],
            "unknown_lines": self.unknown_lines,
            "lines": self.lines,
        }


def parse(text: str) -> BuildLog:
    records = split_records(text)
    dialects: dict[str, int] = {}
    unknown = 0
    for r in records:
        if r.dialect == "unknown":
            if not _KNOWN_BARE.match(r.text):
                unknown += 1
        elif r.dialect not in ("blank", "elision"):
            dialects[r.dialect] = dialects.get(r.dialect, 0) + 1
    options = find_options(records)
    layers = layer_table(records)
    findings = collect(records, precision_fallback(layers, _requested_precision(options)))
    return BuildLog(
        find_version(records),
        dialects,
        options,
        findings,
        layers,
        unknown,
        text.count("\n") + (0 if text.endswith("\n") or not text else 1),
    )


def parse_file(path: str | Path) -> BuildLog:
    return parse(Path(path).read_bytes().decode("utf-8", errors="replace"))
