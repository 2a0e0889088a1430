"""What trtexec measured, as build-log findings with the numbers in `detail`: the performance summary
(throughput; latency, enqueue, H2D, GPU compute, D2H statistics), `--dumpProfile` per-layer tables, and
`--dumpLayerInfo` listings of names only (detailed listings become the parse's layer table). The readers are
trtverify.toolout's, shared with the engine audit (one reader per format); they read the raw text, so line
numbers are physical lines. Kinds: config.findings.PERFORMANCE_KINDS."""

from __future__ import annotations

import re

from trtverify.buildlog.findings import Hit
from trtverify.toolout.perfsummary import perf_summaries, unwrap
from trtverify.toolout.tables import parse_layer_listings, parse_profile_tables
from trtverify.util.words import count

SUMMARY_LINE = re.compile(
    r"(?:Throughput: [-+0-9.eE]+ qps|\b(?:Latency|GPU Compute Time|Host Latency|Enqueue Time)\b.*\b(?:min|mean)\b|"
    r"\b(?:Host Latency|GPU Compute(?: Time)?|Enqueue Time):?\s*$|Average over \d+ runs)",
    re.I,
)
TOP = 5
MAX_ROWS = 500


SUMMARY_HEADER = re.compile(r"=== Performance summary ===", re.I)
PROFILE_BANNER = re.compile(r"=== Profile \(")


def _first(lines: list[str], rx: re.Pattern[str]) -> int:
    return next((i + 1 for i, line in enumerate(lines) if rx.search(line)), 1)


def _summary_line(lines: list[str]) -> int:
    """The `=== Performance summary ===` banner where trtexec printed one before the figures, else the first figure."""
    first = _first(lines, SUMMARY_LINE)
    banner = max((i + 1 for i, line in enumerate(lines[:first]) if SUMMARY_HEADER.search(line)), default=0)
    return banner or first


def _table_line(lines: list[str], header: int) -> int:
    """A profile table starts at its `=== Profile (N iterations ) ===` banner when one is just above the header."""
    above = header - 1
    return above if above >= 1 and PROFILE_BANNER.search(lines[above - 1]) else header


def hits(text: str) -> list[Hit]:
    lines = text.split("\n")
    out: list[Hit] = []
    summaries = perf_summaries(text)
    # the continuation lines of wrapped figures are read with the summary (its other rows: noise class `figures`)
    joined = tuple(i + 1 for i, (a, b) in enumerate(zip(lines, unwrap(lines), strict=True)) if a.strip() and not b)
    for start, perf in summaries:
        lat = perf.stats.get("latency") or perf.stats.get("gpu_compute") or {}
        parts = [f"throughput {perf.throughput_qps:g} qps" if perf.throughput_qps is not None else ""]
        parts += [f"latency mean {lat['mean']:g} ms" if "mean" in lat else ""]
        parts += [f"median {lat['median']:g} ms" if "median" in lat else ""]
        parts += [f"p99 {lat['p99']:g} ms" if "p99" in lat else ""]
        gpu = perf.stats.get("gpu_compute") or {}
        if "mean" in gpu and lat is not gpu:  # GPU compute mean, always, where the summary has it
            parts += [f"GPU compute mean {gpu['mean']:g} ms"]
        missing = [n for n, k in (("throughput", perf.throughput_qps), ("GPU compute", gpu)) if k in (None, {})]
        if missing and len(perf.stats) + (perf.throughput_qps is not None) >= 1 and perf.format == "oneline":
            parts += [f"(no {' or '.join(missing)} line: the summary is cut short)"]
        message = "performance summary: " + (", ".join(p for p in parts if p) or "no figures")
        if len(summaries) > 1:  # a log comparing runs: each summary a finding of its own, in order
            message = (
                f"performance summary {summaries.index((start, perf)) + 1} of {len(summaries)}: "
                + (message.split(": ", 1)[1])
            )
            out.append(Hit("performance_summary", "performance", "info", message, start, (), perf.dump(),
                           key=f"performance_summary:{start}", read=joined))  # fmt: skip
        else:
            out.append(Hit("performance_summary", "performance", "info", message, _summary_line(lines), (),
                           perf.dump(), read=joined))  # fmt: skip
    for table in parse_profile_tables(text):
        if not table.rows:
            continue
        top = sorted(table.rows, key=lambda r: -(r.avg_ms or 0.0))[:TOP]
        total = table.total.avg_ms if table.total is not None else None
        detail = {
            "format": table.format,
            "iterations": table.iterations,
            "layers": len(table.rows),
            "total_avg_ms": total,
            "rows": [[r.name, r.avg_ms, r.percent] for r in table.rows[:MAX_ROWS]],
        }
        slowest = ", ".join(f"{r.name[:60]} {r.avg_ms:g} ms" for r in top[:3])
        head = f"per-layer profile ({table.format}): {count(len(table.rows), 'layer')}"
        message = f"{head}, total {total:g} ms; slowest: {slowest}" if total is not None else f"{head}; {slowest}"
        start = _table_line(lines, table.line)
        end = table.line + len(table.rows) + (1 if table.total is not None else 0)  # the rows follow the header
        out.append(Hit("profile_table", "performance", "info", message, start, tuple(r.name for r in top),
                       detail, key=f"profile_table:{start}", span=(start, end)))  # fmt: skip
    for listing in parse_layer_listings(text):
        if not listing.layers or listing.format != "names":
            continue  # detailed and build-log listings are the parse's engine layer table (BuildLog.layers)
        first = min((layer.line for layer in listing.layers if layer.line), default=1)
        detail = {"format": listing.format, "layers": len(listing.layers), "bindings": listing.bindings[:50]}
        message = f"engine layer listing ({listing.format}): {count(len(listing.layers), 'layer')}"
        out.append(Hit("layer_listing", "performance", "info", message, first, (), detail, key=f"layers:{first}"))
    return out
