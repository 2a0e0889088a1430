"""index.json of a run of several suites (`trtverify run A.yaml B.yaml`, `trtverify run FOLDER`): one row per
suite (its verdict, exit code, where its results and report are) and per stage of it (its status and worst check),
one per candidate of every suite (which can ship: its verdict and worst check), and the exit code of the whole
gate. Each suite's own results.json stays the record of what it found."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from pydantic import Field

from trtverify.compare.checks import CheckResult
from trtverify.results.models import Results
from trtverify.stages.base import Shard
from trtverify.util.errors import EXIT_CHECK_FAILED, EXIT_DEPENDENCY, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, UsageError
from trtverify.util.fsutil import atomic_write_text, to_json
from trtverify.util.record import Record, optional

INDEX_NAME = "index.json"
# the most severe exit code of the suites is the gate's: a bug, then a missing dependency, then a suite that could
# not run at all (it says nothing about its models), then a failed check
SEVERITY = (EXIT_INTERNAL, EXIT_DEPENDENCY, EXIT_USAGE, EXIT_CHECK_FAILED, EXIT_OK)

Verdict = Literal["passed", "failed", "error", "interrupted"]


def most_severe(codes: Iterable[int]) -> int:
    """The gate's exit code from its suites': 4 over 3 over 2 over 1 over 0; any other code (a process killed by
    a signal) counts as 4."""
    seen = {c if c in SEVERITY else EXIT_INTERNAL for c in codes}
    return next((c for c in SEVERITY if c in seen), EXIT_OK)


def verdict_of(code: int) -> Verdict:
    if code in (130, 143):
        return "interrupted"
    return "passed" if code == EXIT_OK else "failed" if code == EXIT_CHECK_FAILED else "error"


def badness(check: CheckResult) -> float:
    """How far a check is past its limit (> 0) or inside it (<= 0), relative to the limit; inf where the value is
    missing or not finite."""
    v, t = check.value, check.threshold
    if v is None or t is None or not math.isfinite(v):
        return math.inf if not check.passed else -math.inf
    over = v - t if check.op == "<=" else t - v if check.op == ">=" else abs(v - t)
    return over / abs(t) if t else over


def _count(check: CheckResult) -> bool:
    """A check on a count (`tensors compared >= 1`, `unmatched outputs <= 0`): a whole number against a whole
    number. Passed, it sits on its limit and says nothing about how close the models are."""
    v, t = check.value, check.threshold
    return v is not None and t is not None and math.isfinite(v) and float(v).is_integer() and float(t).is_integer()


def worst_check(checks: Sequence[CheckResult]) -> CheckResult | None:
    """The check that failed by the most, else the passed one closest to its limit (checks on counts last);
    None without checks."""
    if not checks:
        return None
    return max(checks, key=lambda c: (not c.passed, c.passed and not _count(c), badness(c)))


class StageRow(Record):
    stage: str
    shape: str | None = optional("the shape set or batch size of a sweep")
    status: str = Field(description="passed, failed, error or skipped (as in the suite's results.json)")
    worst_check: CheckResult | None = optional("the check that failed by the most, else the closest to its limit")
    error: str | None = optional("why the stage could not run")


class CandidateRow(Record):
    """Whether one candidate of one suite can ship: every check on it passed."""

    suite: str
    candidate: str
    verdict: Verdict = Field(
        description="passed: every check on it passed; failed: one did not; error: none failed, but a stage of its "
        "suite could not run or the run stopped, so not everything was checked"
    )
    checks: int = Field(description="the checks on it, over every stage of its suite")
    failed: int = Field(description="how many of them failed")
    worst_check: CheckResult | None = optional("its check that failed by the most, else its closest to its limit")


class SuiteRow(Record):
    name: str
    file: str = Field(description="the suite file")
    verdict: Verdict
    exit_code: int
    duration_s: float
    folder: str = Field(description="its results.json and report.html, relative to the index")
    error: str | None = optional("why the suite has no complete results (a crash, a refusal)")
    stages: list[StageRow] = Field(default_factory=list)


class Index(Record):
    schema_version: Literal[1] = 1
    trtverify_version: str
    verdict: Verdict
    exit_code: int
    duration_s: float
    suites: list[SuiteRow]
    candidates: list[CandidateRow] = Field(
        default_factory=list, description="which candidate can ship: every candidate of every suite, with its verdict"
    )
    shard: Shard | None = optional("the part of a run this was (`run --shard I/N`)")
    merged: int | None = optional("`trtverify merge` combined this many shards")


def stage_rows(results: Results) -> list[StageRow]:
    rows = []
    for s in results.stages:
        error = s.error.message if s.error is not None else None
        rows.append(
            StageRow(stage=s.name, shape=s.shape, status=s.status, worst_check=worst_check(s.checks), error=error)
        )
    return rows


def candidate_rows(suite: str, results: Results) -> list[CandidateRow]:
    """A row per candidate the suite's checks name: failed where one of its checks failed; error where none did but
    a stage could not run (or the run stopped), which may have left it unchecked; else passed."""
    checks: dict[str, list[CheckResult]] = {}
    for stage in results.stages:
        for c in stage.checks:
            if c.candidate:
                checks.setdefault(c.candidate, []).append(c)
    unsure = not results.complete or any(s.status == "error" for s in results.stages)
    rows = []
    for name, own in checks.items():
        failed = sum(not c.passed for c in own)
        verdict: Verdict = "failed" if failed else "error" if unsure else "passed"
        rows.append(
            CandidateRow(
                suite=suite,
                candidate=name,
                verdict=verdict,
                checks=len(own),
                failed=failed,
                worst_check=worst_check(own),
            )
        )
    return rows


def suite_row(
    name: str, file: Path, folder: str, code: int, duration_s: float, results: Results | None, error: str | None
) -> SuiteRow:
    """One suite's row: from its results.json where there is one, else from why there is none."""
    if results is not None and not results.complete and error is None:
        error = "its results.json is incomplete (the run stopped before every stage ended)"
    return SuiteRow(
        name=name,
        file=str(file),
        verdict=verdict_of(code),
        exit_code=code,
        duration_s=round(duration_s, 3),
        folder=folder,
        error=error,
        stages=stage_rows(results) if results is not None else [],
    )


def build_index(
    version: str,
    rows: Sequence[SuiteRow],
    duration_s: float,
    shard: Shard | None = None,
    merged: int | None = None,
    candidates: Sequence[CandidateRow] = (),
) -> Index:
    code = most_severe(r.exit_code for r in rows)
    verdict = verdict_of(code)
    stopped = {r.exit_code for r in rows if r.verdict == "interrupted"}
    if stopped:  # the run was stopped: it exits as a stopped run does (143 for SIGTERM, else 130)
        verdict, code = "interrupted", max(stopped)
    return Index(
        trtverify_version=version,
        verdict=verdict,
        exit_code=code,
        duration_s=round(duration_s, 3),
        suites=list(rows),
        candidates=list(candidates),
        shard=shard,
        merged=merged,
    )


def write_index(index: Index, folder: Path) -> Path:
    path = Path(folder) / INDEX_NAME
    atomic_write_text(path, to_json(index.dump()))
    return path


def load_index(folder: Path) -> Index | None:
    """FOLDER/index.json, or None where the folder holds none (a run of one suite)."""
    import json

    path = Path(folder) / INDEX_NAME
    if not path.is_file():
        return None
    try:
        return Index.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except ValueError as exc:
        raise UsageError(f"{path}: not an index of a run of several suites ({exc})") from None
