"""`trtverify merge DIR...`: one results.json from the folders of every shard of a run.

Each stage merges its own results, by the `merge` of its registry entry (`config/registry.py`): the layerwise
candidates are concatenated in the suite's order, e2e metrics recomputed from the shards' accumulator states
merged, so COCO metrics cover the union of all detections and equal the unsharded run's. A stage without one is
a whole case: the result of the one shard that ran it. This module names no stage.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from trtverify.config.loader import LoadedSuite, load_suite
from trtverify.config.registry import STAGES
from trtverify.results.io import load_results
from trtverify.results.models import Merged, Results
from trtverify.results.record import build_results
from trtverify.stages.base import StageResult
from trtverify.util.errors import UsageError
from trtverify.util.fsutil import sha256_file


def check_shards(results: Sequence[tuple[Path, Results]]) -> int:
    """Every shard of one run of one suite, each once; returns N."""
    if not results:
        raise UsageError("merge: no shard directories given")
    first_dir, first = results[0]
    seen: dict[int, Path] = {}
    count = None
    for d, r in results:
        info = r.shard
        if info is None:
            raise UsageError(f"{d / 'results.json'}: not a shard (run with --shard I/N)")
        if r.suite.sha256 != first.suite.sha256:
            raise UsageError(
                f"{d}: ran a different suite file than {first_dir} "
                f"(sha256 {r.suite.sha256[:12]} vs {first.suite.sha256[:12]})"
            )
        if count is None:
            count = info.count
        elif info.count != count:
            raise UsageError(f"{d}: shard {info}, but {first_dir} is one of {count}")
        if info.index in seen:
            raise UsageError(f"{d}: shard {info.index}/{count} given twice (also {seen[info.index]})")
        if not r.complete:
            raise UsageError(
                f"{d}: shard {info.index}/{count} did not finish (results.json is incomplete); run it again"
            )
        seen[info.index] = d
    assert count is not None
    missing = sorted(set(range(1, count + 1)) - set(seen))
    if missing:
        raise UsageError(
            f"merge: shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing; give every shard's directory"
        )
    return count


def _suite(first: Results, suite_path: Path | None) -> LoadedSuite:
    path = Path(suite_path or first.suite.path)
    if not path.is_file():
        raise UsageError(f"merge: the suite file {path} is not here; pass --suite PATH (the same file the shards ran)")
    if sha256_file(path) != first.suite.sha256:
        raise UsageError(f"merge: {path} differs from the suite file the shards ran (sha256 {first.suite.sha256[:12]})")
    return load_suite(path)


def merge_runs(dirs: Sequence[Path], suite_path: Path | None = None) -> Results:
    """One results document from the directories of every shard of a run."""
    shards = [(Path(d), load_results(Path(d) / "results.json")) for d in dirs]
    count = check_shards(shards)
    shards.sort(key=lambda s: s[1].shard.index)  # type: ignore[union-attr]
    first = shards[0][1]
    loaded: LoadedSuite | None = None
    stages: list[StageResult] = []
    # a stage, or in a sweep each of its shape sets or batch sizes: in the order the first shard lists them
    keys = list(dict.fromkeys((s.name, s.shape) for _, r in shards for s in r.stages))
    keys.sort(key=lambda k: STAGES.names().index(k[0]))  # stable: a stage's shapes keep their order

    def suite() -> LoadedSuite:  # read once, by the first stage whose merge needs it
        nonlocal loaded
        loaded = loaded or _suite(first, suite_path)
        return loaded

    for name, shape in keys:
        entry = STAGES.get(name)
        ran = [
            (d, s) for d, r in shards for s in r.stages if s.name == name and s.shape == shape and not s.sharded_away
        ]
        errors = [(d, s) for d, s in ran if s.status == "error"]
        if not ran:
            stages.append(entry.result_type()(status="skipped", notes=["no shard ran this stage"], shape=shape))
        elif errors:
            d, s = errors[0]
            stages.append(
                s.model_copy(update={"notes": [f"shard directory {d}: this stage failed to run there", *s.notes]})
            )
        elif entry.merge is not None:
            stages.append(entry.merger()(ran, shape, suite))
        else:
            stages.append(ran[0][1])
    return build_results(
        first.suite,
        stages,
        (),
        started=min(r.started for _, r in shards),
        duration_s=max(r.duration_s for _, r in shards),
        env=first.environment,
        merged=Merged(shards=count, dirs=[str(d) for d, _ in shards]),
    )
