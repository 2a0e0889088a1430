"""Stage e2e against its stored baseline: each gate's `max_drop_vs_baseline` compares a candidate's metric with
the value the baseline holds for the same candidate and metric (`trtverify.stages.baseline`); `--update-baseline`
writes every candidate's scalar metrics. A shard sees part of the dataset: it neither compares nor writes, the
merge compares."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

from trtverify.compare.checks import CheckResult, failed_check, limit_check
from trtverify.config.loader import LoadedSuite
from trtverify.config.stages import E2EStage, Gate
from trtverify.stages import baseline as store
from trtverify.stages.e2e.models import E2ECandidate, E2EResult
from trtverify.util.fsutil import sha256_file
from trtverify.util.words import count

NAME = "e2e"
_PATHS = ("npz", "folder", "csv", "image_root", "coco", "masks", "images")
_SETTINGS = {"task", "dataset", "preprocess", "postprocess", "top_k", "iou", "score_threshold", "ignore_index"}


def path_for(root: Path, suite: str) -> Path:
    return store.path_for(root, suite, NAME)


def identity(loaded: LoadedSuite, cfg: E2EStage, samples: int) -> store.Identity:
    """The reference model's sha256, the samples evaluated, and a hash of the settings that decide the metrics
    (the dataset's files by name, so that another checkout of the same repository compares)."""
    settings = cfg.model_dump(mode="json", include=_SETTINGS)
    for key in _PATHS:
        if settings["dataset"].get(key):
            settings["dataset"][key] = Path(settings["dataset"][key]).name
    return {
        "suite": loaded.suite.name,
        "reference_sha256": sha256_file(Path(loaded.suite.models.reference)),
        "samples": samples,
        "settings_sha256": hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest(),
    }


def _g(x: float) -> str:
    return f"{x:.4g}"


def _sentence(g: Gate, ref: float, value: float, base: float, written: str | None) -> str:
    """'map 0.712: 0.004 below the reference 0.716 (gate 0.01); 0.005 below the baseline 0.717 written 2026-11-20
    (gate 0.002)': both numbers a drift failure rests on."""

    def side(d: float) -> str:
        return f"{_g(abs(d))} {'below' if d >= 0 else 'above'}"

    gate = f" (gate {g.max_drop:g})" if g.max_drop is not None else ""
    assert g.max_drop_vs_baseline is not None
    return (
        f"{g.metric} {_g(value)}: {side(ref - value)} the reference {_g(ref)}{gate}; {side(base - value)} the "
        f"baseline {_g(base)} written {store.day(written)} (gate {g.max_drop_vs_baseline:g})"
    )


def _compare(
    cand: E2ECandidate, gates: list[Gate], ref: dict[str, Any], entry: dict[str, Any]
) -> tuple[dict[str, store.VsBaseline], list[CheckResult]]:
    values = cand.metrics.scalars()
    metrics = entry.get("metrics") if isinstance(entry.get("metrics"), dict) else {}
    written = entry.get("written")
    vs: dict[str, store.VsBaseline] = {}
    checks = []
    for g in gates:
        name = f"{cand.name}: {g.metric} drop vs baseline <= {g.max_drop_vs_baseline:g}"
        value, base = store.number(values.get(g.metric)), store.number(metrics.get(g.metric))
        if base is None:
            why = f"the baseline of {cand.name} has no {g.metric}: write it again with {store.FLAG}"
            vs[g.metric] = store.VsBaseline(state="missing", value=value, written=written, why=why)
            continue
        vs[g.metric] = store.VsBaseline(state="compared", value=value, baseline=base, written=written,
                                        change=None if value is None else value - base)  # fmt: skip
        r = store.number(ref.get(g.metric))
        if value is None or math.isnan(value) or r is None:
            why = {"reason": f"metric '{g.metric}' not computed", "baseline": base}
            checks.append(failed_check(name, NAME, f"{g.metric}_drop_vs_baseline", why, candidate=cand.name))
            continue
        detail = {"baseline": base, "written": written, "reason": _sentence(g, r, value, base, written)}
        assert g.max_drop_vs_baseline is not None
        checks.append(limit_check(name, NAME, f"{g.metric}_drop_vs_baseline", base - value, g.max_drop_vs_baseline,
                                  "<=", candidate=cand.name, detail=detail))  # fmt: skip
    return vs, checks


def apply(
    result: E2EResult, loaded: LoadedSuite, path: Path, *, update: bool, sharded: bool, shape: str | None
) -> E2EResult:
    """`result` with its candidates against the baseline at `path` (or the baseline written from them)."""
    cfg = loaded.suite.stages.e2e
    assert cfg is not None
    gates = [g for g in cfg.gates if g.max_drop_vs_baseline is not None]
    if result.reference is None or not result.candidates or not (gates or update):
        return result
    suite = loaded.suite.name
    notes, checks, cands = list(result.notes), list(result.checks), []
    at = f"@{shape}" if shape else ""
    shown = list(dict.fromkeys(g.metric for g in gates or cfg.gates))
    if sharded:
        if update:
            notes.append(f"baseline not written to {path}: a shard's metrics cover part of the dataset; write it "
                         "from an unsharded run")  # fmt: skip
        why = "a shard's metrics cover part of the dataset: compared after merge"
        state = store.VsBaseline(state="sharded", why=why)
        cands = [c.model_copy(update={"vs_baseline": dict.fromkeys(shown, state)}) for c in result.candidates]
        return result.model_copy(update={"candidates": cands, "notes": notes, "baseline_file": str(path)})
    here = identity(loaded, cfg, result.samples or 0)
    ref = result.reference.scalars()
    if update:
        written = store.now()
        entries = {
            c.name + at: {
                "metrics": {k: v for k, v in c.metrics.scalars().items() if store.number(v) is not None},
                "reference_metrics": {k: v for k, v in ref.items() if store.number(v) is not None},
                "model": str(loaded.suite.models.candidates[c.name].path),
                "identity": here,
                "written": written,
            }
            for c in result.candidates
        }
        store.save(path, suite, entries)
        notes.append(f"baseline rewritten: {path} ({count(len(entries), 'candidate')})")
        for c in result.candidates:
            values = c.metrics.scalars()
            vs = {m: store.VsBaseline(state="updated", value=store.number(values.get(m)), written=written)
                  for m in shown}  # fmt: skip
            cands.append(c.model_copy(update={"vs_baseline": vs}))
    else:
        doc = store.load(path, NAME)
        not_run: dict[str, list[str]] = {}
        for c in result.candidates:
            entry, state = store.lookup(doc, suite, c.name + at, here, path)
            if entry is None:
                assert state is not None and state.why is not None
                not_run.setdefault(state.why, []).append(c.name)
                values = c.metrics.scalars()
                vs = {m: state.model_copy(update={"value": store.number(values.get(m))}) for m in shown}
                cands.append(c.model_copy(update={"vs_baseline": vs}))
                continue
            vs, more = _compare(c, gates, ref, entry)
            checks += more
            passed = c.passed and all(ch.passed for ch in more)
            cands.append(c.model_copy(update={"vs_baseline": vs, "passed": passed}))
            for m, v in vs.items():
                if v.state == "missing" and v.why:
                    not_run.setdefault(v.why, []).append(f"{c.name} {m}")
        for why, names in not_run.items():
            notes.append(f"max_drop_vs_baseline gates not run for {', '.join(names)}: {why}")
    return store.gated(result, cands, checks, notes, path)
