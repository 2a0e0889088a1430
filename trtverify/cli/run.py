"""Running a loaded suite for a command (`run`, `layerwise`, `repair`, `merge`): the progress line, the run under
the output folder's lock, and the summary, results and report paths it prints. The command modules import it from
here, so nothing imports the module that registers them (cli/main.py)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from trtverify import __version__
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

    recorder = Recorder(loaded, Path(out), kw.get("shard"))
    run_suite(loaded, Path(out), recorder, **kw)
    assert recorder.written is not None  # the runner tells its sink at least once, whatever happens
    return recorder.written


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
) -> None:
    from trtverify.report.html import write_report
    from trtverify.util.fsutil import folder_lock

    with folder_lock(out):  # before any work: exit 2 if OUT cannot be written or another run writes there
        if not quiet:
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
