"""trtexec's performance summary, read from its console log: throughput, and min / max / mean / median /
percentiles of latency, enqueue time, H2D, GPU compute and D2H, in the formats trtexec has printed.

Families, not lines (prefixes such as `[11/23/2023-10:00:00] [I] ` and `&&&&` are dropped first):
- TensorRT 8+: one line per quantity, `Latency: min = 0.8 ms, max = 1.2 ms, mean = 0.9 ms, median = ...,
  percentile(90%) = ..., percentile(99%) = ...` (values may carry units ms or s), and `Throughput: 1234.5 qps`;
- TensorRT 7: a header line (`Host Latency`, `GPU Compute`, `Enqueue Time`, ...) followed by `min: 1.0 ms (end
  to end 1.9 ms)`, `max: ...`, `mean: ...`, `median: ...`, `percentile: 1.2 ms at 99% ...`, `throughput: 812 qps`;
- TensorRT 5/6: `Average over 10 runs is 1.23 ms (host walltime is 1.5 ms, 99% percentile time is 1.4).`
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field

from trtverify.util.record import Record

PREFIX = re.compile(r"^(?:\[[^\]]*\]\s*)*(?:&&&&\s*\w+\s*)?")
NAMES = {
    "latency": "latency",
    "host latency": "latency",
    "enqueue time": "enqueue",
    "h2d latency": "h2d",
    "gpu compute time": "gpu_compute",
    "gpu compute": "gpu_compute",
    "d2h latency": "d2h",
    "end-to-end host latency": "end_to_end",
}
# a number as trtexec prints one; `[-+0-9.eE]+` also took a lone '+' or 'e' of a cut or spliced line, and float() failed
NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
ONE_LINE = re.compile(r"^(?P<what>[A-Za-z0-9 -]+?)\s*:\s*(?P<stats>min\s*=?\s*[-+0-9.].*)$", re.IGNORECASE)
# `=` may be lost in a paste (`max 6.19 ms, mean 5.93 ms`)
PAIR = re.compile(rf"(min|max|mean|median|percentile\((\d+(?:\.\d+)?)%\))\s*=?\s*({NUM})\s*(ms|s|us)?", re.I)
THROUGHPUT = re.compile(rf"^throughput\s*:\s*({NUM})\s*qps", re.IGNORECASE)
TRT7_STAT = re.compile(rf"^(min|max|mean|median)\s*:\s*({NUM})\s*(ms|s|us)\b", re.IGNORECASE)
TRT7_E2E = re.compile(rf"\(end to end ({NUM})\s*(ms|s|us)\b", re.IGNORECASE)  # TensorRT 7 host latency lines
TRT7_PCT = re.compile(rf"^percentile\s*:\s*({NUM})\s*(ms|s|us)\s*at\s*(\d+(?:\.\d+)?)%", re.IGNORECASE)
TRT6 = re.compile(rf"Average over (\d+) runs is ({NUM}) ms(?:.*?(\d+)% percentile time is ({NUM}))?", re.I)
WALLTIME = re.compile(rf"^(?:total host walltime|walltime)\s*:\s*({NUM})\s*(s|ms)", re.IGNORECASE)
SCALE = {"ms": 1.0, "s": 1000.0, "us": 0.001, None: 1.0}


class PerfSummary(Record):
    """trtexec's performance summary (milliseconds)."""

    throughput_qps: float | None = None
    stats: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="latency | enqueue | h2d | gpu_compute | d2h -> {min, max, mean, median, p90, p95, p99, ...}",
    )
    walltime_s: float | None = None
    format: str | None = Field(
        default=None, description="oneline (TensorRT 8+), trt7, trt6, or export_times (summarised --exportTimes)"
    )
    inferences: int | None = Field(default=None, description="inferences summarised (export_times only)")


def _key(stat: str, pct: str | None) -> str:
    return f"p{pct.rstrip('0').rstrip('.') if '.' in pct else pct}" if pct else stat.lower()


HEADER = re.compile(r"=== Performance summary ===", re.IGNORECASE)


def _block_key(line: str) -> str | None:
    """Which part of a summary a (prefix-stripped) line is, or None."""
    if HEADER.search(line):
        return "header"
    m = ONE_LINE.match(line)
    if m and m.group("what").strip().lower() in NAMES:
        return NAMES[m.group("what").strip().lower()]
    low = line.lower().rstrip(":")
    if low in NAMES:
        return NAMES[low]
    if THROUGHPUT.match(line):
        return "throughput"
    if TRT6.search(line):
        return "trt6"
    return None


_CONTINUES = re.compile(rf"^(?:{NUM}\s*(?:ms|s|us)\b|(?:ms|s|us)\b|,|(?:max|mean|median|percentile)\b)", re.I)


def unwrap(lines: list[str]) -> list[str]:
    """A one-line summary figure a terminal or a paste wrapped (`... percentile(90%) = 1.4` / `ms, percentile(95%) =
    ...`) joined again; the continuation's line left empty, so that line numbers stay."""
    out = list(lines)
    for i in range(len(out) - 1):
        line = PREFIX.sub("", out[i].strip()).strip()
        m = ONE_LINE.match(line)
        if not m or m.group("what").strip().lower() not in NAMES:
            continue
        nxt = out[i + 1].strip()
        if nxt and not nxt.startswith("[") and _CONTINUES.match(nxt) and _block_key(nxt) is None:
            sep = "" if out[i].rstrip().endswith("=") or re.match(r"^[a-z]{1,2}\b", nxt) else " "
            out[i] = out[i].rstrip() + sep + nxt
            out[i + 1] = ""
    return out


def perf_summaries(text: str) -> list[tuple[int, PerfSummary]]:
    """Every performance summary in `text`, in order, with the 1-based line it starts on (its `=== Performance
    summary ===` banner, else its first figure): a log comparing two runs or two TensorRT versions holds several.
    A summary ends where a quantity it already has appears again, or at the next banner. Blank lines between its
    lines are skipped and wrapped figures joined."""
    lines = unwrap(text.splitlines())
    starts: list[int] = []
    seen: set[str] = set()
    for i, raw in enumerate(lines):
        key = _block_key(PREFIX.sub("", raw.strip()).strip())
        if key is None:
            continue
        if not starts or key in seen or (key == "header" and seen - {"header"}):
            starts.append(i)
            seen = set()
        seen.add(key)
    out = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        summary = parse_perf_summary("\n".join(lines[start:end]), merged=True)
        if summary is not None:
            out.append((start + 1, summary))
    return out


def parse_perf_summary(text: str, merged: bool = False) -> PerfSummary | None:
    """The last performance summary in `text` (`merged`: every figure in `text`, a later one replacing an earlier
    one), or None when there is none."""
    if not merged:
        found = perf_summaries(text)
        return found[-1][1] if found else None
    out: dict[str, Any] = {"stats": {}}
    section: str | None = None
    fmt = None
    for raw in text.splitlines():
        line = PREFIX.sub("", raw.strip()).strip()
        if not line:
            continue
        low = line.lower().rstrip(":")
        if low in NAMES and not ONE_LINE.match(line):
            section, fmt = NAMES[low], "trt7"
            out["stats"][section] = {}
            continue
        m = ONE_LINE.match(line)
        if m and m.group("what").strip().lower() in NAMES:
            name = NAMES[m.group("what").strip().lower()]
            values = {}
            for stat, pct, value, unit in PAIR.findall(m.group("stats")):
                values[_key(stat, pct)] = float(value) * SCALE[unit.lower() or None]
            out["stats"][name] = values
            fmt, section = "oneline", None
            continue
        m = THROUGHPUT.match(line)
        if m:
            out["throughput_qps"] = float(m.group(1))
            continue
        m = WALLTIME.match(line)
        if m:
            out["walltime_s"] = float(m.group(1)) / (1000.0 if m.group(2).lower() == "ms" else 1.0)
            continue
        if section is not None:
            m = TRT7_STAT.match(line) or TRT7_PCT.match(line)
            if m:
                stat = m.group(1).lower() if m.re is TRT7_STAT else _key("percentile", m.group(3))
                value, unit = (m.group(2), m.group(3)) if m.re is TRT7_STAT else (m.group(1), m.group(2))
                out["stats"][section][stat] = float(value) * SCALE[unit.lower()]
                e2e = TRT7_E2E.search(line)
                if e2e:  # `min: 1.0 ms (end to end 1.9 ms)`: the end-to-end host latency beside it
                    out["stats"].setdefault("end_to_end", {})[stat] = float(e2e.group(1)) * SCALE[e2e.group(2).lower()]
                continue
        m = TRT6.search(line)
        if m:
            latency = {"mean": float(m.group(2))}
            if m.group(3):
                latency[f"p{m.group(3)}"] = float(m.group(4))
            out["stats"]["latency"] = latency
            fmt = "trt6"
    if not out["stats"] and "throughput_qps" not in out:
        return None
    return PerfSummary(format=fmt, **out)
