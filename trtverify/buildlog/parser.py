"""Pure-Python analysis of TensorRT build logs (no TensorRT import).

`parse(text)` tokenizes a log of any supported dialect (trtexec / C++ samples, Python API
loggers, Polygraphy, DeepStream, Torch-TensorRT, TF-TRT, ONNX Runtime's TensorRT EP,
TensorRT-RTX) and returns the accuracy-relevant findings, the TensorRT version and build
options the log states, and the engine layer table where layer information is present.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import Field

from trtverify.buildlog import events, families, floor, performance, polygraphy, polygraphy_debug
from trtverify.buildlog.context import ContextItem, LogContext, scan
from trtverify.buildlog.findings import RULES, Finding, precision_fallback
from trtverify.buildlog.folding import fold, gather
from trtverify.buildlog.layers import EngineLayer, layer_table
from trtverify.buildlog.lines import LogRecord, split_records
from trtverify.buildlog.noise import noise_classes
from trtverify.buildlog.tools import registry as tools
from trtverify.util.errors import UsageError
from trtverify.util.fsutil import FileTooLarge, read_capped
from trtverify.util.record import Record

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


def find_version(records: list[LogRecord]) -> str | None:
    return stated_version(records)[0]


def stated_version(records: list[LogRecord]) -> tuple[str | None, int]:
    """(the TensorRT version the log states, the line it states it on); (None, 0) where it states none."""
    for rx in _VERSIONS:
        for r in records:
            m = rx.search(r.text)
            if m:
                v = m.group("v") if "v" in m.groupdict() and m.group("v") else _from_number(m.group("n"))
                return v, r.first
    return None, 0


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


def find_options(records: list[LogRecord]) -> dict[str, Any]:
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


class BuildLog(Record):
    """What a log says: TensorRT version, build options, findings and the engine layer table."""

    product: str = Field(
        default="TensorRT", description="TensorRT, or TensorRT-RTX (named in the log, or its logger's dialect)"
    )
    version: str | None = Field(description="the version of `product` the log states")
    context: LogContext = Field(
        default_factory=LogContext,
        description="what the log says it ran (generic patterns, each item with its line): tools and versions, GPU, "
        "model and engine files, input shapes and profiles, precision, batch size",
    )
    dialect: str | None = Field(description="the dialect of most lines (None: no line carries a known prefix)")
    dialects: dict[str, int] = Field(description="lines per dialect")
    options: dict[str, Any] = Field(description="build options the log states")
    findings: list[Finding] = Field(default_factory=list)
    layers: list[EngineLayer] = Field(default_factory=list)
    unknown_lines: int = Field(default=0, description="lines no dialect, rule or reader recognised")
    lines: int = 0

    @property
    def unknown_rate(self) -> float:
        """The share of the log's lines that nothing recognised."""
        return self.unknown_lines / self.lines if self.lines else 0.0


def _recognised(r: LogRecord, read: set[int], noise: dict[int, str]) -> bool:
    """A record is recognised when it feeds a finding (a rule read one of its lines), is in a named noise class
    (noise.py), or is a layer-information line of a known bare form; blank lines and elisions are not counted."""
    if r.dialect in ("blank", "elision"):
        return True
    if any(x in read for x in range(r.first, r.last + 1)) or r.first in noise:
        return True
    return bool(_KNOWN_BARE.match(r.text))


def parse(text: str, rules: bool = True) -> BuildLog:
    """What `text` says. rules=False: the generic layer alone (context, evidence, the floor under every error
    and warning) without any tool's or family's rules (bench/logcorpus_values.py --generic measures it)."""
    records = split_records(text)
    dialects: dict[str, int] = {}
    for r in records:
        if r.dialect not in ("unknown", "blank", "elision"):
            dialects[r.dialect] = dialects.get(r.dialect, 0) + 1
    options = find_options(records)
    layers = layer_table(records)
    extra = precision_fallback(layers, _requested_precision(options)) + performance.hits(text) if rules else []
    every = RULES + polygraphy.RULES + polygraphy_debug.RULES + families.RULES + tools.RULES
    hits = gather(records, extra, every if rules else ())
    covered = {h.line for h in hits}
    hits += floor.hits(records, covered)  # every error and warning reported
    read = {x for h in hits for x in range(*(h.span[0], h.span[1] + 1) if h.span else (h.line, h.line + 1))}
    read.update(x for h in hits for x in h.read)
    happened, more_events = events.hits(records, read)  # state changes on info lines no rule or the floor read
    hits += happened
    read.update(h.line for h in happened)
    tools.attach_engine_files(hits, records)  # the engine file named in every finding about an engine
    findings = fold(hits, text.split("\n"))
    noise = noise_classes(records)
    unknown = sum(1 for r in records if not _recognised(r, read, noise))
    version, version_line = stated_version(records)
    context = scan(text, records)
    if more_events:
        context.left_out["events"] = more_events
    _merge(context, (version, version_line), findings)
    rtx = "rtx" in dialects or any("TensorRT-RTX" in r.text or "tensorrt_rtx" in r.text for r in records)
    return BuildLog(
        product="TensorRT-RTX" if rtx else "TensorRT",
        version=version,
        context=context,
        dialect=max(dialects, key=lambda k: dialects[k]) if dialects else None,
        dialects=dialects,
        options=options,
        findings=findings,
        layers=layers,
        unknown_lines=unknown,
        lines=text.count("\n") + (0 if text.endswith("\n") or not text else 1),
    )


def _merge(context: LogContext, stated: tuple[str | None, int], findings: list[Finding]) -> None:
    """What the rules read that the generic patterns did not: the TensorRT version, engine files the rules named."""
    version, line = stated
    if version and not any(
        t.value == version and t.detail.get("tool", "").startswith("TensorRT") for t in context.tools
    ):
        context.tools.insert(0, ContextItem(value=version, line=line, detail={"tool": "TensorRT"}))
    known = {e.value for e in context.engines}
    for f in findings:
        path = f.detail.get("path") if f.kind == "engine_file" else None
        if isinstance(path, str) and path not in known:
            known.add(path)
            how = {"direction": str(f.detail["action"])} if f.detail.get("action") else {}
            context.engines.append(ContextItem(value=path, line=f.lines[0], detail=how))


MAX_LOG_BYTES = 256 << 20  # a verbose build of a large model logs tens of MB


def read_log_text(path: str | Path) -> str:
    """A build log's text: size-bounded, UTF-16 with a BOM (PowerShell's `>`) decoded, binary refused."""
    path = Path(path)
    try:
        raw = read_capped(path, MAX_LOG_BYTES)
    except FileNotFoundError:
        raise UsageError(f"{path}: build log not found") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a folder, expected a build log") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except FileTooLarge:
        raise UsageError(f"{path}: larger than {MAX_LOG_BYTES >> 20} MB; is it a build log?") from None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        text = raw.decode("utf-16", errors="replace")
    else:
        text = raw.decode("utf-8", errors="replace")
    nul = text.find("\0")
    if nul >= 0:
        line = text.count("\n", 0, nul) + 1
        raise UsageError(
            f"{path}: a NUL byte on line {line}: a binary file, not a build log "
            "(give the text TensorRT printed, e.g. trtexec ... 2>&1 | tee build.log)"
        )
    return text


def parse_file(path: str | Path) -> BuildLog:
    return parse(read_log_text(path))
