"""Accuracy-relevant findings in a tokenized TensorRT build log.

Each rule is a small function over the records that yields hits; `collect` folds hits with
the same key (by default the kind) into one Finding with a count, every line number and the
union of the layers, sorted high -> medium -> info, then by first line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from trtverify.buildlog.evidence import EvidenceLine
from trtverify.buildlog.layers import EngineLayer
from trtverify.buildlog.lines import LogRecord
from trtverify.config.findings import Severity
from trtverify.util.record import Record


class Finding(Record):
    """One kind of problem a log shows, with every line it appears on."""

    kind: str
    category: str = Field(description="fallback | calibration | tactics | accuracy | build")
    severity: Severity
    message: str = Field(description="the first occurrence's message")
    lines: tuple[int, ...] = Field(description="1-based line numbers of every occurrence")
    layers: tuple[str, ...] = Field(description="engine layers involved")
    count: int
    detail: dict[str, Any] = Field(default_factory=dict)
    evidence: list[EvidenceLine] = Field(
        default_factory=list, description="its log lines as written: the first and last few of many, the rest counted"
    )
    entities: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="names and numbers in its lines: files, names, ops, shapes, sizes (bytes), durations (seconds), "
        "versions, error_codes",
    )


@dataclass(frozen=True)
class Hit:
    kind: str
    category: str
    severity: str
    message: str
    line: int
    layers: tuple[str, ...] = ()
    detail: dict[str, Any] = field(default_factory=dict)
    key: str = ""  # fold key; defaults to the kind
    span: tuple[int, int] | None = None  # (first, last) line it read, where more than its own (a cache, a table)
    read: tuple[int, ...] = ()  # other lines it read, scattered (a block's rows between unrelated lines)


Rule = Callable[[list[LogRecord]], Iterator[Hit]]


_PY_WARNING = re.compile(
    r"^#?\s*python warning:\s*(?P<cls>\w+Warning):\s*(?P<text>.*?)\s*(?:\((?P<where>[\w.]+:\d+)\))?$", re.I
)
_GARBLED_DEPRECATION = re.compile(
    r"^Use Deprecated in (?P<since>[\w\- ]*?\d+(?:\.\d+)*)\.\s+(?P<what>.+?)\.?\s*instead\.?$"
)


def _msg(r: LogRecord) -> str:
    """The record's first line; a Python warning that a log captured says what it warns of and where."""
    line = r.text.split("\n", 1)[0]
    m = _PY_WARNING.match(line)
    if not m:
        return line
    text = m.group("text")
    g = _GARBLED_DEPRECATION.match(text)  # TensorRT-RTX's deprecation text, with its template words misplaced
    if g:
        text = f"{g.group('what').rstrip('.')} (deprecated since {g.group('since')})"
    where = f", {m.group('where')}" if m.group("where") else ""
    return f"{text} [Python {m.group('cls')}{where}]"


def _simple(
    kind: str, category: str, severity: str, rx: str, layer_group: str | None = None, needs: tuple[str, ...] = ()
) -> Rule:
    """A rule of one pattern; `needs`: words (lower case) of which every match holds one, checked first: a pattern
    that scans lazily from every position costs far more than looking for a word."""
    pattern = re.compile(rx, re.I)

    def rule(records: list[LogRecord]) -> Iterator[Hit]:
        for r in records:
            if needs and not any(w in r.text.lower() for w in needs):
                continue
            m = pattern.search(r.text)
            if m:
                name = (
                    (m.group(layer_group) or next((v for v in m.groupdict().values() if v), None))
                    if layer_group
                    else None
                )
                layers = (name.strip(),) if name else ()
                yield Hit(kind, category, severity, _msg(r), r.first, layers)

    rule.__name__ = f"rule_{kind}"
    return rule


# --- F1 fallbacks -------------------------------------------------------------------------

# 6-8.4 `DLA is enabled but layer X is not supported on DLA, falling back`; 8.5+ `Layer 'X' (T): Unsupported on DLA.`
rule_dla_fallback = _simple(
    "dla_fallback",
    "fallback",
    "medium",
    r"(?:DLA is enabled but layer (?P<layer>.+?) is not (?:supported|running) on DLA,? falling back to GPU"
    r"|Layer '(?P<q>.+?)' \([A-Z_0-9]+\):? (?:Unsupported on DLA|is not supported on DLA)"
    r"|Validation failed for DLA layer:? (?P<v>.+?)\.? Switching to GPU fallback"
    r"|DLA only supports \w+(?: and \w+)* precision type\. Switching (?P<p>.+?) device type to GPU"
    # any stated reason, then the switch: `DLA supports only 8 subgraphs per DLA core. Switching to GPU for layer X`
    r"|\S[^\n]*?\.\s*Switching to GPU(?: fallback)? for (?:layer:? )?'?(?P<sw>[^\s',]+))",
    "layer",
    needs=("dla", "switching to gpu"),
)
rule_dla_unsupported = _simple(
    "dla_unsupported",
    "fallback",
    "info",
    r"^(?P<layer>.+?): (?:.*\bnot supported for DLA\b|.*\bon DLA requires\b|DLA (?:only supports|does not support))"
    r"|DLA Layer (?P<l2>.+?) does not support"
    r"|This version of DLA does not support",
    "layer",
    needs=("dla",),
)
rule_dla_unused = _simple("dla_unused", "fallback", "medium", r"no layer in the network can run on DLA")
rule_plugin_import = _simple(
    "unsupported_op_plugin", "fallback", "medium", r"No importer registered for op: (?P<layer>[^\s.]+)", "layer"
)
rule_plugin_created = _simple(
    "plugin_created", "fallback", "info", r"Successfully created plugin: (?P<layer>\S+)", "layer"
)
rule_precision_constraints = _simple(
    "precision_constraints_not_obeyed",
    "fallback",
    "medium",
    r"(?:No implementation (?:of layer (?P<layer>.+?) )?obeys the requested constraints|"
    r"no implementation obeys reformatting-free rules)",
    "layer",
)

# --- F2 INT8 calibration ------------------------------------------------------------------

rule_calibrator_unused = _simple("calibrator_not_used", "calibration", "high", r"Calibrator is not being used")
rule_missing_scale = _simple(
    "missing_scale",
    "calibration",
    "medium",
    r"Missing (?:scale and zero-point|dynamic range) for tensor (?P<layer>.+?),\s*expect fall ?back",
    "layer",
)
rule_calibration_failure = _simple(
    "calibration_failure",
    "calibration",
    "high",
    r"Calibration failure occurred|Calibration failed\b|calibration failed",
)
rule_cache_read = _simple(
    "calibration_cache_read", "calibration", "info", r"Reading Calibration Cache for calibrator: (?P<layer>\S+)"
)
rule_cache_written = _simple(
    "calibration_cache_written", "calibration", "info", r"Writing Calibration Cache for calibrator: (?P<layer>\S+)"
)
rule_random_calibration = _simple(
    "random_calibration_data",
    "calibration",
    "high",
    # Polygraphy (0.3x-0.5x): `Int8 Calibration is using randomly generated input data.` + two indented lines
    r"(?:random|synthetic) (?:data|inputs?) (?:for|during) calibration"
    r"|calibrat\w+\s+(?:is\s+)?(?:with|using)\s+random",
)

_CALIB = re.compile(
    r"Starting Calibration(?: with batch size (?P<bs>\d+))?|Calibrated batch (?P<b>\d+) in (?P<bt>[\d.eE+-]+)"
    r"|Post Processing Calibration data in (?P<pp>[\d.eE+-]+)|Calibration completed in (?P<done>[\d.eE+-]+)"
    r"|Calibration Profile is not defined\. Calibrating with Profile (?P<prof>\d+)"
)
_CALIB_DETAIL = (("bs", "batch_size", int), ("b", "batch", int), ("pp", "post_processing_s", float),
                 ("done", "completed_s", float), ("prof", "profile", int))  # fmt: skip


def rule_calibration_progress(records: list[LogRecord]) -> Iterator[Hit]:
    for r in records:
        m = _CALIB.search(r.text)
        if m:
            d = {key: cast(m.group(g)) for g, key, cast in _CALIB_DETAIL if m.group(g)}
            yield Hit("calibration_progress", "calibration", "info", _msg(r), r.first, (), d)


# --- F3 tactics ---------------------------------------------------------------------------

# tactic_skipped_workspace (with the sizes asked and available): tools/trtllm.py, rule_memory_shortfall
rule_timing_cache = _simple(
    "timing_cache", "tactics", "info", r"^(?!.*(?:RUNNING TensorRT|# trtexec)).*(?:timing cache|TimingCache)"
)

_RUNNER = re.compile(r"^-{5,}\s*Timing(?: Runner:)? (?P<layer>.+?)(?: \((?P<runner>[^()]*)\))?\s*$")
_TACTIC_TIME = re.compile(
    r"^(?:Tactic Name: (?P<name>\S+) )?Tactic:? (?P<t>-?(?:0x)?[0-9a-fA-F]+):? [Tt]ime:? (?P<time>[\d.eE+-]+|inf)"
)
_FASTEST = re.compile(
    r"(?:^|profiling completed in [\d.]+ seconds\. )"
    r"Fastest Tactic: (?P<t>-?(?:0x)?[0-9a-fA-F]+) Time: (?P<time>[\d.eE+-]+|inf)"
)
_PROFILED = re.compile(r"^(?P<layer>.+?) \((?P<runner>[^()]*)\) profiling completed in")


def _time(s: str) -> float:
    try:
        return float(s)
    except ValueError:
        return float("inf")


def _block(m: re.Match[str], line: int) -> dict[str, Any]:
    """A layer's tactic timing block, opened at `line` by a match with groups layer and runner."""
    return {"layer": m.group("layer"), "runner": m.group("runner"), "line": line, "timed": [], "fastest": None}


def rule_tactic_choice(records: list[LogRecord]) -> Iterator[Hit]:
    """The chosen tactic of each timed layer: the `Fastest Tactic` line of its timing block,
    or, where a block has none (TensorRT 5 logs, cut logs), the fastest timed tactic."""
    block: dict[str, Any] | None = None

    def finish(b: dict[str, Any]) -> Iterator[Hit]:
        if b["fastest"] is None and not b["timed"]:
            return
        if b["fastest"] is not None:
            tactic, t, computed = b["fastest"][0], b["fastest"][1], False
        else:
            tactic, t = min(b["timed"], key=lambda x: x[1])
            computed = True
        d = {"tactic": tactic, "time_ms": t, "runner": b["runner"], "computed": computed, "timed": len(b["timed"])}
        yield Hit(
            "tactic_choice",
            "tactics",
            "info",
            f"{b['layer']}: tactic {tactic} ({t} ms)",
            b["line"],
            (b["layer"],),
            d,
            key="tactic_choice:" + b["layer"],
        )

    for r in records:
        text = _msg(r)
        m = _RUNNER.match(text)
        if m:
            if block:
                yield from finish(block)
            block = _block(m, r.first)
            continue
        m = _TACTIC_TIME.match(text)
        if m and block is not None:
            block["timed"].append((m.group("t"), _time(m.group("time"))))
            continue
        m = _FASTEST.search(text)
        if m:
            p = _PROFILED.match(text)
            if p and (block is None or block["layer"] != p.group("layer") or block["fastest"] is not None):
                if block:
                    yield from finish(block)
                block = _block(p, r.first)
            if block is not None:
                block["fastest"] = (m.group("t"), _time(m.group("time")))
                yield from finish(block)
                block = None
    if block:
        yield from finish(block)


# --- F4 other accuracy risks --------------------------------------------------------------

rule_int64_cast = _simple(
    "int64_cast",
    "accuracy",
    "medium",
    r"INT64 weights, while TensorRT does not natively support INT64|cast down to INT32|"
    r"Casting INT64 to INT32|INT64 is not natively supported",
)
rule_int32_clamp = _simple(
    "int32_clamp", "accuracy", "high", r"weights outside the range of INT32 (?:was|were) clamped|clamped to INT32"
)
_LAYERNORM = re.compile(
    r"Detected layernorm nodes in FP16|layernorm (?:after self-attention )?(?:in|with) FP16\b.{0,40}?may cause "
    r"overflow|LayerNorm.* in FP16 .*overflow",
    re.I,
)
_NODE_LIST = re.compile(r"^[^\s,:]+(?:\s*,\s*[^\s,:]+)+,?$")


def rule_layernorm(records: list[LogRecord]) -> Iterator[Hit]:
    """FP16 layernorm warnings; layers: the nodes after `... in FP16:` or on the next (verbose) record (8.6-10)."""
    for i, r in enumerate(records):
        m = _LAYERNORM.search(r.text)
        if m:
            nxt = [x.text.replace("\n", " ").strip() for x in records[i + 1 : i + 3] if x.dialect != "blank"]
            cands = [r.text[m.end() :].lstrip(".: ").strip()] + (nxt[:1] if m.group(0)[:3].lower() == "det" else [])
            nodes = next((c for c in cands if _NODE_LIST.match(c)), "")
            layers = tuple(dict.fromkeys(x.strip() for x in nodes.split(",") if x.strip()))
            yield Hit("layernorm_fp16", "accuracy", "medium", _msg(r), r.first, layers)


rule_weights_conversion = _simple(
    "weight_conversion_issues", "accuracy", "info", r"encountered issues when converting weights between types"
)
rule_no_implementation = _simple(
    "no_implementation",
    "build",
    "high",
    r"Could not find any implementation for node (?P<layer>.+?)"
    r"(?:\.?\)\s*$|\.? In \w+ at |, try increasing|\.\s*$|\s*$)",
    "layer",
)
rule_build_failure = _simple(
    "build_failure",
    "build",
    "high",
    r"Builder failed while configuring|(?:engine|enginePtr) != nullptr|Engine could not be created|Unable to create "
    r"engine|Failed to create (?:TensorRT |TRT )?engine|Network validation failed|engine (?:is )?null|Engine build "
    r"failed|Building engine failed|Engine (?:set up|creation) failed|Invalid Engine\. Please ensure",
)
rule_library_error = _simple("library_error", "build", "high", r"(?:cuBLAS|cuDNN|cuBLASLt|CUDA) Error in \w+")
rule_library_mismatch = _simple(
    "library_version_mismatch", "build", "medium", r"was linked against \S+(?: \S+)? [\d.]+ but loaded"
)

_WEIGHT_HEAD = re.compile(r"^Weights \[name=(?P<name>.+?)\] had the following issues when converted to FP16")
_WEIGHT_ISSUES = [
    (
        "fp16_weights_overflow",
        "high",
        re.compile(r"(?:Values? out of range|greater than (?:the )?(?:largest|max)|exceed)", re.I),
    ),
    (
        "fp16_weights_underflow",
        "medium",
        re.compile(r"less than (?:the )?smallest positive FP16 subnormal|converted to zero|underflow", re.I),
    ),
    ("fp16_weights_subnormal", "medium", re.compile(r"subnormal FP16 values", re.I)),
]
_WEIGHT_SUMMARY = re.compile(r"^-\s*(?P<n>\d+) weights are affected by this issue: (?P<what>.+)")


def rule_fp16_weights(records: list[LogRecord]) -> Iterator[Hit]:
    """Per-weight (`Weights [name=W] had ...` + ` - issue` lines) and summary
    (` - N weights are affected by this issue: ...`) forms of the FP16 conversion warnings."""
    current: str | None = None
    for r in records:
        text = _msg(r).strip()
        head = _WEIGHT_HEAD.match(text)
        if head:
            current = head.group("name")
            for sub in r.text.split("\n")[1:]:  # issue lines joined as continuations
                yield from _weight_issue(sub.strip(), r.first, current)
            continue
        summary = _WEIGHT_SUMMARY.match(text)
        if summary:
            for kind, sev, rx in _WEIGHT_ISSUES:
                if rx.search(summary.group("what")):
                    yield Hit(
                        kind,
                        "accuracy",
                        sev,
                        text,
                        r.first,
                        (),
                        {"weights": int(summary.group("n"))},
                        key=kind + ":summary",
                    )
                    break
            continue
        if current is not None and text.startswith("-"):
            yield from _weight_issue(text, r.first, current)
            continue
        if r.dialect not in ("blank",) and not text.startswith("If this is not the desired"):
            current = None


def _weight_issue(text: str, line: int, name: str) -> Iterator[Hit]:
    if not text.startswith("-"):
        return
    for kind, sev, rx in _WEIGHT_ISSUES:
        if rx.search(text):
            yield Hit(kind, "accuracy", sev, text.lstrip("- ").strip(), line, (name,))
            return


# --- layer information: precision fallback ------------------------------------------------

_PASSIVE_TYPES = {"reformat", "noop", "shuffle", "constant", "identity", "slice", "concatenation", "gather"}
_RANK = {"INT4": 0, "FP8": 1, "INT8": 1, "FP16": 2, "BF16": 2, "FP32": 3}


_MYELIN_MOVES = {"Move", "Resh", "Tran", "Slic", "Conc", "Copy", "Pad"}
_MYELIN_KERNEL = re.compile(r"^__myl_(?P<ops>[A-Za-z]+?)_myl\d+_\d+$")


def _data_movement(row: EngineLayer) -> bool:
    """A Myelin-generated kernel whose fused ops only move data (`__myl_Move_myl0_4`, `__myl_MoveResh_...`)."""
    m = _MYELIN_KERNEL.match(row.name)
    return bool(m) and all(op in _MYELIN_MOVES for op in re.findall(r"[A-Z][a-z]*", m.group("ops")))


def precision_fallback(layers: Sequence[EngineLayer], requested: str | None) -> list[Hit]:
    """Compute layers that run above the lowest precision requested (INT8 requested, FP16
    used, ...). With no stated request, a layer running INT8 shows INT8 was enabled. Not counted: layers that
    only move data, and a copy of a layer that also runs at the requested precision (Myelin computes a node
    twice when its output is marked: once in INT8 for the next layer, once in FP32 for the output)."""
    precs = {row.precision for row in layers}
    target = requested or ("INT8" if "INT8" in precs else "FP8" if "FP8" in precs else None)
    if target not in _RANK:
        return []
    at_target = {frozenset(row.onnx_nodes) for row in layers if row.onnx_nodes and row.precision == target}
    hits = []
    for row in layers:
        p, typ = row.precision, row.type.lower()
        if _data_movement(row) or (row.onnx_nodes and frozenset(row.onnx_nodes) in at_target):
            continue
        if p in _RANK and _RANK[p] > _RANK[target] and typ not in _PASSIVE_TYPES and "reformat" not in row.name.lower():
            hits.append(
                Hit(
                    "layer_precision_fallback",
                    "fallback",
                    "medium",
                    f"{row.name} ({row.type}) runs in {p}, {target} requested",
                    row.line,
                    (row.name,),
                    {"precision": p, "requested": target},
                )
            )
    return hits


RULES: tuple[Rule, ...] = (
    rule_dla_fallback,
    rule_dla_unsupported,
    rule_dla_unused,
    rule_plugin_import,
    rule_plugin_created,
    rule_precision_constraints,
    rule_calibrator_unused,
    rule_missing_scale,
    rule_calibration_failure,
    rule_cache_read,
    rule_cache_written,
    rule_random_calibration,
    rule_calibration_progress,
    rule_timing_cache,
    rule_tactic_choice,
    rule_int64_cast,
    rule_int32_clamp,
    rule_layernorm,
    rule_weights_conversion,
    rule_no_implementation,
    rule_build_failure,
    rule_library_error,
    rule_library_mismatch,
    rule_fp16_weights,
)
