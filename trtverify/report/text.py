"""Terminal text: the summary of a run and of a build log (the CLI prints these lines). A stage's own lines under
its status line come from the module its registry entry names (`lines`: report/layerwisetext.py, ...)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from trtverify.compare.checks import CheckResult, nonfinite_words
from trtverify.config.checks import METRICS
from trtverify.config.findings import SEVERITIES
from trtverify.config.registry import STAGES
from trtverify.lint.findings import LintFinding
from trtverify.report.format import fmt
from trtverify.report.kinds import is_stage
from trtverify.report.logtext import context_lines
from trtverify.results.models import Results
from trtverify.stages.base import StageResult
from trtverify.stages.layerwise.models import FirstDivergence, LayerwiseCandidate, LayerwiseResult, RootCause
from trtverify.util.words import count, plural, shorten

if TYPE_CHECKING:  # the other stages' modules are imported where their results are present (report/kinds.py)
    from trtverify.buildlog.diff import BuildDiff
    from trtverify.buildlog.parser import BuildLog

MAX_FAILED = 20


def divergence_text(fd: FirstDivergence) -> str:
    what = (
        nonfinite_words(fd.nonfinite_mismatch, fd.ref_only_nonfinite, fd.cand_only_nonfinite)
        if fd.nonfinite_mismatch
        else f"rel_l2 {fmt(fd.metrics.get('rel_l2'))}"
        if "rel_l2" in fd.metrics or "stats_diff" not in fd.metrics
        else f"statistics differ: {fmt(fd.metrics['stats_diff'])} of its largest magnitude"  # docs/captured.md
    )
    return f"first divergence {fd.tensor} ({fd.op_type} {fd.node}, {what})"


def cause_text(rc: RootCause, method: str) -> str:
    kind = "local" if method == "isolate" else "added"
    if rc.nonfinite and rc.inputs_nonfinite:
        what = f"non-finite: its input {', '.join(rc.inputs_nonfinite)} overflows the candidate's type"
    elif rc.nonfinite:
        what = nonfinite_words(rc.nonfinite, rc.ref_only_nonfinite, rc.cand_only_nonfinite)
    elif rc.shape_mismatch:
        what = f"on the reference's inputs it gives another shape ({rc.shape_mismatch})"
    else:
        what = f"{kind} rel_l2 {fmt(rc.score)}"
    note = rc.pairing
    also = f"; computes {rc.tensor}: {note.why}" if note is not None and note.candidate_node else ""
    return f"{rc.node} ({rc.op_type}{also}), {what}"


class HighLint(NamedTuple):
    candidate: str
    kind: str
    count: int
    where: str | None
    message: str
    tensorrt: bool


def high_lint(results: Results) -> list[HighLint]:
    """High lint findings of every layerwise candidate, one entry per kind: count, first node, its message."""
    out = []
    for s in results.stages:
        if not isinstance(s, LayerwiseResult):
            continue
        for cand in s.candidates or []:
            kinds: dict[str, list[LintFinding]] = {}
            for f in cand.lint:
                if f.severity == "high":
                    kinds.setdefault(f.kind, []).append(f)
            for kind, fs in kinds.items():
                first = fs[0]
                out.append(
                    HighLint(cand.name, kind, len(fs), first.node or first.tensor, first.message, first.tensorrt)
                )
    return out


def lint_lines(results: Results) -> list[str]:
    """The verdict's lint lines: kind, count, first node of each high finding kind."""
    return [
        f"lint {h.candidate}: {h.kind}{' (TensorRT)' if h.tensorrt else ''} x{h.count}, first at {h.where}: {h.message}"
        for h in high_lint(results)
    ]


def fail_line(c: CheckResult, stage: StageResult | None = None) -> str:
    """`FAIL int8: rel_l2 <= 0.01 at /layer3/Conv_output_0 (worst sample 2): 2.09` for checks on tensors; for the
    others the name, the value and the limit, then what the check is about: its tensor, worst sample, the
    findings or unmatched names behind it (`stage`: the result it belongs to, for what the check does not hold)."""
    # (a captured candidate's consistency checks, with their `tolerance`, are said by name: what they compare)
    if c.tensor is not None and c.threshold is not None and c.metric in METRICS and "tolerance" not in c.detail:
        who = f"{c.candidate}: " if c.candidate else ""
        sample = f" (worst sample {c.worst_sample})" if c.worst_sample is not None else ""
        failing = c.detail.get("tensors_failed")
        more = f" [{failing} of {count(c.detail.get('tensors'), 'tensor')} fail]" if failing and failing > 1 else ""
        why = _row_error(stage, c) if c.value is None or c.value != c.value else None
        because = f" ({why})" if why else ""
        return f"FAIL {who}{c.metric} {c.op} {c.threshold:g} at {c.tensor}{sample}: {fmt(c.value)}{more}{because}"
    about = where(c, stage)
    if c.value is None and c.threshold is None and about:  # a check that could not be evaluated: why
        return f"FAIL {c.name}: {about}"
    limit = f"{c.threshold:g}" if c.threshold is not None else fmt(None)
    line = f"FAIL {c.name}: {fmt(c.value)} (limit {c.op} {limit})"
    return f"{line}: {about}" if about else line


def _row_error(stage: StageResult | None, c: CheckResult) -> str | None:
    """Why a tensor check has no value: the first error of its layerwise row or framework output (a shape
    mismatch, ...)."""
    outputs = getattr(stage, "outputs", None)  # a framework stage's outputs
    if isinstance(outputs, list):
        for out in outputs:
            if c.tensor in (out.tensor, out.reference_tensor) and out.errors:
                return _errors_text(out.errors)
        return None
    if not isinstance(stage, LayerwiseResult):
        return None
    for cand in stage.candidates or []:
        if c.candidate not in (None, cand.name):
            continue
        for row in cand.rows:
            if c.tensor in (row.tensor, row.candidate_tensor) and row.errors:
                return row.errors[0]
    return None


def _errors_text(errors: list[str]) -> str:
    """The first error of a tensor's samples ('sample 0: shape mismatch: ...'), and how many samples share it."""
    first = errors[0].split(": ", 1)[1] if errors[0].startswith("sample ") and ": " in errors[0] else errors[0]
    same = sum(1 for e in errors if e.endswith(first))
    return first + (f" (all {count(len(errors), 'sample')})" if same == len(errors) > 1 else "")


def where(c: CheckResult, stage: StageResult | None = None) -> str:
    """What a failing check is about, in words: '' when its name already says all there is."""
    d = c.detail
    parts: list[str] = []
    if "reference" in d and "candidate" in d and c.stage in STAGES and STAGES.get(c.stage).metric_deltas:
        parts.append(f"reference {fmt(d['reference'])} -> {c.candidate or 'candidate'} {fmt(d['candidate'])}")
    if c.tensor is not None and c.tensor not in c.name:
        parts.append(f"at {c.tensor}")
    if c.metric == "nonfinite_mismatch" and isinstance(stage, LayerwiseResult):
        first = _first_nonfinite(stage, c.candidate)
        if first:
            parts.append(first)
    if c.worst_sample is not None and c.tensor is None:
        parts.append(f"worst sample {c.worst_sample}")
    if isinstance(d.get("reason"), str):
        parts.append(d["reason"])
    # a captured candidate's consistency checks: where it parts first; marking: which capture to trust
    parts += [f"{k.replace('_', ' ')}: {d[k]}" for k in ("first_differing", "first_tensor_rows_differ",
                                                         "first_tensor_beyond") if k in d]  # fmt: skip
    if "unmarked" in d and isinstance(d.get("message"), str):
        parts.append(d["message"])
    if d.get("errors"):
        parts.append(_errors_text([str(e) for e in d["errors"]]))
    parts += [str(r) for r in d.get("reasons", [])]
    parts += _finding_words(d)
    if c.metric == "unmatched" and "rename" not in c.name:
        names = [*d.get("pytorch_only", []), *d.get("onnx_only", [])]
        if names:
            parts.append(f"{', '.join(names)}: pair them with stages.framework.rename or leave them out with ignore")
    if c.metric in ("pairs", "paired") and isinstance(stage, LayerwiseResult):  # its own stage's, layerwise
        parts += [u for cand in stage.candidates or [] if cand.name == c.candidate for u in [unmatched_text(cand)] if u]
    if "window_cv" in d and "max_cv" in d:
        runs = f"{fmt(d.get('runs'))} {plural('run', d.get('runs'))}"
        parts.append(f"window_cv {fmt(d['window_cv'])} over max_cv {fmt(d['max_cv'])} after {runs}")
    if "baseline_ms" in d:
        parts.append(f"{fmt(d.get('median_ms'))} ms against the baseline's {fmt(d['baseline_ms'])} ms")
    return "; ".join(parts)


def _finding_words(d: dict) -> list[str]:
    """The first findings behind a findings check: kind, lines, layers."""
    out = []
    for f in d.get("findings", [])[:3]:
        lines = f.get("lines") or []
        at = f" (line {', '.join(str(n) for n in lines[:3])}{'...' if len(lines) > 3 else ''})" if lines else ""
        layers = f.get("layers") or []
        on = f" at {', '.join(layers[:2])}{'...' if len(layers) > 2 else ''}" if layers else ""
        count = f" x{f['count']}" if f.get("count", 1) > 1 else ""
        out.append(f"{f.get('kind')}{count}{at}{on}")
    if len(d.get("findings", [])) > 3:
        out.append(f"{len(d['findings']) - 3} more kinds (see results.json)")
    lines = d.get("lines")
    if lines:
        out.append(f"line {', '.join(str(n) for n in lines[:6])}{'...' if len(lines) > 6 else ''}")
    return out


def _first_nonfinite(s: LayerwiseResult, candidate: str | None) -> str:
    """The first tensor (topological order) where reference and candidate disagree about finiteness."""
    for cand in s.candidates or []:
        if cand.name != candidate:
            continue
        for row in cand.rows:  # in the reference's topological order
            if row.nonfinite_mismatch:
                words = nonfinite_words(row.nonfinite_mismatch, row.ref_only_nonfinite, row.cand_only_nonfinite)
                return f"first at {row.tensor} ({words})"
    return ""


def _names(names: list[str], limit: int = 6) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def paired_text(cand: LayerwiseCandidate) -> str:
    """'47 of 49 reference tensors paired and compared (45 by structure)': what the candidate's verdict rests on."""
    p = cand.paired
    if p is None:
        return ""
    notes = [f"{p.by['structure']} by structure"] if p.by.get("structure") else []
    if p.structure_error:
        notes.append(f"structural pairing failed: {p.structure_error}")
    if not p.passed:
        notes.append(f"too few: {p.with_counterpart} have a counterpart by op type, {p.required} must pair")
    more = f" ({'; '.join(notes)})" if notes else ""
    return f"{p.paired} of {count(p.reference_tensors, 'reference tensor')} paired and compared{more}"


def unmatched_text(cand: LayerwiseCandidate) -> str:
    """The layerwise candidate's unpaired tensors a rename could pair, by name, with the renames worth writing
    (equal shapes, same operation); '' when there are none (tensors only the reference has because the
    candidate fused them, alone, are normal)."""
    u = cand.unmatched
    other = u.candidate_only.other + u.candidate_only.renamed
    parts = []
    if u.bad_renames:
        parts.append(f"rename sources the reference does not have: {_names(u.bad_renames)}")
    if u.reference_only and other:
        parts.append(f"only in the reference: {_names(u.reference_only)}; only in {cand.name}: {_names(other)}")
        if u.suggested_renames:
            pairs = ", ".join(f"{r}: {c}" for r, c in list(u.suggested_renames.items())[:3])
            parts.append(f"pair them with stages.layerwise.rename: {{{pairs}}}")
    return "; ".join(parts)


def latency_text(cost: Any) -> str:
    """'ONNX Runtime latency: lowered 1.20 ms, repaired 1.35 ms, reference 1.00 ms', each model not timed said so
    (the stage's notes and checks say why)."""
    parts = []
    for key, label in (("before", "lowered"), ("after", "repaired"), ("reference", "reference")):
        if key in cost.latency_ms:
            parts.append(f"{label} {cost.latency_ms[key]:.2f} ms")
        elif key in cost.not_measured:
            parts.append(f"{label} not timed (no native kernels here)")
        elif key in cost.load_errors:
            parts.append(f"{label} not timed (ONNX Runtime cannot load it)")
    return "ONNX Runtime latency: " + (", ".join(parts) if parts else "not measured")


def stage_lines(s: StageResult) -> list[str]:
    failed = [c for c in s.checks if not c.passed]
    n = len(s.checks)
    name = f"{s.name} at {s.shape}" if s.shape else s.name
    out = [f"[{s.status.upper():^7}] {name}: {n - len(failed)}/{n} {plural('check', n)} passed ({s.duration_s:.2f} s)"]
    if s.kept_from:
        out.append(f"          kept: not run by this run; the result of the earlier run started {s.kept_from}")
    out += [f"          note: {note}" for note in s.notes]
    entry = STAGES.get(s.name) if s.name in STAGES else None
    if entry is not None and entry.lines is not None and is_stage(s, s.name):  # the stage's own lines
        out += entry.liner()(s)
    for c in failed[:MAX_FAILED]:
        out.append(f"          {fail_line(c, s)}")
    if len(failed) > MAX_FAILED:
        out.append(f"          ... and {len(failed) - MAX_FAILED} more failed checks (see results.json)")
    if s.error is not None:
        out.append(f"          {s.error.kind} error: {s.error.message}")
    return out


def verdict(results: Results) -> str:
    part = f" shard {results.shard}" if results.shard is not None else ""
    part += f" (merged from {count(results.merged.shards, 'shard')})" if results.merged is not None else ""
    word = "PASSED" if results.passed else "FAILED"
    swept = [s for s in results.stages if s.shape]
    failed_at = list(dict.fromkeys(s.shape for s in swept if s.status in ("failed", "error") and s.shape))
    if failed_at:
        part += f"; failed at {'; '.join(failed_at)} (of {count(len(dict.fromkeys(s.shape for s in swept)), 'shape')})"
    kept = [s for s in results.stages if s.kept_from]
    if kept:
        part += f"; {count(len(kept), 'stage')} kept from an earlier run"
    return f"{word}: suite '{results.suite.name}'{part} (exit {results.exit_code})"


def run_summary(results: Results, quiet: bool = False) -> list[str]:
    """One block per stage (unless quiet), then the verdict line."""
    out = [] if quiet else [line for s in results.stages for line in stage_lines(s)]
    return [*out, *lint_lines(results), verdict(results)]


def _one_line(message: str, limit: int) -> str:
    """A finding's message on one terminal line: whitespace joined, cut after a sentence or a word (' ...')."""
    return shorten(" ".join(message.split()), limit)


def buildlog_summary(log: Path, parsed: BuildLog, against: Path | None, changes: BuildDiff | None) -> list[str]:
    out = [
        f"{log}: {count(parsed.lines, 'line')}, dialect {parsed.dialect or 'unknown'}, "
        f"{parsed.product} {parsed.version or '(the log does not state its version)'}"
    ]
    out.extend(context_lines(parsed.context))  # what it ran, before what went wrong
    if parsed.options:
        out.append("options: " + ", ".join(f"{k}={v}" for k, v in parsed.options.items()))
    for sev in SEVERITIES:
        found = [f for f in parsed.findings if f.severity == sev]
        if found:
            out.append(f"{sev}:")
        for f in found:
            lines = ",".join(str(n) for n in list(f.lines)[:6]) + (f"...{f.lines[-1]}" if len(f.lines) > 6 else "")
            layers = f" [{', '.join(list(f.layers)[:4])}{'...' if len(f.layers) > 4 else ''}]" if f.layers else ""
            times = f" x{f.count}" if f.count > 1 else ""
            out.append(f"  {f.category}/{f.kind}{times} (line {lines}){layers}: {_one_line(f.message, 160)}")
    if parsed.layers:
        by: dict[str, int] = {}
        for layer in parsed.layers:
            label = layer.precision or ("no output" if not layer.onnx_nodes else "not stated")
            by[label] = by.get(label, 0) + 1
        out.append(f"layers: {len(parsed.layers)} ({', '.join(f'{k} {v}' for k, v in sorted(by.items()))})")
    out.append(f"unrecognised lines: {parsed.unknown_lines} of {parsed.lines} ({parsed.unknown_rate:.1%})")
    if changes is not None:
        out.append(f"against {against} ({parsed.product} {changes.versions.old} -> {changes.versions.new}):")
        for c in changes.layers_changed:
            out.append(f"  changed {c.layer}: " + "; ".join(f"{k} {v.old} -> {v.new}" for k, v in c.changes.items()))
        out.append(
            f"  layers only in the new build: {len(changes.layers_only_new)}; "
            f"only in the old: {len(changes.layers_only_old)}"
        )
        for f in changes.new_findings:
            line = f.lines[0] if f.lines else "?"
            out.append(f"  new finding {f.category}/{f.kind} (line {line}): {_one_line(f.message, 120)}")
    return out
