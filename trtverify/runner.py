"""Run a validated suite: plan the run (stages, and the part of each a shard runs), prepare the
inputs, run each stage in isolation, and report each result as it is done.

The run plan is made here, once: `trtverify run SUITE --shard I/N` runs a deterministic part
of a suite. The tensor stages split into whole cases (`framework` is one case, `layerwise` one
case per candidate, `buildlog` and `perf` one case each; case k in that order goes to shard (k mod N) + 1), and
`e2e` into contiguous dataset slices along batch boundaries, so every batch holds the same
samples as in an unsharded run and the models compute the same numbers.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtverify.config.against_models import model_problems
from trtverify.config.loader import LoadedSuite
from trtverify.config.registry import STAGES
from trtverify.convert.recipes import materialize
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
from trtverify.inputs import build_samples, check_samples, shape_label, static_input_problems
from trtverify.onnxinfo import TensorMeta, graph_io, load_io
from trtverify.reference import ReferenceStore
from trtverify.stages.base import Progress, Shard, StageContext, StageError, StageResult, StageWork, no_progress


@dataclass(frozen=True)
class StagePlan:
    """One stage of the run: the work it does here, or (work None) why another shard does it."""

    name: str
    work: StageWork | None
    elsewhere: str = ""


def cases(loaded: LoadedSuite) -> list[tuple[str, str | None]]:
    """The whole cases of the tensor stages, in a fixed order: (stage, candidate or None)."""
    suite = loaded.suite
    out: list[tuple[str, str | None]] = []
    if suite.stages.framework is not None:
        out.append(("framework", None))
    if suite.stages.layerwise is not None:
        out += [("layerwise", n) for n in suite.candidates_of(suite.stages.layerwise)]
    if suite.stages.repair is not None:
        out.append(("repair", None))
    if suite.stages.buildlog is not None:
        out.append(("buildlog", None))
    if suite.stages.perf is not None:
        out.append(("perf", None))
    return out


def select_stages(loaded: LoadedSuite, requested: Sequence[str]) -> list[str]:
    configured = loaded.suite.stages.configured()
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


def make_plan(loaded: LoadedSuite, requested: Sequence[str] = (), shard: Shard | None = None) -> list[StagePlan]:
    """What each selected stage runs: everything, or this shard's cases and dataset slice."""
    names = select_stages(loaded, requested)
    if shard is None:
        return [StagePlan(n, StageWork()) for n in names]
    if loaded.suite.inputs.shapes:
        raise UsageError(
            f"--shard {shard}: {loaded.path} sweeps shapes (inputs.shapes), and shards do not split or merge a sweep "
            "yet; run it unsharded, or one suite per shape set"
        )
    owner = {case: k % shard.count + 1 for k, case in enumerate(cases(loaded))}
    plans = []
    for name in names:
        if name == "e2e":
            plans.append(StagePlan(name, StageWork(data=shard)))
        elif name == "layerwise":
            mine = tuple(c for (stage, c), o in owner.items() if stage == name and o == shard.index and c)
            why = f"shard {shard}: every candidate of this stage runs in another shard"
            plans.append(StagePlan(name, StageWork(candidates=mine) if mine else None, why))
        else:
            o = owner[(name, None)]
            why = f"runs in shard {o}/{shard.count}"
            plans.append(StagePlan(name, StageWork() if o == shard.index else None, why))
    return plans


def preflight(loaded: LoadedSuite) -> list[TensorMeta]:
    """Checks that need the model files but run nothing (`validate`, and `run` before any stage):
    inputs, and every name and size a stage reads from the models; raises SuiteError with every problem."""
    ref = loaded.suite.models.reference
    try:
        model = load_io(Path(ref))
    except UsageError as exc:
        raise SuiteError([loaded.problem(("models", "reference"), str(exc))]) from None
    inputs, outputs = graph_io(model)
    problems = static_input_problems(loaded, inputs) + model_problems(loaded, inputs, outputs)
    if problems:
        raise SuiteError(problems)
    return inputs


def exit_code_for(stages: Sequence[StageResult]) -> int:
    """The run's exit code: an internal error > a missing dependency > a failed check."""
    codes = [EXIT_OK]
    for s in stages:
        if s.error is not None:
            codes.append(s.error.exit_code)
        elif s.status == "failed":
            codes.append(EXIT_CHECK_FAILED)
    for code in (EXIT_INTERNAL, EXIT_DEPENDENCY, EXIT_CHECK_FAILED):
        if code in codes:
            return code
    return max(codes)


def _run_one(plan: StagePlan, ctx: StageContext) -> StageResult:
    result_type = STAGES.get(plan.name).result_type()
    if plan.work is None:
        return result_type(status="skipped", notes=[plan.elsewhere], sharded_away=True)
    try:
        return STAGES.load(plan.name)(ctx)
    except TrtVerifyError as exc:
        kind = "dependency" if isinstance(exc, MissingDependency) else "user"
        return result_type(status="error", error=StageError(kind=kind, message=str(exc), exit_code=exc.exit_code))
    except Exception as exc:  # a bug: keep going with the other stages, keep the traceback
        error = StageError(
            kind="internal",
            message=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
            exit_code=EXIT_INTERNAL,
        )
        return result_type(status="error", error=error)


def with_recipes_made(loaded: LoadedSuite, samples: Sequence[Any], out_dir: Path, progress: Progress) -> LoadedSuite:
    """The suite with every recipe candidate (`from: reference`) made into an ONNX file in `out_dir/candidates`."""
    candidates = loaded.suite.models.candidates
    recipes = [n for n, c in candidates.items() if c.from_ is not None]
    if not recipes:
        return loaded
    for i, name in enumerate(recipes):
        progress("candidates", i, len(recipes), f"making {name}")
    made = materialize(Path(loaded.suite.models.reference), dict(candidates), samples, out_dir / "candidates")
    models = loaded.suite.models.model_copy(update={"candidates": made})
    return dataclasses.replace(loaded, suite=loaded.suite.model_copy(update={"models": models}))


SAMPLE_STAGES = ("framework", "layerwise", "repair")  # the stages that feed the inputs to the models
SWEPT_STAGES = ("framework", "layerwise")  # the stages a shape sweep (inputs.shapes) runs once per shape set


def nonfinite_inputs(samples: Sequence[dict[str, Any]]) -> str | None:
    """A warning naming the input rows that hold NaN or inf: the reference computes non-finite values from them,
    and every comparison there says 'nan' where the inputs are the cause (None when every value is finite)."""
    import numpy as np

    bad: dict[str, list[int]] = {}
    for i, feed in enumerate(samples):
        for name, arr in feed.items():
            a = np.asarray(arr)
            if a.dtype.kind == "f" and not np.isfinite(a).all():
                bad.setdefault(name, []).append(i)
    if not bad:
        return None
    where = "; ".join(
        f"input '{n}' in sample(s) {', '.join(map(str, rows[:10]))}{' ...' if len(rows) > 10 else ''}"
        for n, rows in bad.items()
    )
    return (
        f"warning: the inputs hold NaN or inf values ({where}): the reference computes non-finite values from them, "
        "so metrics there are undefined (nan) because of the inputs, not the candidate; fix the input file"
    )


def with_sweep_profile(loaded: LoadedSuite, sweep: Sequence[dict[str, list[int]]]) -> LoadedSuite:
    """The suite whose TensorRT backends build one optimisation profile covering every swept shape (min and max
    per dimension over the sets, opt the first set's), where the suite gives no profiles of its own (those are
    checked to cover the sweep before anything runs)."""
    from trtverify.config.backends import ShapeRange

    names = list(dict.fromkeys(n for s in sweep for n in s))
    profile = {}
    for name in names:
        shapes = [s[name] for s in sweep if name in s]
        profile[name] = ShapeRange(
            min=[min(d) for d in zip(*shapes)], opt=list(shapes[0]), max=[max(d) for d in zip(*shapes)]
        )
    backends = loaded.suite.backends
    update = {}
    for attr in ("tensorrt", "tensorrt_rtx"):
        options = getattr(backends, attr)
        if not options.profiles:
            update[attr] = options.model_copy(update={"profiles": [profile]})
    if not update:
        return loaded
    suite = loaded.suite.model_copy(update={"backends": backends.model_copy(update=update)})
    return dataclasses.replace(loaded, suite=suite)


def run_stages(
    loaded: LoadedSuite,
    plans: Sequence[StagePlan],
    *,
    out_dir: Path,
    update_reference: bool = False,
    update_baseline: bool = False,
    reference_dir: Path | None = None,
    progress: Progress = no_progress,
    samples_override: list[dict[str, Any]] | None = None,
    chosen_by: str | None = None,
    on_stage: Callable[[list[StageResult], list[str]], None] = lambda done, pending: None,
) -> list[StageResult]:
    """Run the planned stages in order; `on_stage(done, pending)` after each one (results.json is
    written there, so a crash or kill later loses nothing already done).

    `samples_override` replaces the suite's inputs (e.g. the worst samples of an e2e run, `chosen_by` says so):
    the stages feed every one of them, whatever their `samples: N`."""
    model_inputs = preflight(loaded)
    if samples_override is not None:
        samples = samples_override
        check_samples(samples, model_inputs, "the samples chosen with --samples")
    else:
        samples = build_samples(loaded)
        check_samples(samples, model_inputs, f"inputs of {loaded.path}")
    warning = nonfinite_inputs(samples)
    loaded = with_recipes_made(loaded, samples, out_dir, progress)
    store = ReferenceStore(reference_dir or loaded.suite.reference_dir, loaded.suite.name)
    results: list[StageResult] = []
    sweep = loaded.suite.inputs.shapes if samples_override is None else None
    if sweep:
        loaded = with_sweep_profile(loaded, sweep)
    for i, plan in enumerate(plans):
        # a shape sweep runs the stages that feed the inputs once per shape set, each result named by its set
        sets: list[dict[str, list[int]] | None] = list(sweep) if sweep and plan.name in SWEPT_STAGES else [None]
        for shape_set in sets:
            feeds = samples
            if shape_set is not None:
                feeds = build_samples(loaded, shape_set=shape_set)
                check_samples(feeds, model_inputs, f"inputs of {loaded.path} at {shape_label(shape_set)}")
            ctx = StageContext(
                loaded,
                feeds,
                model_inputs,
                store,
                update_reference,
                progress,
                plan.work or StageWork(),
                out_dir,
                update_baseline,
                chosen_by if samples_override is not None else None,
            )
            s0 = time.perf_counter()
            res = _run_one(plan, ctx)
            if warning and plan.name in SAMPLE_STAGES and plan.work is not None:
                res = res.model_copy(update={"notes": [warning, *res.notes]})
            update: dict[str, Any] = {"duration_s": time.perf_counter() - s0}
            if shape_set is not None:
                update["shape"] = shape_label(shape_set)
            results.append(res.model_copy(update=update))
            on_stage(list(results), [p.name for p in plans[i + 1 :]])
    return results
