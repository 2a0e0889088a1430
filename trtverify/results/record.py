"""Build results.json (the one place its envelope is made) and write it as a run goes: `Recorder` is the sink
the runner hands each stage result to (`runner.run_suite`)."""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Sequence
from pathlib import Path

from trtverify import __version__
from trtverify.config.loader import LoadedSuite
from trtverify.config.registry import STAGES
from trtverify.results.models import Environment, Merged, Results, SuiteInfo, all_passed
from trtverify.stages.base import Shard, StageResult, exit_code_for
from trtverify.util import native
from trtverify.util.environment import environment
from trtverify.util.fsutil import atomic_write, atomic_write_json, sha256_file

NOT_RUN = "not run yet (interrupted?)"


def build_results(
    suite: SuiteInfo,
    stages: Sequence[StageResult],
    pending: Sequence[tuple[str, str | None]],
    *,
    started: str,
    duration_s: float,
    env: Environment,
    shard: Shard | None = None,
    merged: Merged | None = None,
    interrupted: bool = False,
) -> Results:
    """The results document; `pending` stages ((name, shape label), the label None outside a sweep) are listed
    as not run, and the run as incomplete (so is an `interrupted` one)."""
    waiting = [STAGES.get(n).result_type()(status="skipped", notes=[NOT_RUN], shape=shape) for n, shape in pending]
    complete = not pending and not interrupted
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
    """Atomically: a crash leaves the previous file or this one, never a partial file. The files the stages carry
    (an e2e run's per-class data) go beside it first, so results.json never refers to a file not yet there."""
    for stage in results.stages:
        for name, data in stage.files.items():
            target = path.parent / name
            if not (target.is_file() and target.stat().st_size == len(data) and target.read_bytes() == data):
                atomic_write(target, lambda fh, data=data: fh.write(data))
    atomic_write_json(path, results.dump())


class Recorder:
    """Rewrites DIR/results.json after every stage of a run."""

    def __init__(self, loaded: LoadedSuite, out_dir: Path, shard: Shard | None = None, earlier: Results | None = None):
        """`earlier`: the results.json of this run's worker that crashed (cli/supervise.py): its start time and
        duration go on."""
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
        if earlier is not None:
            self.started = earlier.started
            self.t0 -= earlier.duration_s
        self.written: Results | None = None  # the document last written

    def results(
        self, stages: Sequence[StageResult], pending: Sequence[tuple[str, str | None]] = (), interrupted: bool = False
    ) -> Results:
        return build_results(
            self.suite,
            stages,
            pending,
            interrupted=interrupted,
            started=self.started,
            duration_s=time.perf_counter() - self.t0,
            env=self.env,
            shard=self.shard,
        )

    def __call__(
        self, stages: Sequence[StageResult], pending: Sequence[tuple[str, str | None]], interrupted: bool = False
    ) -> None:
        """The run's results so far (a sink of `runner.run_suite`): rewrites results.json. `interrupted`: the last
        stage holds what it did before Ctrl-C or SIGTERM, so the run is incomplete even with nothing pending."""
        self.written = self.results(stages, pending, interrupted)
        write_results(self.path, self.written)
        # what a fresh worker keeps if this process dies of a signal later (cli/supervise.py)
        native.note("results", {"path": str(self.path.absolute()), "started": self.started, "done": len(stages)})
