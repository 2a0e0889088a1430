"""One exception family for user-facing errors.

Each carries the exit code the CLI returns. Internal bugs stay ordinary exceptions
(the CLI prints their traceback and exits with EXIT_INTERNAL).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_DEPENDENCY = 3
EXIT_INTERNAL = 4


class TrtVerifyError(Exception):
    """A problem the user can fix; printed without a traceback."""

    exit_code = EXIT_USAGE


@dataclass(frozen=True)
class Problem:
    """One located problem in a suite file."""

    file: str
    line: int | None
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class SuiteError(TrtVerifyError):
    """The suite file is invalid; holds every problem found, not only the first."""

    exit_code = EXIT_USAGE

    def __init__(self, problems: list[Problem]):
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class UsageError(TrtVerifyError):
    exit_code = EXIT_USAGE


class MissingDependency(TrtVerifyError):
    """A library a backend or stage needs is not installed, or hardware is absent."""

    exit_code = EXIT_DEPENDENCY

    def __init__(self, what: str, fix: str):
        self.what = what
        self.fix = fix
        super().__init__(f"{what}\n  fix: {fix}")


class BackendError(TrtVerifyError):
    """A model could not be loaded or run by a backend (the thing under test is broken)."""

    exit_code = EXIT_CHECK_FAILED


class LoadError(BackendError):
    """A backend cannot load a model at all (exit 1 for a model under test; for the reference, which every
    comparison needs, the stage makes it a UsageError: exit 2, nothing compared)."""


class RunError(BackendError):
    """A backend loaded a model but failed running it on the inputs given (for the reference: a UsageError, as
    LoadError)."""


def unknown(what: str, value: str, known: list[str] | dict[str, object]) -> str:
    """'unknown metric 'cosin'; did you mean 'cosine'? (known: ...)' — one wording everywhere."""
    names = list(known)
    return f"unknown {what} '{value}'{did_you_mean(value, names)} (known: {', '.join(names)})"


def did_you_mean(value: str, known: Iterable[str]) -> str:
    """ "; did you mean 'x'?" for the known name closest to a misspelt one (difflib), else ''."""
    import difflib

    by_lower = {n.lower(): n for n in known}  # 'mIoU' is close to 'miou'
    close = [by_lower[c] for c in difflib.get_close_matches(value.lower(), list(by_lower), n=1)]
    return f"; did you mean '{close[0]}'?" if close else ""


def interrupt_in(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or SIGTERM, which the CLI raises the same way) behind `exc`, where another exception stands in
    for it: a C extension whose import it interrupted raises ImportError('initialization failed') from it
    (onnxruntime, onnx: pybind11), which would otherwise read as a bug in a stage."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        if isinstance(cur, KeyboardInterrupt):
            return cur
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return None
