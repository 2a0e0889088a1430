"""The layerwise stage's lines of the terminal summary (registered as its `lines`)."""

from __future__ import annotations

from collections import Counter

from trtverify.report.capturetext import pair_text
from trtverify.report.dettext import detection_lines
from trtverify.report.format import fmt
from trtverify.report.rangetext import cache_lines, range_lines
from trtverify.report.text import cause_text, divergence_text, paired_text, unmatched_text
from trtverify.stages.layerwise.models import LayerwiseResult
from trtverify.util.words import count


def layerwise_lines(s: LayerwiseResult) -> list[str]:
    out = []
    for cand in s.candidates or []:
        fd = cand.first_divergence
        rc = cand.root_causes[0] if cand.root_causes else None
        compared = sum(1 for row in cand.rows if row.not_comparable is None)
        line = f"          {cand.name} ({cand.precision}, checks: {cand.checks_source}): "
        line += f"{paired_text(cand)}; " if cand.paired is not None else f"{count(compared, 'tensor')} compared; "
        if fd is not None:
            line += divergence_text(fd)
        elif any(not d.passed for d in cand.detections or []):
            line += "no tensor diverges; the detections differ"
        else:  # a verdict says what it rests on: none on the layers from too few of them
            line += "no divergence" if cand.paired is None or cand.paired.passed else "too few paired for a verdict"
        after = sum((cand.after_plugins or {}).values())
        rewritten = len(cand.rows) - compared - after
        if rewritten:
            line += f"; {rewritten} rewritten by the converter, not comparable"
        for why, n in (cand.after_plugins or {}).items():
            line += f"; {count(n, 'tensor')} {why}, not compared"
        by_stats = sum(1 for row in cand.rows if (row.compared_by or "").startswith("statistics"))
        picked = sum(1 for row in cand.rows if row.compared_by) - by_stats
        if picked:  # docs/stages/layerwise.md#index-tensors
            line += f"; {count(picked, 'index tensor')} compared by what they select, never a root cause"
        if by_stats:  # docs/captured.md: trtexec's tensor_summary.json
            line += f"; {count(by_stats, 'tensor')} compared by statistics only (min, max, avg), not element by element"
        out.append(line)
        for note in cand.plugins or []:  # what the numbers after a plugin rest on
            out.append(f"          {cand.name}: plugin {note}")
        out += detection_lines(cand)
        b = cand.vs_baseline
        if b is not None and b.state == "compared" and b.change is not None:
            out.append(f"          {cand.name}: worst rel_l2 {fmt(b.value)} at {b.tensor} against the baseline's "
                       f"{fmt(b.baseline)} at {b.baseline_tensor} ({b.change:+.4g})")  # fmt: skip
        if cand.precision_mix and len(cand.precision_mix) > 1:
            mix = ", ".join(f"{k} {v}" for k, v in cand.precision_mix.items())
            out.append(f"          {cand.name}: compute nodes by precision: {mix}")
        if cand.emulation:
            out.append(f"          {cand.name}: {cand.emulation}")
        if cand.consistency:  # a capture against itself: what was checked, and why not the rest
            out.append(f"          {cand.name}: consistency: {'; '.join(cand.consistency)}")
        if rc is not None:
            label = "root cause #1" if fd is not None else "largest own error"
            out.append(f"          {cand.name}: {label} {cause_text(rc, cand.root_cause_method)}")
        unpaired = unmatched_text(cand)
        if unpaired:
            out.append(f"          {cand.name}: unmatched tensors: {unpaired}")
        out += range_lines(cand)
        lesser = [f for f in cand.lint if f.severity != "high"]  # high findings get lines of their own
        if lesser:
            kinds = Counter(f"{f.kind} ({f.severity})" for f in lesser)
            first = {f"{f.kind} ({f.severity})": f.node or f.tensor for f in reversed(lesser)}
            listed = ", ".join(f"{k} x{n}" + (f" at {first[k]}" if first[k] else "") for k, n in kinds.most_common())
            out.append(f"          {cand.name}: lint: {listed}")
    return out + cache_lines(s) + [f"          {pair_text(p)}" for p in s.capture_pairs or []]
