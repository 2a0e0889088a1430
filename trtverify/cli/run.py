"""Running a loaded suite for a command (`run`, `layerwise`, `repair`, `merge`): the progress line, the run under
the output folder's lock, and the summary, results and report paths it prints. The command modules import it from
here, so nothing imports the module that registers them (cli/main.py)."""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from trtverify import __version__
from trtverify.util import native
from trtverify.util.errors import TrtVerifyError, interrupt_in
from trtverify.util.words import count


class Progress:
    """One updating line on a terminal; plain stage lines when stderr is not a terminal."""

    def __init__(self, enabled: bool):
        self.tty = enabled and sys.stderr.isatty()
        self.enabled = enabled
        self.last = 0.0
        self.seen: set[tuple[str, str]] = set()

    def __call__(self, stage: str, done: int, total: int, what: str) -> None:
        if not self.enabled:
            return
        if total <= 0:  # a step with no count (perf: one model at one batch size)
            if (stage, what) not in self.seen:
                self.seen.add((stage, what))
                click.echo(f"  {stage}: {what}...", err=True)
            return
        if self.tty:
            now = time.monotonic()
            if done == total or now - self.last > 0.1:
                self.last = now
                width = 24
                fill = int(width * done / max(total, 1))
                sys.stderr.write(
                    f"\r  {stage:<10} {what:<14} [{'#' * fill}{'.' * (width - fill)}] {done}/{total}\033[K"
                )
                if done == total:
                    sys.stderr.write("\n")
                sys.stderr.flush()
        elif (stage, what) not in self.seen:
            self.seen.add((stage, what))
            click.echo(f"  {stage}: {what} on {count(total, 'sample')}...", err=True)


def run_and_record(loaded: Any, out: Path, options: Any = None, **kw: Any) -> Any:
    """Run the suite (`runner.run_suite`: `options` a `runner.RunOptions`, the other keywords its own),
    OUT/results.json and OUT/report.html rewritten after every stage by the recorder it hands each result to;
    returns the results document last written."""
    from trtverify.results.record import Recorder
    from trtverify.runner import RunOptions, run_suite

    options = options if options is not None else RunOptions()
    previous = _previous(Path(out))
    earlier = _earlier(Path(out), previous)
    todo = planned(loaded, options.stages)
    # the earlier run's other stages stay beside this run's, unless this run feeds other samples (--samples worst)
    keep = options.samples_override is None
    recorder = Recorder(loaded, Path(out), options.shard, earlier, previous, _renderer(), todo, keep)
    done = []
    if earlier is not None:  # this run's stages the crashed worker finished, in order (not the kept ones)
        done = [s for s in earlier.stages if s.kept_from is None][: native.resume().results["done"]]
    try:
        run_suite(loaded, Path(out), recorder, options, done=done, **kw)
    except (KeyboardInterrupt, Exception) as exc:  # Ctrl-C, SIGTERM: what was kept, for the message main() prints
        stop = exc if isinstance(exc, KeyboardInterrupt) else interrupt_in(exc)
        if stop is None:
            raise
        written = recorder.stopped(signal_of(stop))
        stop.trtverify_stopped = Stopped(  # type: ignore[attr-defined]
            recorder.path, written, loaded.path, options.shard, tuple(recorder.pending)
        )
        if stop is exc:
            raise
        raise stop from None
    assert recorder.written is not None  # the runner tells its sink at least once, whatever happens
    return recorder.written


def signal_of(exc: BaseException) -> str:
    """SIGTERM for the exception cli/main.py raises on SIGTERM (it says so), else SIGINT."""
    return str(getattr(exc, "signal_name", "SIGINT"))


def planned(loaded: Any, requested: Sequence[str]) -> list[tuple[str, str | None]]:
    """The stages a run of `loaded` with --stage `requested` runs, by name (before the runner plans shapes)."""
    return [(n, None) for n in loaded.suite.stages.configured() if not requested or n in requested]


def _renderer() -> Any:
    from trtverify.report.html import render

    return render


def _previous(out: Path) -> Any:
    """The results.json already in OUT (an earlier run's, or this run's crashed worker's), or None where there is
    none or it cannot be read as results."""
    from trtverify.results.io import load_results

    path = out / "results.json"
    if not path.is_file():
        return None
    try:
        return load_results(path)
    except TrtVerifyError:
        return None


def _earlier(out: Path, previous: Any) -> Any:
    """`previous` where a crashed worker of this run wrote it (cli/supervise.py), else None: a fresh worker keeps
    the stages it holds."""
    written = native.resume().results
    if not written or previous is None or written.get("path") != str((out / "results.json").absolute()):
        return None
    return previous if previous.started == written.get("started") else None


@dataclass(frozen=True)
class Stopped:
    """Where a run stopped by a signal left its results: results.json, what it holds, the suite and shard run."""

    results_path: Path
    results: Any  # the Results last written (every stage: done, kept, or "not run yet"), None if none was
    suite: Path
    shard: Any = None
    pending: tuple[tuple[str, str | None], ...] = ()  # this run's stages not run: (name, shape label)

    def lines(self) -> list[str]:
        """What was kept and how to go on, for the terminal."""
        from trtverify.results.record import NOT_RUN

        again = "run the same command again"
        if self.results is None:
            return [f"nothing was written; {again}"]
        stop = self.results.interrupted
        if stop is not None and stop.earlier_kept:
            return [
                f"{self.results_path} keeps the results of the earlier run (started {self.results.started}), "
                f"untouched but for a record that this run (started {stop.run_started}) stopped before any stage "
                "ended; the report beside it says the same",
                f"to go on: {again}",
            ]
        done, not_run, names, kept = [], [], [], []
        pending = set(self.pending)
        for s in self.results.stages:
            label = f"{s.name} at {s.shape}" if s.shape else s.name
            if (s.status == "skipped" and NOT_RUN in s.notes) or (s.name, s.shape) in pending:
                not_run.append(f"{label} (the earlier run's result kept)" if s.kept_from else label)
                names.append(s.name)
            elif s.kept_from is not None:
                kept.append(label)
            else:
                done.append(f"{label} {s.status}")
        held = [f"done: {', '.join(done)}" if done else "no stage finished"]
        held += [f"not run: {', '.join(not_run)}"] if not_run else []
        held += [f"kept from the earlier run: {', '.join(kept)}"] if kept else []
        out = [f"{self.results_path} keeps what ran, marked incomplete ({'; '.join(held)})"]
        again += " (every stage runs anew, and replaces that results.json)"
        if not (done and not_run):
            return [*out, f"to go on: {again}"]
        shard = f" --shard {self.shard}" if self.shard is not None else ""
        rest = shlex.quote(f"{self.results_path.parent}-rest")
        only = (
            f"trtverify run {shlex.quote(str(self.suite))} --stage {' '.join(dict.fromkeys(names))}{shard} --out {rest}"
        )
        return [*out, f"to go on: {again}; or only what did not run, into another folder: {only}"]


@dataclass
class Begun:
    """How far `run` of one suite got: the suite loaded, the folder it writes to (None: not known yet)."""

    loaded: Any = None
    out: Path | None = None
    recorded: bool = False  # the run's recorder wrote its results: a later signal changes nothing there


@contextmanager
def stops_recorded(
    suite: Path, out_dir: Path | None, stages: Sequence[str], shard: Any, guess_out: bool = True
) -> Iterator[Begun]:
    """Around `run` of one suite from its first step: a Ctrl-C or SIGTERM before its recorder began (while the suite
    is read, the models checked, the lock taken, the libraries imported) still leaves a results.json that says so
    (`Recorder.stopped`): the earlier run's, untouched but for that record, or one listing every stage as not run.
    Not where the folder holds another suite file's results that --out did not name, or another run writes there,
    nor before the folder is known where it is not the suite's (`guess_out` False: --samples worst)."""
    from trtverify.cli.supervise import release

    begun = Begun()
    try:
        release()  # a signal that came since the worker started is raised here
        yield begun
    except Exception as exc:
        stop = interrupt_in(exc)  # Ctrl-C while a C extension was imported (onnx): ImportError from it
        if stop is None:
            raise
        _record_stop(stop, begun, suite, out_dir, stages, shard, guess_out)
        raise stop from None
    except KeyboardInterrupt as exc:
        _record_stop(exc, begun, suite, out_dir, stages, shard, guess_out)
        raise


def _record_stop(
    exc: KeyboardInterrupt,
    begun: Begun,
    suite: Path,
    out_dir: Path | None,
    stages: Sequence[str],
    shard: Any,
    guess_out: bool,
) -> None:
    if getattr(exc, "trtverify_stopped", None) is None and not begun.recorded and (guess_out or begun.out):
        try:
            exc.trtverify_stopped = _stopped_early(begun, suite, out_dir, stages, shard, signal_of(exc))  # type: ignore[attr-defined]
        except (TrtVerifyError, OSError):
            pass  # a suite that does not load, a folder that cannot be written or is in use: nothing to say


def _stopped_early(
    begun: Begun, suite: Path, out_dir: Path | None, stages: Sequence[str], shard: Any, signal: str
) -> Stopped | None:
    from trtverify.config.loader import load_suite
    from trtverify.results.io import foreign_results
    from trtverify.results.record import Recorder
    from trtverify.util.fsutil import folder_lock

    loaded = begun.loaded or load_suite(suite, check_files=False)
    out = begun.out
    if out is None:
        out = out_dir or suite_out(loaded)
        if shard is not None and out_dir is None:
            out = out / f"shard-{shard.index}-of-{shard.count}"
    if out != out_dir and foreign_results(out, loaded.path) is not None:
        return None
    with folder_lock(out):
        todo = planned(loaded, stages)
        recorder = Recorder(loaded, out, shard, previous=_previous(out), render=_renderer(), planned=todo)
        return Stopped(recorder.path, recorder.stopped(signal), loaded.path, shard, tuple(todo))


def suite_out(loaded: Any) -> Path:
    """Where a run of the suite writes when no --out is given: its `out:` (shown relative to the current folder
    where it is below it), else reports/<name>."""
    import os

    if loaded.suite.out is None:
        return Path("reports") / loaded.suite.name
    rel = Path(os.path.relpath(loaded.suite.out))
    return loaded.suite.out if rel.parts[:1] == ("..",) else rel


def stopped_lines(exc: BaseException | None) -> list[str]:
    """For a run stopped by Ctrl-C or SIGTERM: the results.json kept, the stages done and not run, how to go on;
    [] where the signal came before a run began."""
    stopped = getattr(exc, "trtverify_stopped", None)
    return stopped.lines() if isinstance(stopped, Stopped) else []


def execute(
    loaded: Any,
    out: Path,
    options: Any,
    *,
    quiet: bool,
    junit: Path | None = None,
    model_inputs: Any = None,
    begun: Begun | None = None,
) -> None:
    """Run `loaded` into `out` under its lock, as `options` (a `runner.RunOptions`) asks; `model_inputs`: what
    `runner.preflight` gave, where the command ran it already; `begun`: told when the run's results are written
    (`stops_recorded`)."""
    from trtverify.util.fsutil import folder_lock

    with folder_lock(out):  # before any work: exit 2 if OUT cannot be written or another run writes there
        if not quiet and native.resume().crashes:  # a fresh worker after a native crash (cli/supervise.py)
            click.echo(f"trtverify {__version__}: suite '{loaded.suite.name}', going on after the crash", err=True)
        elif not quiet:
            click.echo(f"trtverify {__version__}: suite '{loaded.suite.name}' ({loaded.path})", err=True)
        results = run_and_record(loaded, out, options, progress=Progress(not quiet), model_inputs=model_inputs)
        if begun is not None:
            begun.recorded = True
        finish(results, out, quiet, junit)
        for stage in results.stages:
            if stage.error is not None and stage.error.traceback:
                click.echo(f"\ninternal error in stage {stage.name}:\n{stage.error.traceback}", err=True)
        sys.exit(results.exit_code)


def finish(results: Any, out: Path, quiet: bool, junit: Path | None) -> None:
    from trtverify.report.text import run_summary

    for line in run_summary(results, quiet):
        click.echo(line)
    if not quiet:  # -q: the verdict line only; the paths are in results.json
        click.echo(f"results: {out / 'results.json'}\nreport:  {out / 'report.html'}", err=True)
    if junit is not None:
        from trtverify.report.junit import write_junit

        write_junit(results, junit)
        if not quiet:
            click.echo(f"junit:   {junit}", err=True)
