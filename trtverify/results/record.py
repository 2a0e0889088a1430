"""Build results.json (the one place its envelope is made) and write it as a run goes."""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trtverify import __version__
from trtverify.config.loader import LoadedSuite
from trtverify.config.registry import STAGES
from trtverify.environment import environment
from trtverify.fsutil import atomic_write_json, sha256_file
from trtverify.results.models import Environment, Merged, Results, SuiteInfo, all_passed
from trtverify.runner import StagePlan, exit_code_for, make_plan, run_stages
from trtverify.stages.base import Progress, Shard, StageResult, no_progress

NOT_RUN = "not run yet (interrupted?)"


def build_results(
    suite: SuiteInfo,
    stages: Sequence[StageResult],
    pending: Sequence[str],
    *,
    started: str,
    duration_s: float,
    env: Environment,
    shard: Shard | None = None,
    merged: Merged | None = None,
) -> Results:
    """The results document; `pending` stages are listed as not run, and the run as incomplete."""
    waiting = [STAGES.get(n).result_type()(status="skipped", notes=[NOT_RUN]) for n in pending]
    complete = not pending
    return Results(
        trtverify_version=__version__,
        suite=suite,
        started=started,
        duration_s=duration_s,
        complete=complete,
        passed=all_passed(list(stages), complete),
        exit_code=exit_code_for(stages) if complete else None,
        stages=[*stages, *waiting],
        environment=env,
        shard=shard,
        merged=merged,
    )


def write_results(path: Path, results: Results) -> None:
    """Atomically: a crash leaves the previous file or this one, never a partial file."""
    atomic_write_json(path, results.dump())


class Recorder:
    """Rewrites DIR/results.json after every stage of a run."""

    def __init__(self, loaded: LoadedSuite, out_dir: Path, shard: Shard | None = None):
        self.path = Path(out_dir) / "results.json"
        self.suite = SuiteInfo(
            name=loaded.suite.name,
            path=str(loaded.path),
            sha256=sha256_file(loaded.path),
            description=loaded.suite.description,
        )
        self.shard = shard
        self.env = Environment(**environment())
        self.started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.t0 = time.perf_counter()
        self.written: Results | None = None  # the document last written

    def results(self, stages: Sequence[StageResult], pending: Sequence[str] = ()) -> Results:
        return build_results(
            self.suite,
            stages,
            pending,
            started=self.started,
            duration_s=time.perf_counter() - self.t0,
            env=self.env,
            shard=self.shard,
        )

    def update(self, stages: Sequence[StageResult], pending: Sequence[str]) -> None:
        self.written = self.results(stages, pending)
        write_results(self.path, self.written)


def run_and_record(
    loaded: LoadedSuite,
    out_dir: Path,
    *,
    stages: Sequence[str] = (),
    shard: Shard | None = None,
    plans: Sequence[StagePlan] | None = None,
    progress: Progress = no_progress,
    **kw: Any,
) -> Results:
    """Run the suite (or the shard's part of it), writing OUT/results.json after every stage."""
    plans = list(plans) if plans is not None else make_plan(loaded, stages, shard)
    out_dir = Path(out_dir)
    recorder = Recorder(loaded, out_dir, shard)
    try:
        done = run_stages(loaded, plans, out_dir=out_dir, progress=progress, on_stage=recorder.update, **kw)
    except KeyboardInterrupt:  # SIGINT, and SIGTERM (the CLI raises a KeyboardInterrupt for it too)
        if recorder.written is None:  # stopped before the first stage ended: say so, listing every stage as not run
            recorder.update([], [p.name for p in plans])
        raise  # after a stage, on_stage already wrote what ran, marked incomplete
    if recorder.written is None:  # no stage ran; otherwise on_stage wrote the whole run after the last stage
        recorder.update(done, [])
    assert recorder.written is not None
    return recorder.written
