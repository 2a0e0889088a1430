"""`trtverify merge`: the e2e stage of several shards as one stage, its metrics recomputed from the shards'
accumulator states merged (`Accumulator.merge`): COCO metrics cover the union of all detections instead of
averaging shards, and equal the unsharded run's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from trtverify.config.loader import LoadedSuite
from trtverify.stages.e2e.models import E2EResult
from trtverify.stages.e2e.stage import merge_shards


def merge(ran: Sequence[tuple[Path, E2EResult]], shape: str | None, suite: Callable[[], LoadedSuite]) -> E2EResult:
    """One e2e result (registered as the stage's `merge`); a whole case (a run of several suites deals each
    batch size to one shard) is that shard's result as it is."""
    if len(ran) == 1 and ran[0][1].shard_slice is None:
        return ran[0][1]
    merged = merge_shards(suite(), ran)
    return merged.model_copy(update={"duration_s": sum(s.duration_s for _, s in ran), "shape": shape})
