"""Run a validated suite: prepare inputs, run each stage in isolation, write results as we go."""

from __future__ import annotations

import datetime as _dt
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtverify import RESULTS_SCHEMA_VERSION, __version__
from trtverify.config.loader import LoadedSuite
from trtverify.environment import environment
from trtverify.errors import (
    EXIT_CHECK_FAILED,
    EXIT_DEPENDENCY,
    EXIT_INTERNAL,
    EXIT_OK,
    MissingDependency,
    SuiteError,
    TrtVerifyError,
    UsageError,
)
from trtverify.fsutil import atomic_write_json, sha256_file
from trtverify.inputs import build_samples, check_samples, static_input_problems
from trtverify.onnxinfo import TensorMeta, graph_io, load_io
from trtverify.reference import ReferenceStore
from trtverify.shard import owner, owns
from trtverify.stages import STAGES, stage_function
from trtverify.stages.base import Progress, StageContext, StageResult, no_progress


def configured_stages(loaded: LoadedSuite) -> list[str]:
    return [n for n in STAGES if getattr(loaded.suite.stages, n, None) is not None]


def select_stages(loaded: LoadedSuite, requested: Sequence[str]) -> list[str]:
    configured = configured_stages(loaded)
    if not requested:
        return configured
    for name in requested:
        if name not in STAGES:
            raise UsageError(f"--stage {name}: no such stage (stages: {', '.join(STAGES)})")
        if name not in configured:
            raise UsageError(
                f"--stage {name}: not configured in {loaded.path} (configured: {', '.join(configured) or 'none'})"
            )
    return [n for n in configured if n in requested]


def preflight(loaded: LoadedSuite) -> list[TensorMeta]:
    """Checks that need the model file but run nothing; raises SuiteError with every problem."""
    ref = loaded.suite.models.reference
    try:
        model = load_io(Path(ref))
    except UsageError as exc:
        raise SuiteError([loaded.problem(("models", "reference"), str(exc))]) from None
    inputs, _ = graph_io(model)
    problems = static_input_problems(loaded, inputs)
    if problems:
        raise SuiteError(problems)
    return inputs


@dataclass
class RunResult:
    results: dict[str, Any]
    stages: list[StageResult]
    out_dir: Path

    @property
    def exit_code(self) -> int:
        return exit_code_for(self.stages)


def exit_code_for(stages: Sequence[StageResult]) -> int:
    return exit_code_from_stages([{"status": s.status, "error": s.error} for s in stages])


def exit_code_from_stages(stages: Sequence[dict[str, Any]]) -> int:
    codes = [EXIT_OK]
    for s in stages:
        if s.get("error") is not None:
            codes.append(int(s["error"].get("exit_code", EXIT_INTERNAL)))
        elif s["status"] == "failed":
            codes.append(EXIT_CHECK_FAILED)
    # precedence: an internal error > a missing dependency > a failed check
    for code in (EXIT_INTERNAL, EXIT_DEPENDENCY, EXIT_CHECK_FAILED):
        if code in codes:
            return code
    return max(codes)


def stage_passed(stage: dict[str, Any]) -> bool:
    """Passed, or skipped because another shard runs it."""
    return stage["status"] == "passed" or (stage["status"] == "skipped" and bool(stage.get("sharded_away")))


def _results(
    loaded: LoadedSuite, stages: list[StageResult], pending: list[str], started: str, t0: float, shard: Any = None
) -> dict[str, Any]:
    done = [s.to_dict() for s in stages]
    done += [
        {"name": n, "status": "skipped", "checks": [], "notes": ["not run yet (interrupted?)"], "error": None}
        for n in pending
    ]
    return {
        "schema_version": RESULTS_SCHEMA_VERSION,
        "trtverify_version": __version__,
        "suite": {
            "name": loaded.suite.name,
            "path": str(loaded.path),
            "sha256": sha256_file(loaded.path),
            "description": loaded.suite.description,
        },
        "started": started,
        "duration_s": round(time.perf_counter() - t0, 3),
        "complete": not pending,
        "passed": bool(stages) and not pending and all(stage_passed(s) for s in done),
        "exit_code": exit_code_for(stages) if not pending else None,
        "stages": done,
        "environment": environment(),
        **({"shard": shard.to_dict()} if shard is not None else {}),
    }


def run_suite(
    loaded: LoadedSuite,
    out_dir: Path,
    *,
    stages: Sequence[str] = (),
    update_reference: bool = False,
    reference_dir: Path | None = None,
    progress: Progress = no_progress,
    samples_override: list[dict[str, Any]] | None = None,
    shard: Any = None,
) -> RunResult:
    """`samples_override` replaces the suite's inputs (e.g. the worst samples of an e2e run);
    `shard` (trtverify.shard.Shard) runs only that shard's part of the suite."""
    names = select_stages(loaded, stages)
    model_inputs = preflight(loaded)
    if samples_override is not None:
        samples = samples_override
        check_samples(samples, model_inputs, "the samples chosen with --samples")
    else:
        samples = build_samples(loaded)
        check_samples(samples, model_inputs, f"inputs of {loaded.path}")
    store = ReferenceStore(reference_dir or loaded.suite.reference_dir, loaded.suite.name)
    out_dir = Path(out_dir)
    ctx = StageContext(loaded, samples, model_inputs, store, update_reference, progress, shard, out_dir)

    out_dir.mkdir(parents=True, exist_ok=True)
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    results: list[StageResult] = []
    for i, name in enumerate(names):
        s0 = time.perf_counter()
        try:
            if name in ("framework", "buildlog") and shard is not None and not owns(shard, loaded, (name, None)):
                res = StageResult(
                    name,
                    "skipped",
                    notes=[f"runs in shard {owner(loaded, (name, None), shard.count)}/{shard.count}"],
                    details={"sharded_away": True},
                )
            else:
                res = stage_function(name)(ctx)
        except TrtVerifyError as exc:
            kind = "dependency" if isinstance(exc, MissingDependency) else "user"
            res = StageResult(name, "error", error={"kind": kind, "message": str(exc), "exit_code": exc.exit_code})
        except Exception as exc:  # a bug: keep going with the other stages, keep the traceback
            res = StageResult(
                name,
                "error",
                error={
                    "kind": "internal",
                    "message": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(),
                    "exit_code": EXIT_INTERNAL,
                },
            )
        res.duration_s = time.perf_counter() - s0
        results.append(res)
        # written after every stage: a crash or kill later loses nothing already done
        atomic_write_json(out_dir / "results.json", _results(loaded, results, names[i + 1 :], started, t0, shard))
    final = _results(loaded, results, [], started, t0, shard)
    atomic_write_json(out_dir / "results.json", final)
    from trtverify.report import write_report

    write_report(final, out_dir / "report.html")
    return RunResult(final, results, out_dir)
