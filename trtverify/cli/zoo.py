"""`trtverify run A.yaml B.yaml ...` and `trtverify run FOLDER`: several suites, one gate.

Every suite file is validated first (every problem of every file printed, exit 2, nothing run). Each suite then
runs in a process of its own (`trtverify run SUITE --out OUT/<name>`, itself supervised: cli/supervise.py), at most
`-j` at a time and only as many as the memory they need fits (`need_mb`); a suite whose process dies (a native
crash it could not contain, the out-of-memory killer) is that suite's error (exit 4), the others go on. OUT holds
each suite's folder, index.json, index.html and (with --junit) one JUnit file; the exit code is the most severe
of the suites' (results/index.py). With `--shard I/N` the whole cases of every suite are dealt over the shards
(runner.deal) and `merge` takes the shards' OUT folders (`merge_zoo`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from trtverify import __version__
from trtverify.util.errors import EXIT_INTERNAL, EXIT_USAGE, SuiteError, TrtVerifyError, UsageError
from trtverify.util.words import count as counted

SUFFIXES = (".yaml", ".yml")
BASE_MB = 500.0  # a suite's process before its models: the interpreter, numpy, ONNX Runtime
LOG_NAME = "run.log"  # each suite's own output, in its folder


def suite_files(paths: tuple[Path, ...]) -> list[Path]:
    """The suite files named: files as given, folders as every *.yaml / *.yml file in them (not in subfolders,
    not hidden), sorted by name. A YAML file in a folder that is not a valid suite is an error, not skipped: a
    suite silently left out would let a release through."""
    out: list[Path] = []
    problems = []
    for p in paths:
        if p.is_dir():
            found = sorted(
                f for f in p.iterdir() if f.suffix in SUFFIXES and f.is_file() and not f.name.startswith(".")
            )
            if not found:
                problems.append(f"{p}: no suite files (*.yaml, *.yml) in this folder")
            out += found
        elif p.exists():
            out.append(p)
        else:
            problems.append(f"{p}: no such suite file or folder")
    seen: dict[Path, Path] = {}
    for p in out:
        if p.resolve() in seen:
            problems.append(f"{p}: given twice (also as {seen[p.resolve()]})")
        seen[p.resolve()] = p
    if problems:  # every one at once, as for the suites' contents
        raise UsageError("\n".join(problems))
    return out


@dataclass
class Entry:
    """One suite of the run."""

    path: Path
    loaded: Any
    stages: tuple[str, ...]  # the --stage names it has (empty: all of them)
    need_mb: float
    owners: list[int] | None = None  # --shard: the shard of each of its cases (runner.deal)
    code: int | None = None
    error: str | None = None
    seconds: float = 0.0
    proc: Any = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return str(self.loaded.suite.name or self.path.stem)


def need_mb(loaded: Any) -> float:
    """The memory a suite's process needs, roughly: BASE_MB, three times its model files (a model in memory, its
    session, a converted copy) and, where it runs layerwise, the layerwise stage's memory_budget_mb."""
    suite = loaded.suite
    paths = [Path(suite.models.reference), *(Path(c.path) for c in suite.models.candidates.values() if c.path)]
    size = sum(p.stat().st_size for p in paths if p.is_file()) / 2**20
    layerwise = suite.stages.layerwise
    return BASE_MB + 3 * size + (layerwise.memory_budget_mb if layerwise is not None else 0.0)


def available_mb() -> float:
    """Memory free for new processes: MemAvailable, or the cgroup's limit less its use where that is lower."""
    free = float("inf")
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) / 1024
    except OSError:
        pass
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit.isdigit():
            free = min(free, (int(limit) - used) / 2**20)
    except (OSError, ValueError):
        pass
    return free if free != float("inf") else 8192.0


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def validate(files: list[Path], plugins: dict[str, str], stages: tuple[str, ...]) -> list[Entry]:
    """Every suite loaded and checked (runner.preflight) before anything runs; every problem of every file
    printed, then exit 2."""
    from trtverify.config.loader import load_suite, with_plugins
    from trtverify.config.registry import STAGES
    from trtverify.runner import preflight

    for name in stages:
        if name not in STAGES:
            raise UsageError(f"--stage {name}: no such stage (stages: {', '.join(STAGES)})")
    entries, problems = [], []
    for path in files:
        try:
            loaded = with_plugins(load_suite(path), plugins)
            preflight(loaded)
        except SuiteError as exc:
            problems.append(str(exc))
            continue
        except TrtVerifyError as exc:
            problems.append(f"{path}: {exc}")
            continue
        mine = tuple(s for s in stages if s in loaded.suite.stages.configured())
        if stages and not mine:  # none of the stages asked for: nothing of this suite to run
            click.echo(f"{path}: configures none of --stage {' '.join(stages)}: not run", err=True)
            continue
        entries.append(Entry(path, loaded, mine, need_mb(loaded)))
    by_name: dict[str, Entry] = {}
    for e in entries:
        if e.name in by_name:
            problems.append(
                f"{e.path}: name: '{e.name}' is also the name of {by_name[e.name].path}; each suite of a run writes "
                f"into OUT/<name>: give one of them another name"
            )
        by_name.setdefault(e.name, e)
    if not entries and not problems:
        problems.append(f"--stage {' '.join(stages)}: configured in none of the {len(files)} suites")
    if problems:
        for p in problems:
            click.echo(p, err=True)
        bad = len({p.split(":", 1)[0] for p in problems})
        click.echo(f"problems in {bad} of {len(files)} suite files; nothing was run", err=True)
        sys.exit(EXIT_USAGE)
    return entries


def child_argv(e: Entry, out: Path, options: dict[str, Any], shard: Any) -> list[str]:
    argv = [sys.executable, "-m", "trtverify", "run", str(e.path), "--out", str(out / e.name)]
    if e.stages:
        argv += ["--stage", *e.stages]
    if options.get("update_reference"):
        argv.append("--update-reference")
    if options.get("update_baseline"):
        argv.append("--update-baseline")
    if options.get("reference_dir") is not None:
        argv += ["--reference-dir", str(options["reference_dir"])]
    for op, spec in (options.get("plugins") or {}).items():
        argv += ["--plugin", f"{op}={spec}"]
    if shard is not None:
        argv += ["--shard", str(shard), "--deal", ",".join(map(str, e.owners or []))]
    return argv


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        click.echo(text, err=True)


def run_entries(entries: list[Entry], out: Path, jobs: int, options: dict[str, Any], shard: Any, quiet: bool) -> None:
    """Run every suite in its own process, at most `jobs` at once and as many as fit in memory (one always runs);
    each entry gets its exit code, its time and, where its process died, the error. Ctrl-C or SIGTERM stops the
    running suites (each keeps what ran) and is raised again."""
    pending, running = list(entries), []
    total, started, ended = len(entries), 0, 0
    budget = available_mb()
    for e in [e for e in pending if shard is not None and e.owners is not None and shard.index not in e.owners]:
        pending.remove(e)  # every case of it runs in another shard: its results.json, here, without a process
        started += 1
        ended += 1
        _elsewhere(e, out / e.name, shard, options)
        _say(quiet, f"[{ended}/{total} done] {e.name}: every case runs in another shard (exit {e.code})")
    try:
        while pending or running:
            while pending and len(running) < jobs:
                used = sum(e.need_mb for e in running)
                fits = next((e for e in pending if used + e.need_mb <= budget), None)
                e = fits if fits is not None else (pending[0] if not running else None)
                if e is None:
                    break
                pending.remove(e)
                started += 1
                folder = out / e.name
                folder.mkdir(parents=True, exist_ok=True)
                with open(folder / LOG_NAME, "wb") as log:
                    e.proc = subprocess.Popen(
                        child_argv(e, out, options, shard),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                    )
                e.seconds = time.monotonic()
                running.append(e)
                _say(quiet, f"[{started}/{total} started] {e.name} ({e.path}, needs about {e.need_mb:,.0f} MB)")
            time.sleep(0.05)
            for e in [e for e in running if e.proc.poll() is not None]:
                running.remove(e)
                ended += 1
                e.seconds = time.monotonic() - e.seconds
                _ended(e, out)
                word = {0: "PASSED", 1: "FAILED"}.get(e.code or 0, "ERROR") if e.code is not None else "ERROR"
                why = f": {e.error}" if e.error else ""
                _say(quiet, f"[{ended}/{total} done] {word:<6} {e.name} in {e.seconds:.1f} s (exit {e.code}){why}")
    except KeyboardInterrupt:
        for e in running:  # each child's supervisor forwards it to its worker, which keeps what ran
            try:
                e.proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        for e in running:
            try:
                e.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                e.proc.kill()
                e.proc.wait()
            e.seconds = time.monotonic() - e.seconds
            _ended(e, out)
        raise


def _elsewhere(e: Entry, folder: Path, shard: Any, options: dict[str, Any]) -> None:
    """The results.json and report of a suite whose cases all run in other shards (every stage `sharded_away`,
    what `merge` needs from each shard), written in this process: no models are loaded, no inputs made."""
    from trtverify.cli.run import run_and_record
    from trtverify.runner import RunOptions
    from trtverify.util.fsutil import folder_lock

    t0 = time.monotonic()
    with folder_lock(folder):  # the recorder writes results.json and the report
        run = RunOptions(
            stages=tuple(e.stages),
            shard=shard,
            owners=tuple(e.owners) if e.owners is not None else None,
            update_reference=bool(options.get("update_reference")),
            update_baseline=bool(options.get("update_baseline")),
            reference_dir=options.get("reference_dir"),
        )
        results = run_and_record(e.loaded, folder, run)
    e.code, e.seconds = results.exit_code, time.monotonic() - t0


def _ended(e: Entry, out: Path) -> None:
    code = e.proc.returncode
    if code < 0:
        sig = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else str(-code)
        killed = " (killed: out of memory?)" if -code == signal.SIGKILL else ""
        e.code, e.error = EXIT_INTERNAL, f"its process died of {sig}{killed}; see {out / e.name / LOG_NAME}"
    elif code in (130, 143):
        e.code, e.error = code, "stopped by a signal; its results.json keeps what ran"
    else:
        e.code = code
        if not (out / e.name / "results.json").is_file():
            e.error = _last_line(out / e.name / LOG_NAME) or f"exit {code} without results"


def _last_line(log: Path) -> str:
    try:
        lines = [x for x in log.read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()]
    except OSError:
        return ""
    return lines[-1][:300] if lines else ""


def results_of(folder: Path) -> Any:
    from trtverify.results.io import load_results

    try:
        return load_results(folder / "results.json") if (folder / "results.json").is_file() else None
    except TrtVerifyError:
        return None


def write_outputs(
    rows: list[tuple[Any, Any]], out: Path, seconds: float, junit: Path | None, quiet: bool, **kw: Any
) -> int:
    """index.json, index.html and the JUnit file of the run from (SuiteRow, Results or None) pairs; the summary
    lines; returns the gate's exit code."""
    from trtverify.report.index import write_index_html, write_junit_many
    from trtverify.results.index import build_index, candidate_rows, write_index

    candidates = [c for row, res in rows if res is not None for c in candidate_rows(row.name, res)]
    index = build_index(__version__, [r for r, _ in rows], seconds, candidates=candidates, **kw)
    write_index(index, out)
    write_index_html(index, out / "index.html")
    for row in index.suites:
        worst = next((s.worst_check for s in row.stages if s.status == "failed" and s.worst_check), None)
        detail = f": {worst.name}" if worst is not None else f": {row.error}" if row.error else ""
        click.echo(f"  {row.verdict.upper():<11} {row.name}{detail}")
    if index.candidates:
        click.echo("candidates:")
    for c in index.candidates:  # which can ship
        worst = f": {c.worst_check.name}" if c.verdict == "failed" and c.worst_check is not None else ""
        click.echo(f"  {c.verdict.upper():<11} {c.suite}/{c.candidate}{worst}")
    n = len(index.suites)
    passed = sum(r.verdict == "passed" for r in index.suites)
    click.echo(f"{index.verdict.upper()}: {passed} of {counted(n, 'suite')} passed (exit {index.exit_code})")
    if junit is not None:
        write_junit_many([(r.name, res, r.error) for r, res in rows], junit)
    if not quiet:
        click.echo(f"index:   {out / 'index.html'}", err=True)
        if junit is not None:
            click.echo(f"junit:   {junit}", err=True)
    return index.exit_code


def run_many(
    paths: tuple[Path, ...],
    out: Path,
    jobs: int | None,
    options: dict[str, Any],
    shard: Any,
    junit: Path | None,
    quiet: bool,
) -> None:
    """The command: validate, run, write the index; exits with the gate's code."""
    from trtverify.results.index import suite_row
    from trtverify.runner import deal
    from trtverify.util.fsutil import folder_lock

    entries = validate(suite_files(paths), options.get("plugins") or {}, options.get("stages") or ())
    if shard is not None:
        for e, owners in zip(entries, deal([e.loaded for e in entries], shard.count)):
            e.owners = owners
    limit = jobs if jobs is not None else cores()
    with folder_lock(out):
        _say(quiet, f"trtverify {__version__}: {counted(len(entries), 'suite')}, at most {limit} at a time, into {out}")
        t0 = time.monotonic()
        try:
            run_entries(entries, out, max(1, limit), options, shard, quiet)
        finally:  # also after Ctrl-C: the index says what ran
            rows = []
            for e in entries:
                code = e.code if e.code is not None else 130
                error = e.error if e.code is not None else "not run (the run was stopped)"
                res = results_of(out / e.name) if e.code is not None else None
                rows.append((suite_row(e.name, e.path, e.name, code, e.seconds, res, error), res))
            code = write_outputs(rows, out, time.monotonic() - t0, junit, quiet, shard=shard)
    sys.exit(code)


def merge_many(dirs: tuple[Path, ...], out: Path, junit: Path | None, quiet: bool) -> None:
    """`trtverify merge` of the shards of a run of several suites (each DIR holds index.json): every suite's
    shards merged (results/merge.py) into OUT/<name>/, one index and JUnit file; exits with the gate's code. A
    suite whose shards do not merge (one crashed there) is that suite's error; the others merge."""
    from trtverify.report.html import write_report
    from trtverify.results.index import load_index, most_severe, suite_row
    from trtverify.results.merge import merge_runs
    from trtverify.results.record import write_results
    from trtverify.util.fsutil import folder_lock

    indexes = [(Path(d), load_index(Path(d))) for d in dirs]
    plain = [str(d) for d, ix in indexes if ix is None]
    if plain:
        raise UsageError(
            f"merge: {', '.join(plain)} hold no index.json, but {indexes[0][0] if indexes[0][1] else dirs[-1]} is a "
            "shard of a run of several suites: give the OUT folders of every shard of one run"
        )
    count, seen = None, {}
    for d, ix in indexes:
        assert ix is not None
        if ix.shard is None:
            raise UsageError(f"{d}: not a shard (run with --shard I/N)")
        if count is not None and ix.shard.count != count:
            raise UsageError(f"{d}: shard {ix.shard}, but {indexes[0][0]} is one of {count}")
        count = ix.shard.count
        if ix.shard.index in seen:
            raise UsageError(f"{d}: shard {ix.shard} given twice (also {seen[ix.shard.index]})")
        seen[ix.shard.index] = d
        names = [r.name for r in ix.suites]
        first = [r.name for r in indexes[0][1].suites]  # type: ignore[union-attr]
        if names != first:
            raise UsageError(f"{d}: ran the suites {', '.join(names)}; {indexes[0][0]} ran {', '.join(first)}")
    assert count is not None
    missing = sorted(set(range(1, count + 1)) - set(seen))
    if missing:
        raise UsageError(
            f"merge: shard(s) {', '.join(f'{i}/{count}' for i in missing)} missing; give every shard's OUT"
        )
    t0 = time.monotonic()
    with folder_lock(out):
        rows = []
        for k, first_row in enumerate(indexes[0][1].suites):  # type: ignore[union-attr]
            shard_rows = [ix.suites[k] for _, ix in indexes]  # type: ignore[union-attr]
            folders = [d / r.folder for (d, _), r in zip(indexes, shard_rows)]
            try:
                merged = merge_runs(folders)
            except TrtVerifyError as exc:
                failed = [r.exit_code for r in shard_rows if r.error]
                code = most_severe(failed) if failed else EXIT_USAGE
                rows.append(
                    (suite_row(first_row.name, Path(first_row.file), first_row.name, code, 0.0, None, str(exc)), None)
                )
                continue
            folder = out / first_row.name
            write_results(folder / "results.json", merged)
            write_report(merged, folder / "report.html")
            code = merged.exit_code if merged.exit_code is not None else EXIT_INTERNAL
            row = suite_row(first_row.name, Path(first_row.file), first_row.name, code, merged.duration_s, merged, None)
            rows.append((row, merged))
        code = write_outputs(rows, out, time.monotonic() - t0, junit, quiet, merged=count)
    sys.exit(code)
