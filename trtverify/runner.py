"""Run a validated suite: plan the run (stages, and the part of each a shard runs), prepare the
inputs, run each stage in isolation, and report each result as it is done.

The run plan is made here, once: `trtverify run SUITE --shard I/N` runs a deterministic part
of a suite. What a stage is to the plan its registry entry says (`config/registry.py`, `StageEntry`), so this
module names no stage: most stages are one whole case, a stage that compares candidates one case per candidate
(case k in the stages' order goes to shard (k mod N) + 1), and a stage that reads a dataset (e2e) is split into
contiguous dataset slices along batch boundaries, so every batch holds the same samples as in an unsharded run and
the models compute the same numbers.
"""

from __future__ import annotations

import dataclasses
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from trtverify.config.against_models import file_problems, model_problems
from trtverify.config.loader import LoadedSuite
from trtverify.config.registry import STAGES
from trtverify.convert.recipes import materialize
from trtverify.data.inputs import build_samples, check_samples, inputs_source, shape_label, static_input_problems
from trtverify.data.reference import ReferenceStore
from trtverify.graph.onnxinfo import TensorMeta, graph_io, load_io
from trtverify.stages.base import Progress, Shard, StageContext, StageError, StageResult, StageWork, no_progress
from trtverify.util import native
from trtverify.util.errors import (
    EXIT_INTERNAL,
    MissingDependency,
    SuiteError,
    TrtVerifyError,
    UsageError,
    interrupt_in,
)
from trtverify.util.words import plural


@dataclass(frozen=True, kw_only=True)
class RunOptions:
    """What a command asks of a run, beside the suite: which stages, which shard, what to rewrite, which samples.
    Made once by the command (cli/) and handed down whole; frozen."""

    stages: tuple[str, ...] = ()  # --stage: these of the configured stages (none: every one)
    shard: Shard | None = None  # --shard I/N: this shard's part of the run
    owners: tuple[int, ...] | None = None  # a run of several suites: the shard of each of `zoo_cases` (`deal`)
    update_reference: bool = False  # rewrite the stored reference outputs
    update_baseline: bool = False  # rewrite the stored baselines (docs/baselines.md)
    reference_dir: Path | None = None  # where the stored references are (None: the suite's reference_dir)
    samples_override: list[dict[str, Any]] | None = None  # fed instead of the suite's inputs (`--samples worst`)
    chosen_by: str | None = None  # what chose `samples_override`, said in every stage that feeds them


@dataclass(frozen=True)
class StagePlan:
    """One run of a stage: the work it does here, or (work None) why another shard does it. In a sweep a stage
    has one plan per shape set (`shape_set`, from inputs.shapes) or batch size (`batch`, from e2e.batch_sizes)."""

    name: str
    work: StageWork | None
    elsewhere: str = ""
    shape_set: dict[str, list[int]] | None = None
    batch: int | None = None

    @property
    def label(self) -> str | None:
        """The shape its result is named by (None: the stage is not swept)."""
        if self.shape_set is not None:
            return shape_label(self.shape_set)
        return f"batch={self.batch}" if self.batch is not None else None


def _variants(loaded: LoadedSuite, name: str) -> list[tuple[dict[str, list[int]] | None, int | None]]:
    """The runs of stage `name`: (shape set, batch size); [(None, None)] when it is not swept. A shape sweep
    (inputs.shapes) runs the stages its entry marks `shape_swept` once per shape set; a `batch_swept` stage's
    `batch_sizes` run it once per batch size."""
    suite = loaded.suite
    entry = STAGES.get(name)
    if suite.inputs.shapes and entry.shape_swept:
        return [(dict(s), None) for s in suite.inputs.shapes]
    cfg = getattr(suite.stages, name)
    if entry.batch_swept and cfg is not None and cfg.batch_sizes:
        return [(None, b) for b in cfg.batch_sizes]
    return [(None, None)]


def cases(loaded: LoadedSuite) -> list[tuple[str, str | None, str | None]]:
    """The whole cases of the tensor stages, in a fixed order: (stage, candidate or None, shape label or None);
    in a shape sweep each shape set of a stage is a case of its own."""
    suite = loaded.suite
    out: list[tuple[str, str | None, str | None]] = []

    def add(stage: str, candidate: str | None = None) -> None:
        for shape_set, _ in _variants(loaded, stage):
            out.append((stage, candidate, shape_label(shape_set) if shape_set is not None else None))

    for entry in STAGES.entries():
        cfg = getattr(suite.stages, entry.name)
        if cfg is None or entry.cases == "data":
            continue
        for n in suite.candidates_of(cfg) if entry.cases == "candidates" else [None]:
            add(entry.name, n)
    return out


def zoo_cases(loaded: LoadedSuite) -> list[tuple[str, str | None, str | None]]:
    """The whole cases of a suite run with others (`trtverify run A.yaml B.yaml --shard I/N`): `cases`, and each
    run of e2e (one per batch size of a sweep) whole, not sliced: a shard then loads only the models it runs."""
    out = cases(loaded)
    for entry in STAGES.entries():
        if entry.cases == "data" and getattr(loaded.suite.stages, entry.name) is not None:
            out += [
                (entry.name, None, f"batch={b}" if b is not None else None) for _, b in _variants(loaded, entry.name)
            ]
    return out


def deal(suites: Sequence[LoadedSuite], count: int) -> list[list[int]]:
    """The owner shard (1..count) of every case (`zoo_cases`) of every suite: the heaviest cases first (by
    their stage's `weight`, then suite and case order), each to the shard with the least weight so far (the lowest
    index on a tie). Deterministic; the shards' weights differ by at most one case's weight."""
    flat = [(i, k, STAGES.get(c[0]).weight) for i, s in enumerate(suites) for k, c in enumerate(zoo_cases(s))]
    owners = [[0] * len(zoo_cases(s)) for s in suites]
    load = [0] * count
    for i, k, w in sorted(flat, key=lambda x: (-x[2], x[0], x[1])):
        shard = min(range(count), key=lambda j: (load[j], j))
        load[shard] += w
        owners[i][k] = shard + 1
    return owners


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


def make_plan(
    loaded: LoadedSuite,
    requested: Sequence[str] = (),
    shard: Shard | None = None,
    owners: Sequence[int] | None = None,
) -> list[StagePlan]:
    """What each selected stage runs, per shape set or batch size of a sweep: everything, or this shard's cases
    (whole cases round robin; in a sweep, each shape set of a stage or candidate is a case) and, for a stage that
    reads a dataset, this shard's slice at every batch size. `owners`: the shard of each of `zoo_cases` (from
    `deal`, in a run of several suites): such a stage is then a whole case too."""
    plans = []
    owner = {case: k % shard.count + 1 for k, case in enumerate(cases(loaded))} if shard is not None else {}
    if shard is not None and owners is not None:
        dealt = zoo_cases(loaded)
        if len(owners) != len(dealt) or not all(1 <= o <= shard.count for o in owners):
            raise UsageError(f"{loaded.path}: the deal of its {len(dealt)} cases does not fit shard {shard}")
        owner = dict(zip(dealt, owners))
    for name in select_stages(loaded, requested):
        split = STAGES.get(name).cases
        for shape_set, batch in _variants(loaded, name):
            label = shape_label(shape_set) if shape_set is not None else None
            at = f" at {label}" if label else ""
            if shard is None:
                work, why = StageWork(), ""
            elif split == "data" and owners is not None:
                o = owner[(name, None, f"batch={batch}" if batch is not None else None)]
                work, why = (StageWork() if o == shard.index else None), f"runs in shard {o}/{shard.count}"
            elif split == "data":
                work, why = StageWork(data=shard), ""
            elif split == "candidates":
                mine = tuple(c for (st, c, lb), o in owner.items() if st == name and lb == label and o == shard.index)
                work = StageWork(candidates=mine) if mine else None
                why = f"shard {shard}: every candidate of this stage{at} runs in another shard"
            else:
                o = owner[(name, None, label)]
                work, why = (StageWork() if o == shard.index else None), f"runs in shard {o}/{shard.count}"
            plans.append(StagePlan(name, work, why, shape_set, batch))
    return plans


def preflight(loaded: LoadedSuite) -> list[TensorMeta]:
    """Checks that need the model files but run nothing (`validate`, and `run` before any stage):
    inputs, and every name and size a stage reads from the models; raises SuiteError with every problem."""
    ref = loaded.suite.models.reference
    try:
        model = load_io(Path(ref))
    except UsageError as exc:  # with every other model file that is not what its key says
        raise SuiteError([loaded.problem(("models", "reference"), str(exc)), *file_problems(loaded)]) from None
    inputs, outputs = graph_io(model)
    problems = file_problems(loaded) + static_input_problems(loaded, inputs) + model_problems(loaded, inputs, outputs)
    if problems:
        raise SuiteError(problems)
    return inputs


def _run_one(plan: StagePlan, ctx: StageContext, crashed: native.Crash | None = None) -> StageResult:
    result_type = STAGES.get(plan.name).result_type()
    if plan.work is None:
        return result_type(status="skipped", notes=[plan.elsewhere], sharded_away=True)
    if crashed is not None:  # it crashed the process in an earlier worker, where nothing inside could be skipped
        error = StageError(kind="crash", message=crashed.error(), exit_code=native.exit_code(crashed))
        return result_type(status="error", error=error)
    try:
        return STAGES.load(plan.name)(ctx)
    except TrtVerifyError as exc:
        kind = "dependency" if isinstance(exc, MissingDependency) else "user"
        return result_type(status="error", error=StageError(kind=kind, message=str(exc), exit_code=exc.exit_code))
    except Exception as exc:  # a bug: keep going with the other stages, keep the traceback
        stop = interrupt_in(exc)
        if stop is not None:  # Ctrl-C while a C extension was being imported: the run stops, as anywhere else
            raise stop from None
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
    from trtverify.repair.calibrate import chooser

    def choose(name: str) -> Any:  # method: auto, its progress lines under the recipe's name
        i = recipes.index(name)
        return chooser(lambda line: progress("candidates", i, len(recipes), f"{name}: {line}"))

    made = materialize(Path(loaded.suite.models.reference), dict(candidates), samples, out_dir / "candidates", choose)
    models = loaded.suite.models.model_copy(update={"candidates": made})
    return dataclasses.replace(loaded, suite=loaded.suite.model_copy(update={"models": models}))


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
        f"input '{n}' in {plural('sample', len(rows))} {', '.join(map(str, rows[:10]))}"
        + (" ..." if len(rows) > 10 else "")
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


def _unswept(plans: Sequence[StagePlan]) -> list[StagePlan]:
    """The plans with each shape-swept stage run once, without a shape set: its first set's plan stands for it,
    so that in a sharded run each case still has one owner, the owner of its first shape set."""
    out: list[StagePlan] = []
    seen: set[str] = set()
    for plan in plans:
        if plan.shape_set is None:
            out.append(plan)
        elif plan.name not in seen:
            seen.add(plan.name)
            out.append(dataclasses.replace(plan, shape_set=None))
    return out


def _for_plan(
    plan: StagePlan, loaded: LoadedSuite, samples: list[dict[str, Any]], model_inputs: list[TensorMeta]
) -> tuple[LoadedSuite, list[dict[str, Any]]]:
    """The suite and inputs of one planned run: the shape set's generated inputs, or the stage at the plan's batch
    size."""
    if plan.shape_set is not None:
        loaded = with_sweep_profile(loaded, loaded.suite.inputs.shapes or [plan.shape_set])
        feeds = build_samples(loaded, shape_set=plan.shape_set)
        check_samples(feeds, model_inputs, f"inputs of {loaded.path} at {plan.label}")
        return loaded, feeds
    cfg = getattr(loaded.suite.stages, plan.name)
    if plan.batch is not None and cfg is not None:
        stages = loaded.suite.stages.model_copy(update={plan.name: cfg.model_copy(update={"batch_size": plan.batch})})
        return dataclasses.replace(loaded, suite=loaded.suite.model_copy(update={"stages": stages})), samples
    return loaded, samples


Pending = Sequence[tuple[str, "str | None"]]  # the stages not run yet: (name, shape label)


class Sink(Protocol):
    """Takes the run's results as it goes: the stages done and those still to run, after each stage (and once
    before any, when the run stops before its first stage ends). The caller's recorder writes results.json there,
    so a crash or a kill later loses nothing already done."""

    def __call__(self, done: Sequence[StageResult], pending: Pending, interrupted: bool = False) -> None: ...


def run_suite(
    loaded: LoadedSuite,
    out_dir: Path,
    sink: Sink,
    options: RunOptions = RunOptions(),
    *,
    plans: Sequence[StagePlan] | None = None,
    done: Sequence[StageResult] = (),
    progress: Progress = no_progress,
    model_inputs: list[TensorMeta] | None = None,
) -> list[StageResult]:
    """Run the suite (or the shard's part of it), handing every result to `sink` as soon as it is done; on
    Ctrl-C (and SIGTERM, which the CLI turns into the same exception) the sink has what ran, the rest pending.

    `done`: the results of the plan's first stages, kept from an earlier worker of this run that crashed after
    them (cli/supervise.py); they are not run again."""
    plans = list(plans) if plans is not None else make_plan(loaded, options.stages, options.shard, options.owners)
    if options.samples_override is not None:  # the chosen samples are fed as they are: a swept stage runs once
        plans = _unswept(plans)
    if len(done) > len(plans) or any(r.name != p.name or r.shape != p.label for r, p in zip(done, plans)):
        done = ()  # not this plan's results: run everything
    told = False

    def on_stage(done: Sequence[StageResult], pending: Pending, interrupted: bool = False) -> None:
        nonlocal told
        told = True
        if interrupted:
            sink(done, pending, interrupted)
        else:
            sink(done, pending)

    try:
        results = run_stages(
            loaded,
            plans,
            out_dir=Path(out_dir),
            options=options,
            progress=progress,
            on_stage=on_stage,
            done=done,
            model_inputs=model_inputs,
        )
    except KeyboardInterrupt:
        if not told:  # stopped before the first stage ended: every stage is listed as not run
            sink(list(done), [(p.name, p.label) for p in plans[len(done) :]])
        raise  # after a stage, the sink already has what ran, the rest pending
    if not told:  # no stage ran
        sink(results, [])
    return results


def run_stages(
    loaded: LoadedSuite,
    plans: Sequence[StagePlan],
    *,
    out_dir: Path,
    options: RunOptions = RunOptions(),
    progress: Progress = no_progress,
    on_stage: Callable[..., None] = lambda done, pending, interrupted=False: None,
    done: Sequence[StageResult] = (),
    model_inputs: list[TensorMeta] | None = None,
) -> list[StageResult]:
    """Run the planned stages in order, but for the first `len(done)`, whose results are `done`; `on_stage(done,
    pending)` after each one (and `on_stage(done, pending, True)` with the part a stage did when it was
    interrupted: the run is incomplete).

    `options.samples_override` replaces the suite's inputs (e.g. the worst samples of an e2e run, `chosen_by` says so):
    the stages feed every one of them, whatever their `samples: N` (`run_suite` runs a swept stage once then)."""
    if model_inputs is None:  # `preflight` not run by the caller yet
        model_inputs = preflight(loaded)
    idle = all(p.work is None for p in plans[len(done) :])  # every stage runs in another shard
    if idle:  # no inputs to make, no candidate to convert
        samples: list[dict[str, Any]] = []
    elif options.samples_override is not None:
        samples = options.samples_override
        check_samples(samples, model_inputs, "the samples chosen with --samples")
    else:
        samples = build_samples(loaded, model_inputs)  # the reference's inputs as preflight read them: not again
        check_samples(samples, model_inputs, inputs_source(loaded))
    warning = nonfinite_inputs(samples)
    loaded = loaded if idle else with_recipes_made(loaded, samples, out_dir, progress)
    store = ReferenceStore(options.reference_dir or loaded.suite.reference_dir, loaded.suite.name)
    results: list[StageResult] = list(done)
    crashed = native.resume().dead
    for i, plan in enumerate(plans):
        if i < len(done):
            continue
        stage_loaded, feeds = _for_plan(plan, loaded, samples, model_inputs) if plan.work else (loaded, samples)
        ctx = StageContext(
            loaded=stage_loaded,
            samples=feeds,
            model_inputs=model_inputs,
            store=store,
            update_reference=options.update_reference,
            progress=progress,
            work=plan.work or StageWork(),
            out_dir=out_dir,
            update_baseline=options.update_baseline,
            chosen_by=options.chosen_by if options.samples_override is not None else None,
            shape=plan.label,
        )
        s0 = time.perf_counter()
        try:
            with native.stage(i, plan.name, plan.label):
                res = _run_one(plan, ctx, crashed.get(i))
        except KeyboardInterrupt as exc:  # a stage may hand what it did so far (repair: its best keep-list)
            partial = getattr(exc, "partial", None)
            if isinstance(partial, StageResult):
                results.append(partial.model_copy(update={"duration_s": time.perf_counter() - s0}))
                on_stage(list(results), [(p.name, p.label) for p in plans[i + 1 :]], True)
            raise
        if warning and STAGES.get(plan.name).feeds_samples and plan.work is not None:
            res = res.model_copy(update={"notes": [warning, *res.notes]})
        update: dict[str, Any] = {"duration_s": time.perf_counter() - s0}
        if plan.label is not None:
            update["shape"] = plan.label
        results.append(res.model_copy(update=update))
        on_stage(list(results), [(p.name, p.label) for p in plans[i + 1 :]])
    return results
