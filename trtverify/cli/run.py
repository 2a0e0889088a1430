"""Running a loaded suite for a command (`run`, `layerwise`, `repair`, `merge`): the progress line, the run under
the output folder's lock, and the summary, results and report paths it prints. The command modules import it from
here, so nothing imports the module that registers them (cli/main.py)."""

from __future__ import annotations

import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from trtverify import __version__
from trtverify.util import native
from trtverify.util.errors import TrtVerifyError
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


def run_and_record(loaded: Any, out: Path, **kw: Any) -> Any:
    """Run the suite (`runner.run_suite`, same arguments), OUT/results.json rewritten after every stage by the
    recorder it hands each result to; returns the results document last written."""
    from trtverify.results.record import Recorder
    from trtverify.runner import run_suite

    earlier = _earlier(Path(out))
    recorder = Recorder(loaded, Path(out), kw.get("shard"), earlier)
    done = earlier.stages[: native.resume().results["done"]] if earlier is not None else []  # type: ignore[index]
    try:
        run_suite(loaded, Path(out), recorder, done=done, **kw)
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM: what was kept, for the message main() prints
        exc.trtverify_stopped = Stopped(recorder.path, recorder.written, loaded.path, kw.get("shard"))  # type: ignore[attr-defined]
        raise
    assert recorder.written is not None  # the runner tells its sink at least once, whatever happens
    return recorder.written


def _earlier(out: Path) -> Any:
    """The results.json a crashed worker of this run wrote into OUT (cli/supervise.py), or None: a fresh worker
    keeps the stages it holds."""
    from trtverify.results.io import load_results

    written = native.resume().results
    path = out / "results.json"
    if not written or written.get("path") != str(path.absolute()) or not path.is_file():
        return None
    try:
        earlier = load_results(path)
    except TrtVerifyError:
        return None
    return earlier if earlier.started == written.get("started") else None


@dataclass(frozen=True)
class Stopped:
    """Where a run stopped by a signal left its results: results.json, what it holds, the suite and shard run."""

    results_path: Path
    results: Any  # the Results last written (every stage: done, or "not run yet"), None if none was
    suite: Path
    shard: Any = None

    def lines(self) -> list[str]:
        """What was kept and how to go on, for the terminal."""
        from trtverify.results.record import NOT_RUN

        if self.results is None:
            return ["nothing was written; run the same command again"]
        done, not_run, names = [], [], []
        for s in self.results.stages:
            label = f"{s.name} at {s.shape}" if s.shape else s.name
            if s.status == "skipped" and NOT_RUN in s.notes:
                not_run.append(label)
                names.append(s.name)
            else:
                done.append(f"{label} {s.status}")
        held = [f"done: {', '.join(done)}" if done else "no stage finished"]
        held += [f"not run: {', '.join(not_run)}"] if not_run else []
        out = [f"{self.results_path} keeps what ran, marked incomplete ({'; '.join(held)})"]
        again = "run the same command again (every stage runs anew, and replaces that results.json)"
        if not (done and not_run):
            return [*out, f"to go on: {again}"]
        shard = f" --shard {self.shard}" if self.shard is not None else ""
        rest = shlex.quote(f"{self.results_path.parent}-rest")
        only = (
            f"trtverify run {shlex.quote(str(self.suite))} --stage {' '.join(dict.fromkeys(names))}{shard} --out {rest}"
        )
        return [*out, f"to go on: {again}; or only what did not run, into another folder: {only}"]


def stopped_lines(exc: BaseException | None) -> list[str]:
    """For a run stopped by Ctrl-C or SIGTERM: the results.json kept, the stages done and not run, how to go on;
    [] where the signal came before a run began."""
    stopped = getattr(exc, "trtverify_stopped", None)
    return stopped.lines() if isinstance(stopped, Stopped) else []


def execute(
    loaded: Any,
    out: Path,
    stages: tuple[str, ...],
    update_reference: bool,
    reference_dir: Path | None,
    quiet: bool,
    samples_override: Any = None,
    junit: Path | None = None,
    shard: Any = None,
    update_baseline: bool = False,
    chosen_by: str | None = None,
    model_inputs: Any = None,
    owners: Any = None,
) -> None:
    """Run `loaded` into `out` under its lock; `model_inputs`: what `runner.preflight` gave, where the command ran it
    already."""
    from trtverify.report.html import write_report
    from trtverify.util.fsutil import folder_lock

    with folder_lock(out):  # before any work: exit 2 if OUT cannot be written or another run writes there
        if not quiet and native.resume().crashes:  # a fresh worker after a native crash (cli/supervise.py)
            click.echo(f"trtverify {__version__}: suite '{loaded.suite.name}', going on after the crash", err=True)
        elif not quiet:
            click.echo(f"trtverify {__version__}: suite '{loaded.suite.name}' ({loaded.path})", err=True)
        results = run_and_record(
            loaded,
            out,
            stages=stages,
            shard=shard,
            update_reference=update_reference,
            update_baseline=update_baseline,
            reference_dir=reference_dir,
            progress=Progress(not quiet),
            samples_override=samples_override,
            chosen_by=chosen_by,
            model_inputs=model_inputs,
            owners=owners,
        )
        write_report(results, out / "report.html")
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
