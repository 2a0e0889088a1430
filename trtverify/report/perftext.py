"""Terminal text of the perf stage: a compact latency table, then one line per engine (and one for its diff)."""

from __future__ import annotations

from trtverify.config.findings import SEVERITY_RANK
from trtverify.engine.audit import EngineFinding
from trtverify.report.format import fmt
from trtverify.report.perfview import reformat_share
from trtverify.stages.perf import EngineEntry, PerfResult, PerfRow
from trtverify.util.words import count

INDENT = " " * 10
MEDIUM = SEVERITY_RANK["medium"]
MAX_FINDINGS = 3


def _ms(v: float | None) -> str:
    return f"{v:.3f}" if v is not None else "–"


def _speedup(r: PerfRow) -> str:
    parts = []
    if r.speedup is not None:
        parts.append(f"{r.speedup:.2f}x {r.speedup_vs}")
    elif r.speedup_vs is not None:
        parts.append(f"– {r.speedup_vs}")
    if r.speedup_vs_pytorch is not None:
        parts.append(f"{r.speedup_vs_pytorch:.2f}x pytorch")
    return ", ".join(parts) or "–"


def _baseline(r: PerfRow) -> str:
    b = r.baseline
    if b is None or b.state == "missing":
        return "no baseline"
    if b.state == "comparable":
        return f"{b.change:+.1%}" if b.change is not None else "comparable"
    return b.state.replace("_", " ")


def latency_table(rows: list[PerfRow]) -> list[str]:
    table = [("model", "batch", "median ms", "p99 ms", "samples/s", "speed-up", "baseline")]
    for r in rows:
        model = f"{r.model} ({'trtexec' if r.source == 'trtexec' else r.backend})"
        rate = f"{r.throughput:.0f}" if r.throughput is not None else "–"
        table.append((model, fmt(r.batch), _ms(r.median_ms), _ms(r.p99_ms), rate, _speedup(r), _baseline(r)))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    right = {1, 2, 3, 4}
    return [
        INDENT
        + "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))
        ).rstrip()
        for row in table
    ]


def _serious(findings: list[EngineFinding]) -> list[EngineFinding]:
    return [f for f in findings if SEVERITY_RANK.get(f.severity, len(SEVERITY_RANK)) <= MEDIUM]


def engine_lines(e: EngineEntry) -> list[str]:
    a = e.audit
    mix = ", ".join(f"{k} {v}" for k, v in sorted(a.precisions.items(), key=lambda kv: -kv[1]))
    rf = reformat_share(a)
    reformat = f"reformats {rf['layers']}"
    if rf["ms"] is not None:
        reformat += f" = {rf['ms']:.3f} ms ({rf['share']:.1%})" if rf["share"] is not None else f" = {rf['ms']:.3f} ms"
    total = f"total {a.total_ms:.3f} ms" if a.total_ms is not None else "no profile"
    line = f"{INDENT}engine {e.name}: {count(a.layers, 'layer')} ({mix}), {reformat}, {total}"
    serious = _serious(a.findings)
    if serious:
        for sev in sorted({f.severity for f in serious}, key=SEVERITY_RANK.__getitem__):
            kinds = [f.kind for f in serious if f.severity == sev]
            more = f" +{len(kinds) - MAX_FINDINGS}" if len(kinds) > MAX_FINDINGS else ""
            line += f"; {sev}: {', '.join(kinds[:MAX_FINDINGS])}{more}"
    out = [line]
    if e.diff is not None:
        first = [f for f in e.diff.findings if f.kind == "total"]
        reasons = [f for f in _serious(e.diff.findings) if f.kind != "total"]
        said = [f.message for f in first] + [f"{f.kind}: {f.message}" for f in reasons[:2]]
        if said:
            out.append(f"{INDENT}  vs {e.vs}: " + "; ".join(said))
    return out


def perf_lines(s: PerfResult) -> list[str]:
    out = latency_table(s.rows) if s.rows else []
    for e in s.engines or []:
        out += engine_lines(e)
    return out
