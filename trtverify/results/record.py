"""Build results.json (the one place its envelope is made) and write it as a run goes: `Recorder` is the sink
the runner hands each stage result to (`runner.run_suite`)."""

from __future__ import annotations

import datetime as _dt
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from trtverify import __version__
from trtverify.config.loader import LoadedSuite
from trtverify.config.registry import STAGES
from trtverify.results.models import Environment, Interruption, Merged, Results, SuiteInfo, all_passed
from trtverify.stages.base import Shard, StageResult, exit_code_for
from trtverify.util import native
from trtverify.util.environment import environment
from trtverify.util.fsutil import atomic_write, atomic_write_json, atomic_write_text, sha256_file

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
    kept: Sequence[StageResult] = (),
) -> Results:
    """The results document; `pending` stages ((name, shape label), the label None outside a sweep) are listed
    as not run, and the run as incomplete (so is an `interrupted` one). `kept`: an earlier run's results
    (`kept_from` set), each standing in for the pending stage of its name and shape, or listed beside the
    stages run where this run does not run that stage; every stage in the order of the registry."""
    keep = {(s.name, s.shape): s for s in kept}
    for s in stages:  # replaced by this run's
        keep.pop((s.name, s.shape), None)
    waiting = [
        keep.pop((n, shape), None) or STAGES.get(n).result_type()(status="skipped", notes=[NOT_RUN], shape=shape)
        for n, shape in pending
    ]
    order = STAGES.names()
    stages = sorted([*stages, *waiting, *keep.values()], key=lambda s: order.index(s.name))  # stable
    complete = not pending and not interrupted
    return Results(
        trtverify_version=__version__,
        suite=suite,
        started=started,
        duration_s=duration_s,
        complete=complete,
        passed=all_passed(stages, complete),
        exit_code=exit_code_for(stages) if complete else None,
        stages=stages,
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
    """Rewrites DIR/results.json (and the report rendered from it, beside it) after every stage of a run. An
    earlier run's results.json there (`previous`) stays as it is until this run finishes a stage; from then on its
    stage results stand in for the stages this run does not run (other stages than `--stage` chose) or has not run
    yet, marked `kept_from`, where it is of the same suite file content and shard."""

    def __init__(
        self,
        loaded: LoadedSuite,
        out_dir: Path,
        shard: Shard | None = None,
        earlier: Results | None = None,
        previous: Results | None = None,
        render: Callable[[Results], str] | None = None,
        planned: Sequence[tuple[str, str | None]] = (),
        keep: bool = True,
    ):
        """`earlier`: the results.json of this run's worker that crashed (cli/supervise.py): its start time and
        duration go on. `render`: the report's HTML of a results document, written to DIR/report.html with
        each results.json. `planned`: the stages this run is to run, listed as not run where it is stopped
        before the runner names them. `keep` False: no stage result of `previous` stands in for one of this run
        (a run on other samples than the suite's, `--samples worst`)."""
        self.path = Path(out_dir) / "results.json"
        self.report = self.path.with_name("report.html")
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
        self.previous = previous
        self.resumed = earlier is not None  # `previous` is this run's own, written by a worker that crashed
        self.render = render
        self.kept = self._keepable(previous) if keep else []
        self.done: list[StageResult] = []  # this run's stage results so far
        self.pending: list[tuple[str, str | None]] = list(planned)
        self.written: Results | None = None  # the document last written

    def _keepable(self, previous: Results | None) -> list[StageResult]:
        """The earlier run's finished stage results, marked kept, where it ran this suite's content and shard."""
        if previous is None or previous.suite.sha256 != self.suite.sha256 or previous.merged is not None:
            return []
        if (previous.shard is None) != (self.shard is None) or (previous.shard and previous.shard != self.shard):
            return []
        out = []
        for s in previous.stages:
            if s.status == "skipped" and NOT_RUN in s.notes:
                continue
            if s.kept_from is None and self.resumed:  # this run's own (a crashed worker's): `done` holds them
                continue
            out.append(s if s.kept_from is not None else s.model_copy(update={"kept_from": previous.started}))
        return out

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
            kept=self.kept,
        )

    def __call__(
        self, stages: Sequence[StageResult], pending: Sequence[tuple[str, str | None]], interrupted: bool = False
    ) -> None:
        """The run's results so far (a sink of `runner.run_suite`): rewrites results.json and the report.
        `interrupted`: the last stage holds what it did before Ctrl-C or SIGTERM, so the run is incomplete even with
        nothing pending. While no stage of this run has ended, an earlier run's results.json is left as it is."""
        self.done, self.pending = list(stages), list(pending)
        if not stages and self.previous is not None:
            return
        self._write(self.results(stages, pending, interrupted))
        # what a fresh worker keeps if this process dies of a signal later (cli/supervise.py)
        native.note("results", {"path": str(self.path.absolute()), "started": self.started, "done": len(stages)})

    def stopped(self, signal: str) -> Results:
        """After Ctrl-C or SIGTERM: results.json (and the report) say the run was stopped, and when. Where this run
        finished no stage, an earlier run's results stay, with that record added; else this run's results so far."""
        record = Interruption(
            run_started=self.started,
            stopped=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            signal="SIGTERM" if signal == "SIGTERM" else "SIGINT",
            stages_done=len(self.done),
            earlier_kept=not self.done and self.previous is not None,
        )
        if record.earlier_kept:
            assert self.previous is not None
            base = self.previous
        else:
            base = self.results(self.done, self.pending, interrupted=True)
        self._write(base.model_copy(update={"interrupted": record}))
        assert self.written is not None
        return self.written

    def _write(self, results: Results) -> None:
        """The report rendered from `results`, then results.json: whoever reads a results.json finds its report
        beside it (a kill between the two renames leaves the report one write ahead: `trtverify report` redoes
        it from results.json)."""
        if self.render is not None:
            atomic_write_text(self.report, self.render(results))
        write_results(self.path, results)
        self.written = results
