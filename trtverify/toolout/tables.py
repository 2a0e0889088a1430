"""Readers of what trtexec prints and exports besides the engine JSON: the `--dumpProfile` per-layer table, the
`--dumpLayerInfo` listing (and the `Engine Layer Information:` listing of verbose build logs), and the
`--exportTimes` JSON. Each goes from text (or parsed JSON) to typed records; log-line prefixes such as
`[11/23/2023-10:00:00] [I] ` and `&&&& ` are dropped first.

`--dumpProfile` tables come in two layouts:
- right-aligned (TensorRT 8.5 and older): header `Layer   Time (ms)   Avg. Time (ms)   Time %` (8.5 adds
  `Median Time (ms)` before `Time %`), the layer name first and right-aligned, the numbers after it;
- columns (TensorRT 8.6 and later): header `Time(ms)     Avg.(ms)   Median(ms)   Time(%)   Layer`, the numbers
  first and the name last.
Both end with a `Total` row. Layer names hold spaces, `+`, `||`, brackets and `{ForeignNode[...]}`, so a row
is split on whitespace from the side of the numbers only (a fixed count of them, set by the header).
"""

from __future__ import annotations

import math
import re
import statistics
from typing import Any

from pydantic import Field

from trtverify.toolout.layerinfo import EngineLayer as DumpLayer
from trtverify.toolout.layerinfo import parse_layer_line
from trtverify.util.errors import UsageError
from trtverify.util.record import Record

LOG_PREFIX = re.compile(
    r"^(?:&&&&\s*\w+\s*)?(?:\[(?:\d{1,2}/\d{1,2}/\d{2,4}-\d{1,2}:\d{2}:\d{2}(?:\.\d+)?|[IWEVF]|TRT|INFO|WARNING|"
    r"WARN|ERROR|VERBOSE)\] ?)+"
)
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")
OLD_HEADER = re.compile(r"^\s*Layer\s+Time \(ms\)\s+Avg\. Time \(ms\)\s+(Median Time \(ms\)\s+)?Time %\s*$")
NEW_HEADER = re.compile(r"^\s*Time\(ms\)\s+Avg\.\(ms\)\s+(Median\(ms\)\s+)?Time\(%\)\s+Layer\s*$")
ITERATIONS = re.compile(r"=== Profile \((\d+) iterations? *\) ===")
LISTING = {"layers:": "names", "engine layer information:": "build_log"}
MAX_LINE = 1 << 16  # characters; a longer line is no table row
TIME_KEYS = {  # summary name -> (duration key, start key(s), end key(s)); older trtexec lacks the durations
    "latency": ("latencyMs", (), ()),
    "enqueue": ("enqueueMs", ("startEnqMs", "startEnqueueMs"), ("endEnqMs", "endEnqueueMs")),
    "h2d": ("h2dMs", ("startH2dMs",), ("endH2dMs",)),
    "gpu_compute": ("computeMs", ("startComputeMs",), ("endComputeMs",)),
    "d2h": ("d2hMs", ("startD2hMs",), ("endD2hMs",)),
}
TIME_MARKERS = {"latencyMs", "computeMs", "startComputeMs", "endComputeMs", "h2dMs", "d2hMs", "startEnqMs"}


def strip_prefix(line: str) -> str:
    """A console line without its `[date] [I] [TRT] ` / `&&&& ` prefix (the rest keeps its spacing)."""
    return LOG_PREFIX.sub("", line.rstrip("\r\n"), count=1)


class ProfileRow(Record):
    name: str
    total_ms: float = Field(description="summed over the profiled iterations")
    avg_ms: float
    median_ms: float | None = Field(default=None, description="TensorRT 8.5 and later")
    percent: float = Field(description="of the table's total time")


class ProfileTable(Record):
    """One `--dumpProfile` table."""

    format: str = Field(description="right_aligned (TensorRT <= 8.5) or columns (TensorRT 8.6+)")
    iterations: int | None = Field(default=None, description="from `=== Profile (N iterations ) ===`")
    rows: list[ProfileRow] = Field(description="per layer, in the printed order; the Total row is not one")
    total: ProfileRow | None = Field(default=None, description="the Total row (absent in a cut-off excerpt)")
    line: int = Field(description="1-based line of the header")


class LayerListing(Record):
    """The engine's layers as a console log lists them."""

    format: str = Field(description="names (layer names only), detailed (`Name: ..., LayerType: ...` lines), or "
                        "build_log (`Layer(Type): ...` lines after `Engine Layer Information:`)")  # fmt: skip
    layers: list[DumpLayer]
    bindings: list[str] = Field(default_factory=list)


class TimesSummary(Record):
    """`--exportTimes`: one record per inference, summarised (milliseconds)."""

    inferences: int
    stats: dict[str, dict[str, float]] = Field(
        description="latency | enqueue | h2d | gpu_compute | d2h -> {min, max, mean, median, p90, p95, p99}"
    )


def _numbers(parts: list[str]) -> list[float] | None:
    if not all(NUMBER.fullmatch(p) for p in parts):
        return None
    values = [float(p) for p in parts]
    return values if all(math.isfinite(v) for v in values) else None


def _row(text: str, columns_first: bool, median: bool) -> ProfileRow | None:
    count = 4 if median else 3
    if len(text) > MAX_LINE:
        return None
    if columns_first:
        parts = text.split(None, count)
        if len(parts) != count + 1:
            return None
        values, name = _numbers(parts[:count]), parts[count].strip()
    else:
        parts = text.rsplit(None, count)
        if len(parts) != count + 1:
            return None
        values, name = _numbers(parts[1:]), parts[0].strip()
    if values is None or not name:
        return None
    total, avg, *rest = values
    return ProfileRow(name=name, total_ms=total, avg_ms=avg, median_ms=rest[0] if median else None, percent=rest[-1])


ELISION = re.compile(r"^\s*(?:\.{3,}|…)\s*$")


def parse_profile_tables(text: str) -> list[ProfileTable]:
    """Every `--dumpProfile` table in a console log, in order (an empty list when there is none)."""
    tables: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    layout = (False, False)  # (numbers first, median column)
    iterations = None
    for number, raw in enumerate(text.split("\n"), 1):
        line = strip_prefix(raw)
        m = ITERATIONS.search(line) if "=== Profile" in line else None
        if m:
            iterations, current = int(m.group(1)), None
            continue
        head = OLD_HEADER.match(line) or NEW_HEADER.match(line)
        if head:
            layout = (head.re is NEW_HEADER, head.group(1) is not None)
            fmt = "columns" if layout[0] else "right_aligned"
            current = {"format": fmt, "iterations": iterations, "rows": [], "line": number}
            tables.append(current)
            iterations = None
            continue
        if current is None:
            continue
        if ELISION.match(line):  # a paste's `......`: rows left out, the table goes on
            current["elided"] = True
            continue
        row = _row(line, *layout) if line.strip() else None
        if row is None:
            current = None
        elif row.name == "Total":
            current["total"], current = row, None
        else:
            current["rows"].append(row)
    return [ProfileTable(**{k: v for k, v in t.items() if k != "elided"}) for t in tables]


def parse_profile_table(text: str) -> ProfileTable | None:
    """The last `--dumpProfile` table in a console log that has rows, or None."""
    return next((t for t in reversed(parse_profile_tables(text)) if t.rows), None)


def _name_layer(name: str, line: int) -> DumpLayer:
    return DumpLayer(name=name, type="unknown", precision=None, tactic=None, tactic_name=None, onnx_nodes=[],
                     line=line)  # fmt: skip


def parse_layer_listings(text: str) -> list[LayerListing]:
    """Every layer listing in a console log: `--dumpLayerInfo` (`[I] Layers:` then one layer a line, names only
    or `Name: ..., LayerType: ...`, then `Bindings:`), and `Engine Layer Information:` of verbose builds."""
    out: list[dict[str, Any]] = []
    current: dict[str, Any] | None = None
    section = None  # "layers" | "bindings"
    for number, raw in enumerate(text.split("\n"), 1):
        stripped = strip_prefix(raw)
        prefixed = stripped != raw.rstrip("\r\n")
        line = stripped.strip()
        kind = LISTING.get(line.lower())
        if kind:
            current, section = {"format": kind, "layers": [], "bindings": []}, "layers"
            out.append(current)
            continue
        if current is None:
            continue
        if line == "Bindings:" and current["format"] != "build_log":
            section = "bindings"
            continue
        if not line or len(line) > MAX_LINE:
            if section == "bindings" and current["bindings"]:
                current = None
            continue
        layer = parse_layer_line(line, number)
        if section == "layers" and layer is not None:
            if current["format"] == "names" and not current["layers"]:
                current["format"] = "detailed" if line.startswith("Name: ") else "build_log"
            current["layers"].append(layer)
        elif prefixed:
            current = None  # the listing ended: the next line is the log again
        elif section == "bindings":
            current["bindings"].append(line)
        elif current["format"] == "names":
            current["layers"].append(_name_layer(line, number))
        else:
            current = None
    return [LayerListing(**listing) for listing in out if listing["layers"]]


def parse_layer_listing(text: str) -> LayerListing | None:
    """The last layer listing in a console log, or None."""
    found = parse_layer_listings(text)
    return found[-1] if found else None


def is_times(data: Any) -> bool:
    """Whether parsed JSON is an `--exportTimes` file (a list of per-inference timing records)."""
    return isinstance(data, list) and any(isinstance(d, dict) and TIME_MARKERS & set(d) for d in data[:8])


def _value(item: dict[str, Any], key: str, starts: tuple[str, ...], ends: tuple[str, ...]) -> float | None:
    v = item.get(key)
    if v is None:
        s = next((item[k] for k in starts if k in item), None)
        e = next((item[k] for k in ends if k in item), None)
        v = e - s if isinstance(s, (int, float)) and isinstance(e, (int, float)) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def _percentile(ordered: list[float], pct: float) -> float:
    """trtexec's nearest-rank percentile: the value with (100 - pct)% of the samples above it."""
    n = len(ordered)
    return ordered[max(n - 1 - int((1.0 - pct / 100.0) * n), 0)]


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    out = {"min": ordered[0], "max": ordered[-1], "mean": statistics.fmean(ordered),
           "median": statistics.median(ordered)}  # fmt: skip
    out.update({f"p{p}": _percentile(ordered, p) for p in (90, 95, 99)})
    return out


def summarize_times(data: Any, source: str = "the --exportTimes file") -> TimesSummary:
    """Min / max / mean / median / p90 / p95 / p99 of latency, enqueue, H2D, GPU compute and D2H over the
    inferences of an `--exportTimes` list (latency = H2D + compute + D2H where the file has no `latencyMs`)."""
    if not isinstance(data, list):
        raise UsageError(f"{source}: expected a JSON list of per-inference timings (trtexec --exportTimes)")
    series: dict[str, list[float]] = {name: [] for name in TIME_KEYS}
    inferences = 0
    for item in data:
        if not isinstance(item, dict) or not TIME_MARKERS & set(item):
            continue
        inferences += 1
        got = {name: _value(item, *keys) for name, keys in TIME_KEYS.items()}
        parts = [got["h2d"], got["gpu_compute"], got["d2h"]]
        if got["latency"] is None and all(p is not None for p in parts):
            got["latency"] = sum(p for p in parts if p is not None)
        for name, v in got.items():
            if v is not None:
                series[name].append(v)
    if not inferences:
        raise UsageError(f"{source}: no per-inference timings (latencyMs, computeMs, ...): export them with "
                         "trtexec --exportTimes=FILE")  # fmt: skip
    return TimesSummary(inferences=inferences, stats={k: _stats(v) for k, v in series.items() if v})
