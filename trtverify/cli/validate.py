"""Command `trtverify validate` (registered on the main group in cli/main.py): suite files checked against their
models, every problem of every file in one run, nothing run."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from trtverify.util.errors import EXIT_USAGE, Problem, SuiteError, TrtVerifyError


def _files(paths: tuple[Path, ...]) -> list[tuple[Path, list[Problem]]]:
    """The suite files named (folders: their *.yaml files, as `run` takes them), each with what is wrong with the
    name itself (a folder without suites)."""
    from trtverify.cli.zoo import suite_files

    out: list[tuple[Path, list[Problem]]] = []
    for path in paths:
        if not path.is_dir():
            out.append((path, []))
            continue
        try:
            out += [(f, []) for f in suite_files((path,))]
        except TrtVerifyError as exc:
            out.append((path, [Problem(str(path), None, "", str(exc).removeprefix(f"{path}: "))]))
    return out


def problems_of(path: Path) -> list[Problem]:
    """Every problem of one suite file: its YAML, its schema, its cross-field rules, and (where the rest of it
    loads) its names and sizes against its models."""
    from trtverify.config.loader import suite_problems
    from trtverify.runner import preflight

    try:
        loaded, problems = suite_problems(path)
    except TrtVerifyError as exc:  # the file cannot be read at all
        return [Problem(str(path), None, "", str(exc).removeprefix(f"{path}: "))]
    if loaded is None:
        return problems
    try:
        preflight(loaded)
    except SuiteError as exc:
        seen = {str(p) for p in problems}
        problems += [p for p in exc.problems if str(p) not in seen]
    except TrtVerifyError as exc:
        problems.append(Problem(str(path), None, "", str(exc)))
    return problems


@click.command()
@click.argument("suites", nargs=-1, required=True, type=click.Path(path_type=Path))
def validate(suites: tuple[Path, ...]) -> None:
    """Check suite files (or folders of them, as `run` takes) against their models without running anything (no
    torch, no TensorRT imported): every problem of every file, with 'did you mean' for misspelt names."""
    files = _files(suites)
    bad = 0
    for path, named in files:
        problems = named or problems_of(path)
        if problems:
            bad += 1
            for p in problems:
                click.echo(str(p), err=True)
        else:
            click.echo(f"ok: {path}")
    if len(files) > 1 and bad:
        click.echo(f"{bad} of {len(files)} suite files have problems", err=True)
    sys.exit(EXIT_USAGE if bad else 0)
