"""Command line: the only module that prints, reads argv and chooses exit codes.

Exit codes: 0 every check passed; 1 a check failed (or a model under test could not run);
2 usage or suite error; 3 missing dependency or hardware; 4 internal error (traceback shown);
130 interrupted (SIGINT), 143 terminated (SIGTERM): results.json keeps what ran, marked incomplete.
Heavy modules are imported inside the commands so `trtverify --help` stays fast.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path
from typing import Any

import click

from trtverify import __version__
from trtverify.cli.options import (
    ARGUMENTS,
    JUNIT,
    OUT,
    PLUGIN,
    QUIET,
    TAKEN,
    Several,
    plugin_map,
    several_hint,
    unclaimed_folder,
)
from trtverify.cli.run import execute, finish, stopped_lines, stops_recorded, suite_out
from trtverify.cli.shardenv import parse_shard
from trtverify.util.errors import EXIT_INTERNAL, EXIT_USAGE, TrtVerifyError, interrupt_in
from trtverify.util.words import count, plural


def _fail(exc: TrtVerifyError) -> None:
    from trtverify.util.errors import SuiteError

    click.echo(str(exc) if isinstance(exc, SuiteError) else f"error: {exc}", err=True)
    hint = several_hint(str(exc)) if exc.exit_code == EXIT_USAGE else ""
    if hint:  # e.g. `--dim batch=8 cand.onnx`: the option took the model, and the error names it
        click.echo(hint.strip(), err=True)
    sys.exit(exc.exit_code)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="trtverify")
def cli() -> None:
    """Accuracy gate and debugger for models deployed with TensorRT.

    \b
    Exit codes: 0 passed, 1 a check failed, 2 usage or suite error,
                3 missing dependency or hardware, 4 internal error,
                130 interrupted (SIGINT), 143 terminated (SIGTERM).
    """


@cli.command()
@click.argument("suite", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--stage", "stages", cls=Several, metavar="NAME", help="Run only these stages (several values, or repeat it)."
)
@OUT
@click.option("--update-reference", is_flag=True, help="Recompute and rewrite the stored reference outputs.")
@click.option(
    "--update-baseline",
    is_flag=True,
    help="Rewrite the stored baselines of the stages run (<reference dir>/<suite>/perf/, e2e/, layerwise/) with this "
    "run's numbers: perf's timings, e2e's metrics, layerwise's worst tensor (docs/baselines.md).",
)
@click.option(
    "--reference-dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Reference store root [default: the suite's reference_dir].",
)
@QUIET
@click.option(
    "--samples",
    "samples_mode",
    type=click.Choice(["suite", "worst"]),
    default="suite",
    show_default=True,
    help="worst: feed the samples a previous e2e run found most changed (for --stage layerwise); writes to "
    "OUT/worst/ (with --from-results and --out: to OUT).",
)
@click.option(
    "--from-results",
    type=click.Path(path_type=Path, dir_okay=False),
    help="results.json of that e2e run [default: OUT/results.json].",
)
@JUNIT
@PLUGIN
@click.option(
    "--shard",
    "shard_text",
    metavar="I/N",
    help=(
        "Run shard I of N (from 1): whole cases of the tensor stages, a dataset slice of e2e (several suites: whole "
        "cases of every suite); combine with `trtverify merge`. auto: I and N from the CI or batch system's "
        "environment (docs/ci.md)."
    ),
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    help="Several suites: at most N at once, each in its own process [default: as many as the cores and the "
    "memory fit].",
)
@click.option("--deal", "deal_text", hidden=True)  # a run of several suites: its cases' shards (cli/zoo.py)
def run(
    suite: tuple[Path, ...],
    stages: tuple[str, ...],
    out_dir: Path | None,
    update_reference: bool,
    update_baseline: bool,
    reference_dir: Path | None,
    quiet: bool,
    samples_mode: str,
    from_results: Path | None,
    junit: Path | None,
    plugins: tuple[str, ...],
    shard_text: str | None,
    jobs: int | None,
    deal_text: str | None,
) -> None:
    """Run SUITE's stages; write results.json and report.html; exit non-zero on failure. Several suites (files,
    or a folder of *.yaml): each into OUT/<name>/ (OUT: --out, else reports/gate), with OUT/index.html,
    one JUnit file and the most severe exit code of all (docs/ci.md)."""
    from trtverify.config.loader import load_suite, with_plugins
    from trtverify.runner import RunOptions, preflight

    shard = parse_shard(shard_text, quiet)
    suites, suite = suite, suite[0]  # several suites, or one (the first)
    if len(suites) > 1 or suite.is_dir():
        from trtverify.cli.supervise import release
        from trtverify.cli.zoo import run_many

        release()
        if samples_mode != "suite" or from_results is not None:
            raise TrtVerifyError("--samples worst and --from-results take one suite, not several")
        options = dict(update_reference=update_reference, update_baseline=update_baseline, stages=stages)
        options.update(reference_dir=reference_dir, plugins=plugin_map(plugins))
        run_many(suites, out_dir or Path("reports") / "gate", jobs, options, shard, junit, quiet)
    with stops_recorded(suite, out_dir, stages, shard, guess_out=samples_mode == "suite") as begun:
        owners = [int(x) for x in deal_text.split(",") if x.strip()] if deal_text else None
        loaded = begun.loaded = with_plugins(load_suite(suite), plugin_map(plugins))
        model_inputs = preflight(loaded)  # every suite error (exit 2) before a folder is made or a line printed
        out = out_dir or suite_out(loaded)
        override, chosen_by = None, None
        if samples_mode == "worst":
            from trtverify.results.io import load_results
            from trtverify.stages.e2e.stage import worst_feeds

            # read the e2e run's results; write beside them, not over them
            source = from_results or out / "results.json"
            if not source.is_file():
                raise TrtVerifyError(
                    f"--samples worst needs a previous run with stage e2e: {source} not found "
                    "(run the e2e stage first, or pass --from-results)"
                )
            if out_dir is None or from_results is None:  # --out names the e2e run's folder: OUT/worst
                out = out / "worst"
            override = worst_feeds(loaded, _worst_positions(load_results(source), source))
            chosen_by = f"--samples worst: the {count(len(override), 'sample')} listed in {source}"
        if shard is not None and out_dir is None:
            out = out / f"shard-{shard.index}-of-{shard.count}"
        if out != out_dir:  # a folder --out did not name: never another suite's results
            chosen = "its out: folder" if loaded.suite.out else "its default folder"
            unclaimed_folder(out, loaded.path, chosen=chosen, hint=f" (or set out: in {loaded.path})")
        begun.out = out
        if override is not None and not quiet:
            click.echo(
                f"samples: the {len(override)} worst {plural('sample', len(override))} listed in {source}", err=True
            )
        options = RunOptions(
            stages=stages,
            shard=shard,
            owners=tuple(owners) if owners is not None else None,
            update_reference=update_reference,
            update_baseline=update_baseline,
            reference_dir=reference_dir,
            samples_override=override,
            chosen_by=chosen_by,
        )
        execute(loaded, out, options, quiet=quiet, junit=junit, model_inputs=model_inputs, begun=begun)


def _worst_positions(previous: Any, source: Path) -> list[int]:
    """The samples a previous e2e run listed as most changed (union over candidates, and over the batch sizes of
    a batch sweep, in order)."""
    runs = [s for s in previous.stages if s.name == "e2e" and s.candidates]
    if not runs:
        raise TrtVerifyError(f"{source}: has no e2e results with worst samples; run the e2e stage first")
    order = list(dict.fromkeys(w.index for e2e in runs for cand in e2e.candidates for w in cand.worst))
    if not order:
        raise TrtVerifyError(f"{source}: the e2e run listed no worst samples")
    return order


@cli.command()
@click.argument("dirs", nargs=-1, required=True, type=click.Path(path_type=Path, file_okay=False, exists=True))
@OUT
@click.option(
    "--suite",
    "suite_path",
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="The suite file the shards ran [default: the path in their results.json].",
)
@JUNIT
@QUIET
def merge(
    dirs: tuple[Path, ...], out_dir: Path | None, suite_path: Path | None, junit: Path | None, quiet: bool
) -> None:
    """Combine the results of every shard of a run (`run --shard I/N`) into one results.json and report;
    each model's e2e accumulators are merged and the metrics computed over all samples. Exits like `run`."""
    from trtverify.results.merge import merge_runs
    from trtverify.util.fsutil import folder_lock

    if (dirs[0] / "index.json").is_file():  # the shards of a run of several suites
        from trtverify.cli.zoo import merge_many

        merge_many(dirs, out_dir or Path("reports") / "gate", junit, quiet)
    results = merge_runs(dirs, suite_path)
    out = out_dir or _merged_out(results, suite_path)
    if out_dir is None:  # never over another suite's results without --out naming the folder
        unclaimed_folder(out, Path(suite_path or results.suite.path), results.suite.sha256)
    with folder_lock(out) as out:
        _write_merged(results, out, quiet, junit)


def _merged_out(results: Any, suite_path: Path | None) -> Path:
    """Where `merge` writes without --out: the suite's own folder (its `out:`, else reports/<name>), as the
    unsharded run would; reports/<name> where the suite file is not here to say."""
    from trtverify.config.loader import load_suite

    try:
        return suite_out(load_suite(suite_path or results.suite.path, check_files=False))
    except (TrtVerifyError, OSError):
        return Path("reports") / results.suite.name


def _write_merged(results: Any, out: Path, quiet: bool, junit: Path | None) -> None:
    from trtverify.report.html import write_report
    from trtverify.results.record import write_results

    write_results(out / "results.json", results)
    write_report(results, out / "report.html")
    finish(results, out, quiet, junit)
    sys.exit(results.exit_code)


@cli.command("parse-log")
@click.argument("log", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option("--json", "as_json", is_flag=True, help="Print everything as JSON.")
@click.option(
    "--against", type=click.Path(path_type=Path, dir_okay=False, exists=True), help="An older build log: what changed."
)
def parse_log(log: Path, as_json: bool, against: Path | None) -> None:
    """Summarise a TensorRT build log: fallbacks, calibration, tactics, FP16 risks."""
    from trtverify.buildlog.diff import diff
    from trtverify.buildlog.parser import parse_file
    from trtverify.report.text import buildlog_summary
    from trtverify.util.fsutil import to_json

    for path in (log, against):
        if path is not None and path.is_file() and path.stat().st_size == 0:  # a capture that failed: not "0 lines"
            raise TrtVerifyError(
                f"{path}: the file is empty: no build log to read (capture one with trtexec ... 2>&1 | tee build.log)"
            )
    parsed = parse_file(log)
    changes = diff(parsed, parse_file(against)) if against else None
    if as_json:
        from trtverify.buildlog.diff import AgainstLog, ParseLogOutput

        old = AgainstLog(log=str(against), **dict(changes)) if changes is not None else None
        click.echo(to_json(ParseLogOutput(**dict(parsed), against=old).dump()), nl=False)
        return
    for line in buildlog_summary(log, parsed, against, changes):
        click.echo(line)


@cli.command()
@click.option(
    "--markdown", is_flag=True, help="The suite reference (every key, type, default, description) as Markdown."
)
@click.option("--results", "of_results", is_flag=True, help="The JSON Schema of results.json instead.")
@click.option(
    "--engine", "of_engine", is_flag=True, help="The JSON Schemas of `engine audit --json` and `engine diff --json`."
)
@click.option("--parse-log", "of_parse_log", is_flag=True, help="The JSON Schema of `parse-log --json`.")
def schema(markdown: bool, of_results: bool, of_engine: bool, of_parse_log: bool) -> None:
    """Print the JSON Schema of suite files (for editor completion), or the suite reference."""
    import json

    if of_parse_log:
        from trtverify.buildlog.diff import ParseLogOutput

        click.echo(json.dumps(ParseLogOutput.model_json_schema(), indent=2))
        return

    if of_engine:
        from trtverify.engine.audit import Audit
        from trtverify.engine.diff import EngineDiff

        schemas = {"audit": Audit.model_json_schema(), "diff": EngineDiff.model_json_schema()}
        click.echo(json.dumps(schemas, indent=2))
        return

    if of_results:
        from trtverify.results.schema import schema_text

        click.echo(schema_text(), nl=False)
        return
    from trtverify.config.reference import markdown as reference
    from trtverify.config.reference import suite_schema

    click.echo(reference() if markdown else json.dumps(suite_schema(), indent=2), nl=not markdown)


@cli.command()
@click.argument("results", type=click.Path(path_type=Path, dir_okay=False, exists=True))
@click.option(
    "--out", type=click.Path(path_type=Path, dir_okay=False), help="Output HTML [default: report.html beside RESULTS]."
)
def report(results: Path, out: Path | None) -> None:
    """Re-render the HTML report from a results.json."""
    from trtverify.report.html import write_report
    from trtverify.results.io import load_results

    target = out or results.with_name("report.html")
    write_report(load_results(results), target)
    click.echo(f"report: {target}")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where SIGINT raises KeyboardInterrupt: a run stops the same way (results.json
    keeps what ran, marked incomplete) and exits 143 (128 + 15) instead of 130."""

    signal_name = "SIGTERM"  # what results.json records (cli/run.py signal_of)


SIGNAL_GRACE_S = 8.0  # from the signal itself: how long unwinding (results.json, the lock) may take at most


def _on_sigterm(signum: int, frame: Any) -> None:
    _arm_watchdog(143, SIGNAL_GRACE_S)
    raise Terminated()


def _on_sigint(signum: int, frame: Any) -> None:
    _arm_watchdog(130, SIGNAL_GRACE_S)
    raise KeyboardInterrupt


def _arm_watchdog(code: int, seconds: float) -> None:
    """End the process with `code` after `seconds`, whatever it is waiting for: a thread join while unwinding (a
    data reader sleeping in a user's hook, a worker waiting on the main thread) may never return, and the
    exception then never reaches main(). The run lock is released and the streams flushed first; results.json
    already holds every stage that ended (it is written after each one)."""
    import os
    import threading

    from trtverify.util.fsutil import release_held_locks

    def hard_exit() -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        release_held_locks()
        os._exit(code)

    timer = threading.Timer(seconds, hard_exit)
    timer.daemon = True
    timer.start()


EXIT_GRACE_S = 3.0  # after Ctrl-C / SIGTERM: what worker threads may take to finish before the process ends anyway


def _stop(code: int) -> None:
    """Exit with `code` after a signal, within EXIT_GRACE_S whatever worker threads are doing: the interpreter
    joins them at exit, and a data reader sleeping in a user's hook (or decoding a huge image) cannot be
    interrupted. results.json and the lock are already done with; the watchdog only ends the wait."""
    _arm_watchdog(code, EXIT_GRACE_S)
    sys.exit(code)


def _stopped(word: str, exc: BaseException | None) -> None:
    """`interrupted`, then what the run kept and how to go on (cli/run.py stopped_lines), where a run had begun."""
    click.echo(word, err=True)
    for line in stopped_lines(exc):
        click.echo(line, err=True)


def main(argv: list[str] | None = None) -> None:
    import signal

    from trtverify.cli import supervise

    argv = list(sys.argv[1:] if argv is None else argv)
    if supervise.wanted(argv):  # the work runs in a child process: a native crash there ends one stage, not the run
        supervise.supervise(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not where a host process ignores it
        signal.signal(signal.SIGINT, _on_sigint)
    TAKEN.clear()
    ARGUMENTS.clear()
    try:
        if supervise.command_of(argv) != "run":  # `run` lets the signals through where it can record a stop
            supervise.release()
        cli.main(args=argv, prog_name="trtverify", standalone_mode=False)
    except TrtVerifyError as exc:
        _fail(exc)
    except click.exceptions.Abort as exc:  # click turns KeyboardInterrupt (SIGINT, and our SIGTERM) into Abort
        if isinstance(exc.__cause__, Terminated):
            _stopped("terminated (SIGTERM)", exc.__cause__)
            _stop(143)
        _stopped("interrupted" if isinstance(exc.__cause__, KeyboardInterrupt) else "aborted", exc.__cause__)
        _stop(130)
    except click.ClickException as exc:
        if isinstance(exc, click.UsageError):
            missing = isinstance(exc, click.MissingParameter) and isinstance(exc.param, click.Argument)
            exc.message += several_hint(exc.format_message(), missing_argument=missing)
        exc.show()
        sys.exit(EXIT_USAGE if exc.exit_code == 2 else exc.exit_code)
    except Terminated as exc:
        _stopped("terminated (SIGTERM)", exc)
        _stop(143)
    except KeyboardInterrupt as exc:
        _stopped("interrupted", exc)
        _stop(130)
    except SystemExit:
        raise
    except Exception as exc:  # a bug in trtverify: show everything (but a Ctrl-C an import turned into ImportError)
        if interrupt_in(exc) is not None:
            _stopped("interrupted", interrupt_in(exc))
            _stop(143 if isinstance(interrupt_in(exc), Terminated) else 130)
        click.echo("internal error (a bug in trtverify; please report it with this traceback):", err=True)
        click.echo(traceback.format_exc(), err=True)
        sys.exit(EXIT_INTERNAL)


def _register() -> None:
    from trtverify.cli.capture import capture
    from trtverify.cli.engine import engine
    from trtverify.cli.init import init
    from trtverify.cli.layerwise import layerwise
    from trtverify.cli.reduce import reduce
    from trtverify.cli.repair import convert, repair
    from trtverify.cli.validate import validate

    cli.add_command(layerwise)
    cli.add_command(init)
    cli.add_command(validate)

    cli.add_command(repair)
    cli.add_command(convert)
    cli.add_command(engine)
    cli.add_command(capture)
    cli.add_command(reduce)


_register()
