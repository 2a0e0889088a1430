"""Terminal text: the summary of a run and of a build log (the CLI prints these lines)."""

from __future__ import annotations

from pathlib import Path

from trtverify.buildlog.diff import BuildDiff
from trtverify.buildlog.parser import BuildLog
from trtverify.config.findings import SEVERITIES
from trtverify.report.format import fmt
from trtverify.results.models import Results
from trtverify.stages.base import StageResult
from trtverify.stages.e2e.models import E2EResult
from trtverify.stages.layerwise.models import LayerwiseResult

MAX_FAILED = 20


def _layerwise(s: LayerwiseResult) -> list[str]:
    out = []
    for cand in s.candidates or []:
        fd = cand.first_divergence
        rc = cand.root_causes[0] if cand.root_causes else None
        line = f"          {cand.name}: {len(cand.rows)} tensors compared; "
        if fd is not None:
            line += f"first divergence {fd.tensor} ({fd.op_type} {fd.node}, rel_l2 {fmt(fd.metrics.get('rel_l2'))})"
        else:
            line += "no divergence"
        out.append(line)
        if rc is not None:
            kind = "local" if cand.root_cause_method == "isolate" else "added"
            label = "root cause #1" if fd is not None else "largest own error"
            out.append(f"          {cand.name}: {label} {rc.node} ({rc.op_type}), {kind} rel_l2 {fmt(rc.score)}")
    return out


def _e2e(s: E2EResult) -> list[str]:
    out = []
    if s.reference is None:
        return out
    ref = s.reference.scalars()
    for cand in s.candidates or []:
        metrics = cand.metrics.scalars()
        parts = [
            f"{k} {fmt(ref.get(k))} -> {fmt(metrics.get(k))} ({cand.deltas.get(k, 0):+.4f})"
            for k in s.gated or []
            if k in ref
        ]
        out.append(f"          {cand.name}: " + ", ".join(parts))
        if cand.worst:
            ids = ", ".join(str(w.id) for w in cand.worst[:8])
            out.append(f"          {cand.name}: most changed samples: {ids}")
    return out


def stage_lines(s: StageResult) -> list[str]:
    failed = [c for c in s.checks if not c.passed]
    n = len(s.checks)
    out = [f"[{s.status.upper():^7}] {s.name}: {n - len(failed)}/{n} checks passed ({s.duration_s:.2f} s)"]
    out += [f"          note: {note}" for note in s.notes]
    if isinstance(s, LayerwiseResult):
        out += _layerwise(s)
    if isinstance(s, E2EResult):
        out += _e2e(s)
    for c in failed[:MAX_FAILED]:
        out.append(f"          FAIL {c.name}: {fmt(c.value)} (limit {c.op} {fmt(c.threshold)})")
    if len(failed) > MAX_FAILED:
        out.append(f"          ... and {len(failed) - MAX_FAILED} more failed checks (see results.json)")
    if s.error is not None:
        out.append(f"          {s.error.kind} error: {s.error.message}")
    return out


def verdict(results: Results) -> str:
    part = f" shard {results.shard}" if results.shard is not None else ""
    part += f" (merged from {results.merged.shards} shards)" if results.merged is not None else ""
    word = "PASSED" if results.passed else "FAILED"
    return f"{word}: suite '{results.suite.name}'{part} (exit {results.exit_code})"


def run_summary(results: Results, quiet: bool = False) -> list[str]:
    """One block per stage (unless quiet), then the verdict line."""
    out = [] if quiet else [line for s in results.stages for line in stage_lines(s)]
    return [*out, verdict(results)]


def buildlog_summary(log: Path, parsed: BuildLog, against: Path | None, changes: BuildDiff | None) -> list[str]:
    out = [
        f"{log}: {parsed.lines} lines, dialect {parsed.dialect or 'unknown'}, "
        f"TensorRT {parsed.version or 'version not stated'}"
    ]
    if parsed.options:
        out.append("options: " + ", ".join(f"{k}={v}" for k, v in parsed.options.items()))
    for sev in SEVERITIES:
        found = [f for f in parsed.findings if f.severity == sev]
        if found:
            out.append(f"{sev}:")
        for f in found:
            lines = ",".join(str(n) for n in list(f.lines)[:6]) + ("..." if len(f.lines) > 6 else "")
            layers = f" [{', '.join(list(f.layers)[:4])}{'...' if len(f.layers) > 4 else ''}]" if f.layers else ""
            count = f" x{f.count}" if f.count > 1 else ""
            out.append(f"  {f.category}/{f.kind}{count} (line {lines}){layers}: {f.message[:160]}")
    if parsed.layers:
        by: dict[str, int] = {}
        for layer in parsed.layers:
            by[str(layer.precision)] = by.get(str(layer.precision), 0) + 1
        out.append(f"layers: {len(parsed.layers)} ({', '.join(f'{k} {v}' for k, v in sorted(by.items()))})")
    out.append(f"unrecognised lines: {parsed.unknown_lines}")
    if changes is not None:
        out.append(f"against {against} (TensorRT {changes.versions.old} -> {changes.versions.new}):")
        for c in changes.layers_changed:
            out.append(f"  changed {c.layer}: " + "; ".join(f"{k} {v.old} -> {v.new}" for k, v in c.changes.items()))
        out.append(
            f"  layers only in the new build: {len(changes.layers_only_new)}; "
            f"only in the old: {len(changes.layers_only_old)}"
        )
        for f in changes.new_findings:
            line = f.lines[0] if f.lines else "?"
            out.append(f"  new finding {f.category}/{f.kind} (line {line}): {f.message[:120]}")
    return out
