"""`--shard auto`: the shard index and count from the environment of the engine the job runs in.

| engine | index | count |
|---|---|---|
| GitLab CI `parallel:` | `CI_NODE_INDEX` (from 1) | `CI_NODE_TOTAL` |
| Kubernetes Indexed Job | `JOB_COMPLETION_INDEX` (from 0) | `TRTVERIFY_SHARDS` (set once in the manifest) |
| Slurm job array | (`SLURM_ARRAY_TASK_ID` - `_MIN`) / `_STEP` | `SLURM_ARRAY_TASK_COUNT` |
| Buildkite `parallelism:` | `BUILDKITE_PARALLEL_JOB` (from 0) | `BUILDKITE_PARALLEL_JOB_COUNT` |
| CircleCI `parallelism:` | `CIRCLE_NODE_INDEX` (from 0) | `CIRCLE_NODE_TOTAL` |

An engine counts as present where its index variable is set. None present, a present one incomplete or out of
range, or two that disagree: a usage error (exit 2) naming the variables read. GitHub Actions has no such variables:
a matrix passes `--shard ${{ matrix.shard }}/N` (docs/ci.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import click

from trtverify.util.errors import UsageError


@dataclass(frozen=True)
class Engine:
    name: str
    index: str  # the variable holding the index
    count: str  # the variable holding the count
    base: int  # what the first index is (0 or 1)


ENGINES = (
    Engine("GitLab CI parallel", "CI_NODE_INDEX", "CI_NODE_TOTAL", 1),
    Engine("Kubernetes Indexed Job", "JOB_COMPLETION_INDEX", "TRTVERIFY_SHARDS", 0),
    Engine("Slurm job array", "SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", 0),
    Engine("Buildkite parallelism", "BUILDKITE_PARALLEL_JOB", "BUILDKITE_PARALLEL_JOB_COUNT", 0),
    Engine("CircleCI parallelism", "CIRCLE_NODE_INDEX", "CIRCLE_NODE_TOTAL", 0),
)
SLURM_MIN, SLURM_STEP = "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_STEP"


def _int(env: Mapping[str, str], var: str, engine: Engine) -> int:
    text = env.get(var)
    if text is None or not text.strip():
        raise UsageError(f"--shard auto: {engine.name}: {engine.index} is set but {var} is not; set {var}")
    try:
        return int(text.strip())
    except ValueError:
        raise UsageError(f"--shard auto: {engine.name}: {var}={text!r} is not a whole number") from None


def _read(env: Mapping[str, str], e: Engine) -> tuple[int, int, str]:
    """(index from 1, count, what was read) for one present engine."""
    raw, count = _int(env, e.index, e), _int(env, e.count, e)
    read = [f"{e.index}={raw}", f"{e.count}={count}"]
    index = raw - e.base + 1
    if e.index == "SLURM_ARRAY_TASK_ID":
        low = _int(env, SLURM_MIN, e)
        step = _int(env, SLURM_STEP, e) if env.get(SLURM_STEP, "").strip() else 1
        read += [f"{SLURM_MIN}={low}"] + ([f"{SLURM_STEP}={step}"] if step != 1 else [])
        if step < 1 or (raw - low) % step:
            raise UsageError(f"--shard auto: {e.name}: {', '.join(read)}: the task ids are not a range with a step")
        index = (raw - low) // step + 1
    what = f"{e.name} ({', '.join(read)})"
    if count < 1 or not 1 <= index <= count:
        raise UsageError(f"--shard auto: {what} gives shard {index} of {count}, outside 1..{count}")
    return index, count, what


def shard_from_env(env: Mapping[str, str]) -> tuple[int, int, str]:
    """(index from 1, count, the engine and variables it was read from)."""
    found = [_read(env, e) for e in ENGINES if env.get(e.index, "").strip()]
    if not found:
        names = ", ".join(f"{e.index}/{e.count}" for e in ENGINES)
        raise UsageError(
            f"--shard auto: no shard index in the environment (read {names}, {SLURM_MIN}); give --shard I/N "
            "(on GitHub Actions: a matrix, --shard ${{ matrix.shard }}/N)"
        )
    first = found[0]
    for other in found[1:]:
        if other[:2] != first[:2]:
            raise UsageError(
                f"--shard auto: {first[2]} says shard {first[0]}/{first[1]} but {other[2]} says "
                f"{other[0]}/{other[1]}; give --shard I/N"
            )
    return first


def parse_shard(text: str | None, quiet: bool) -> Any:
    """--shard I/N, or auto: from the environment; None without --shard."""
    from trtverify.stages.base import Shard

    if text is None or text.strip() != "auto":
        return Shard.parse(text) if text is not None else None
    index, n, source = shard_from_env(os.environ)
    if not quiet:
        click.echo(f"--shard auto: shard {index}/{n} from {source}", err=True)
    return Shard(index=index, count=n)
