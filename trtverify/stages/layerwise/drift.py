"""Stage layerwise against its stored baseline: `max_increase_vs_baseline` compares each candidate's worst tensor
(the largest rel_l2 of its compared tensors, the error layerwise gates on) with the baseline's for the same
candidate (`trtverify.stages.baseline`); `--update-baseline` writes every candidate's worst tensor."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from trtverify.compare.checks import CheckResult, failed_check, limit_check
from trtverify.config.loader import LoadedSuite
from trtverify.data.reference import hash_samples
from trtverify.stages import baseline as store
from trtverify.stages.base import StageContext
from trtverify.stages.layerwise.models import LayerwiseCandidate, LayerwiseResult
from trtverify.util.fsutil import sha256_file
from trtverify.util.words import count

NAME = "layerwise"
METRIC = "rel_l2"


def path_for(root: Path, suite: str) -> Path:
    return store.path_for(root, suite, NAME)


def identity(loaded: LoadedSuite, samples: list[dict[str, np.ndarray]]) -> store.Identity:
    """The suite, the reference model's sha256 and the input samples' hash."""
    return {
        "suite": loaded.suite.name,
        "reference_sha256": sha256_file(Path(loaded.suite.models.reference)),
        "inputs_sha256": hash_samples(samples),
    }


def worst(cand: LayerwiseCandidate) -> tuple[float | None, str | None]:
    """The largest rel_l2 of the candidate's compared tensors (+inf beats any finite value), and its tensor."""
    best: tuple[float | None, str | None] = (None, None)
    for row in cand.rows:
        v = row.metrics.get(METRIC)
        if row.not_comparable is None and v is not None and not math.isnan(v) and (best[0] is None or v > best[0]):
            best = (v, row.tensor)
    return best


def _check(name: str, gate: float, value: float | None, tensor: str | None, vs: store.VsBaseline) -> CheckResult:
    label = f"{name}: worst {METRIC} increase vs baseline <= {gate:g}"
    metric = f"{METRIC}_increase_vs_baseline"
    if value is None:
        return failed_check(label, NAME, metric, {"reason": f"no tensor has a {METRIC}"}, candidate=name)
    assert vs.baseline is not None
    grew = 0.0 if math.isinf(value) and math.isinf(vs.baseline) else value - vs.baseline
    up = f"{abs(grew):.4g} {'above' if grew >= 0 else 'below'}"
    reason = (
        f"worst {METRIC} {value:.4g} at {tensor}: {up} the baseline's {vs.baseline:.4g} at {vs.baseline_tensor} "
        f"written {store.day(vs.written)} (gate {gate:g})"
    )
    detail = {"baseline": vs.baseline, "baseline_tensor": vs.baseline_tensor, "written": vs.written, "reason": reason}
    return limit_check(label, NAME, metric, grew, gate, "<=", candidate=name, tensor=tensor, detail=detail)


def apply(ctx: StageContext, samples: list[dict[str, np.ndarray]], result: LayerwiseResult) -> LayerwiseResult:
    """`result` with its candidates against the stored baseline (or the baseline written from them)."""
    cfg = ctx.loaded.suite.stages.layerwise
    assert cfg is not None
    gate, update = cfg.max_increase_vs_baseline, ctx.update_baseline
    if not result.candidates or (gate is None and not update):
        return result
    suite = ctx.loaded.suite.name
    path = path_for(ctx.store.root, suite)  # --reference-dir moves it with the references
    notes, checks, cands = list(result.notes), list(result.checks), []
    at = f"@{ctx.shape}" if ctx.shape else ""
    if update and ctx.work.candidates is not None:
        notes.append(f"baseline not written to {path}: a shard runs some of the candidates; write it from an "
                     "unsharded run")  # fmt: skip
        update = False
        if gate is None:
            return result.model_copy(update={"notes": notes})
    here = identity(ctx.loaded, samples)
    if update:
        written = store.now()
        entries = {}
        for c in result.candidates:
            value, tensor = worst(c)
            entries[c.name + at] = {METRIC: value, "tensor": tensor, "model": c.model, "precision": c.precision,
                                    "identity": here, "written": written}  # fmt: skip
            vs = store.VsBaseline(state="updated", value=value, tensor=tensor, written=written)
            cands.append(c.model_copy(update={"vs_baseline": vs}))
        store.save(path, suite, entries)
        notes.append(f"baseline rewritten: {path} ({count(len(entries), 'candidate')})")
    else:
        assert gate is not None
        doc = store.load(path, NAME)
        not_run: dict[str, list[str]] = {}
        for c in result.candidates:
            value, tensor = worst(c)
            entry, state = store.lookup(doc, suite, c.name + at, here, path)
            base = store.number(entry.get(METRIC)) if entry is not None else None
            if entry is not None and base is None:
                why = f"the baseline of {c.name} has no worst {METRIC}: write it again with {store.FLAG}"
                state = store.VsBaseline(state="missing", written=entry.get("written"), why=why)
            if state is not None:
                assert state.why is not None
                not_run.setdefault(state.why, []).append(c.name)
                vs = state.model_copy(update={"value": value, "tensor": tensor})
                cands.append(c.model_copy(update={"vs_baseline": vs}))
                continue
            assert entry is not None and base is not None
            vs = store.VsBaseline(state="compared", value=value, baseline=base, tensor=tensor,
                                  baseline_tensor=entry.get("tensor"), written=entry.get("written"),
                                  change=None if value is None else value - base)  # fmt: skip
            check = _check(c.name, gate, value, tensor, vs)
            checks.append(check)
            cands.append(c.model_copy(update={"vs_baseline": vs, "passed": c.passed and check.passed}))
        for why, names in not_run.items():
            notes.append(f"max_increase_vs_baseline not run for {', '.join(names)}: {why}")
    return store.gated(result, cands, checks, notes, path)
