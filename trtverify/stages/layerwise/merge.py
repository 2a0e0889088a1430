"""`trtverify merge`: the layerwise stage of several shards (each ran some of the candidates) as one stage."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from trtverify.config.loader import LoadedSuite
from trtverify.stages.base import status_of, sum_timings
from trtverify.stages.layerwise.models import LayerwiseResult


def merge(
    ran: Sequence[tuple[Path, LayerwiseResult]], shape: str | None, suite: Callable[[], LoadedSuite]
) -> LayerwiseResult:
    """The shards' candidates concatenated in the suite's order (registered as the stage's `merge`)."""
    loaded = suite()
    cfg = loaded.suite.stages.layerwise
    order = loaded.suite.candidates_of(cfg) if cfg is not None else list(loaded.suite.models.candidates)
    return _layerwise([s for _, s in ran], order).model_copy(update={"shape": shape})


def _layerwise(parts: Sequence[LayerwiseResult], order: Sequence[str]) -> LayerwiseResult:
    """The layerwise stages of several shards (disjoint candidates) as one stage."""
    rank = {n: i for i, n in enumerate(order)}
    cands = sorted((c for p in parts for c in p.candidates or []), key=lambda c: rank.get(c.name, len(rank)))
    # checks in the unsharded run's order: by candidate, then as each shard wrote them
    checks = sorted((c for p in parts for c in p.checks), key=lambda c: rank.get(c.candidate or "", -1))
    first = parts[0]
    return LayerwiseResult(
        status=status_of(checks),
        duration_s=sum(p.duration_s for p in parts),
        checks=checks,
        notes=list(dict.fromkeys(n for p in parts for n in p.notes)),
        timings=sum_timings(p.timings for p in parts),
        samples=first.samples,
        reference=first.reference,
        candidates=cands,
        baseline_file=next((p.baseline_file for p in parts if p.baseline_file), None),
    )
