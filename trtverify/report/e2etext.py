"""The e2e stage's lines of the terminal summary (registered as its `lines`)."""

from __future__ import annotations

from trtverify.report.format import fmt
from trtverify.stages.e2e.models import E2EResult


def e2e_lines(s: E2EResult) -> list[str]:
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
        parts += [
            f"{k} against the baseline {fmt(b.baseline)} ({b.change:+.4f})"
            for k, b in cand.vs_baseline.items()
            if b.state == "compared" and b.change is not None
        ]
        out.append(f"          {cand.name}: " + ", ".join(parts))
        if cand.worst:
            ids = ", ".join(str(w.id) for w in cand.worst[:8])
            more = f" (of {len(cand.worst)} listed)" if len(cand.worst) > 8 else ""
            out.append(f"          {cand.name}: most changed samples: {ids}{more}")
    return out
