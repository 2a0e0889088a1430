"""Stage `e2e`: task metrics of the reference and each candidate on a validation set.

The data is read and preprocessed once, in background threads, while the first model runs
over it; it is kept (in chunks of `chunk_mb`), and the other models run over it in turn. Gates
compare each candidate with the reference: `max_drop` (absolute), `max_rel_drop`, `min`. The
samples where candidate and reference disagree most are listed for drill-down
(`trtverify run --stage layerwise --samples worst`). Everything task-specific goes through the
task's contract (`trtverify.tasks.base.Task`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends.base import Backend, candidate_backend
from trtverify.backends.onnxruntime import OnnxRuntimeBackend
from trtverify.compare.checks import CheckResult, failed_check, limit_check
from trtverify.config.loader import LoadedSuite
from trtverify.config.registry import TASKS
from trtverify.config.stages import E2EStage
from trtverify.stages.base import StageContext, status_of, sum_timings, timed
from trtverify.stages.e2e import drift
from trtverify.stages.e2e.classdata import (
    CLASS_FILE,
    INLINE_CLASSES,
    WORST_CLASSES,
    class_count,
    dropped_most,
    inline,
    pack,
)
from trtverify.stages.e2e.models import DatasetInfo, E2ECandidate, E2EResult, ReferenceSanity
from trtverify.tasks.base import Task, TaskMetrics
from trtverify.tasks.batches import Batch, batches, default_workers, make_preprocess
from trtverify.tasks.datasets import open_dataset
from trtverify.util.errors import UsageError
from trtverify.util.fsutil import atomic_write
from trtverify.util.words import count, plural

NAME = "e2e"
SHARD_DIR = "shard"


class _Model:
    """One model's backend and accumulator."""

    def __init__(self, name: str, backend: Backend | None, acc: Any):
        self.name = name
        self.backend = backend
        self.acc = acc
        self.infer_s = 0.0


def open_task(loaded: LoadedSuite) -> Task:
    """The suite's e2e task over its validation set (checked now, before any model runs)."""
    cfg = loaded.suite.stages.e2e
    if cfg is None:
        raise UsageError(f"{loaded.path}: has no stage e2e")
    task_class: type[Task] = TASKS.load(cfg.task)
    return task_class.open(cfg, loaded.search_path)


def _run_models(
    ctx: StageContext, task: Task, models: list[_Model], indices: range, timings: dict[str, float]
) -> dict[str, Any]:
    """Model by model over chunks of the data (all of it when it fits in `chunk_mb`).

    The first model runs while its chunk is read and preprocessed in background threads; the
    chunk is kept, and every other model then runs over it. Post-processing and metric updates
    run in one background thread, in order, at most a few batches behind. A model's backend is
    prepared before its first pass and closed after its last, so that with ONNX Runtime one
    intra-op thread pool is busy at a time: its threads can spin-wait between runs without
    stealing the cores of another model's pool. Creating and freeing sessions count as load time,
    not loop time (the raw-inference baseline in `bench/` leaves both out too).
    """
    cfg = task.cfg
    pre = make_preprocess(cfg.preprocess, ctx.loaded.search_path)
    input_name = cfg.preprocess.input
    limit = cfg.chunk_mb * 2**20
    n_batches = len(range(0, len(indices), cfg.batch_size))
    wait = sessions = 0.0  # sessions: creating and freeing them, counted as load time, not loop time
    read = 0  # batches taken from the reader so far
    done = [0] * len(models)
    chunks = 0

    def post(m: _Model, outputs: dict[str, np.ndarray], batch: Batch) -> None:
        task.update(m.acc, batch.index, task.postprocess(outputs, batch, m.name), batch.labels)

    pending: list[Future[None]] = []
    t_start = time.perf_counter()
    workers = default_workers(cfg.workers)
    source = iter(batches(task.reader, indices, cfg.batch_size, pre, workers))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="trtverify-post") as poster:

        def infer(k: int, batch: Batch) -> None:
            # a post-processing error stops the run here, not at the end; and a slow hook cannot
            # pile up model outputs in memory
            while pending and (pending[0].done() or len(pending) > 4):
                pending.pop(0).result()
            m = models[k]
            assert m.backend is not None
            meta = next((i for i in m.backend.inputs() if i.name == input_name), None) or m.backend.inputs()[0]
            x = batch.inputs
            if meta.shape is not None and len(meta.shape) == x.ndim - 1 and len(x) == 1:
                x = x[0]  # an input of one image without a batch axis ([3, H, W], as torchvision's detectors export)
            t0 = time.perf_counter()
            outputs = m.backend.infer({meta.name: x})
            m.infer_s += time.perf_counter() - t0
            pending.append(poster.submit(post, m, outputs, batch))
            done[k] += len(batch.index)
            ctx.progress(NAME, done[k], len(indices), m.name)

        while read < n_batches:
            chunk: list[Batch] = []
            held = 0
            chunks += 1
            for k, m in enumerate(models):
                assert m.backend is not None
                if chunks == 1:  # session creation: not part of inference
                    t0 = time.perf_counter()
                    m.backend.prepare()
                    sessions += time.perf_counter() - t0
                if k == 0:
                    while read < n_batches and (not chunk or held < limit):
                        t0 = time.perf_counter()
                        batch = next(source)
                        wait += time.perf_counter() - t0
                        read += 1
                        chunk.append(batch)
                        held += batch.inputs.nbytes
                        infer(0, batch)
                else:
                    for batch in chunk:
                        infer(k, batch)
                if read == n_batches:  # its last pass: free the session (and its threads) now
                    t0 = time.perf_counter()
                    m.backend.close()
                    sessions += time.perf_counter() - t0
        for f in pending:
            f.result()
    timings["wall_s"] = time.perf_counter() - t_start - sessions
    timed(timings, "load_s", sessions)
    timings["data_wait_s"] = wait
    for m in models:
        timings[f"{m.name}.infer_s"] = m.infer_s
    timings["inference_s"] = sum(m.infer_s for m in models)
    return {"workers": workers, "chunks": chunks, "overhead_vs_inference": overhead(timings)}


def overhead(timings: dict[str, float]) -> float | None:
    """Stage wall time over the models' inference time, minus 1."""
    raw = timings.get("inference_s", 0.0)
    return timings["wall_s"] / raw - 1.0 if raw > 0 and "wall_s" in timings else None


def run(ctx: StageContext) -> E2EResult:
    suite = ctx.loaded.suite
    cfg = suite.stages.e2e
    assert cfg is not None
    task = open_task(ctx.loaded)
    total = len(task.reader)
    data = ctx.work.data
    indices = data.positions(total, cfg.batch_size) if data is not None else range(total)
    sliced = {"shard_slice": [indices.start, indices.stop]} if data is not None else {}
    if data is not None and not indices:
        note = (
            f"shard {data.index}/{data.count}: no batches of the dataset's {count(total, 'sample')} fall to this shard"
        )
        return E2EResult(status="skipped", sharded_away=True, notes=[note], **sliced)
    # The first model runs while the data is read and preprocessed, so its ONNX Runtime threads do
    # not spin-wait (spinning threads would take the cores the reading needs); the others run over
    # the kept data with the configured setting (ONNX Runtime's default: spin).
    quiet = suite.backends.onnxruntime.model_copy(update={"allow_spinning": False})
    models = [_Model("reference", OnnxRuntimeBackend(Path(suite.models.reference), quiet), task.accumulator())]
    for n in ctx.candidates(suite.candidates_of(cfg)):
        spec = suite.models.candidates[n]
        if spec.capture is not None:  # captured elsewhere from the kit's validation batches: read, not run
            backend = _captured(n, spec.capture, Path(spec.path), cfg, task)
        else:
            backend = candidate_backend(spec.backend, Path(spec.path), suite.backends, ctx.samples, spec.capture)
        models.append(_Model(n, backend, task.accumulator()))
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        for m in models:  # inputs and outputs of every model first: a broken candidate fails before any inference
            assert m.backend is not None
            m.backend.load()
        timings["load_s"] = time.perf_counter() - t0
        loop = _run_models(ctx, task, models, indices, timings)
    finally:
        for m in models:
            assert m.backend is not None
            m.backend.close()
    # one state file per model, and per batch size in a batch-size sweep (several e2e results in one folder)
    tag = f"b{cfg.batch_size}-" if cfg.batch_sizes else ""
    states = _save_states(ctx.out_dir, models, tag) if data is not None and ctx.out_dir is not None else {}
    class_file = f"e2e-{tag}classes.npz"
    result = finalize(task, models, len(indices), class_file, timings=timings, **loop, **sliced, **states)
    path = drift.path_for(ctx.store.root, suite.name)  # --reference-dir moves it with the references
    return drift.apply(result, ctx.loaded, path, update=ctx.update_baseline, sharded=data is not None, shape=ctx.shape)


def _captured(
    name: str, capture: tuple[Path, str | None, int | None, Path | None], model: Path, cfg: E2EStage, task: Task
) -> Backend:
    from trtverify.stages.e2e.captured import CapturedBatches

    file, runner, iteration, _layerinfo = capture  # outputs only: no layer names to map
    if iteration is not None:
        raise UsageError(f"models.candidates.{name}.iteration: stage e2e reads every batch of {file}; compare one "
                         "iteration in stage layerwise only")  # fmt: skip
    return CapturedBatches(model, file, runner, cfg, task.reader)


def task_metrics(ctx: StageContext, paths: dict[str, Path]) -> dict[str, Any]:
    """The task metrics (TaskMetrics) of ONNX models run in ONNX Runtime over the whole validation set: what a
    gate would compare (the repair stage's e2e target)."""
    task = open_task(ctx.loaded)
    options = ctx.loaded.suite.backends.onnxruntime.model_copy(update={"allow_spinning": False})
    models = [_Model(name, OnnxRuntimeBackend(path, options), task.accumulator()) for name, path in paths.items()]
    try:
        for m in models:
            assert m.backend is not None
            m.backend.load()
        _run_models(ctx, task, models, range(len(task.reader)), {})
    finally:
        for m in models:
            assert m.backend is not None
            m.backend.close()
    return {m.name: m.acc.compute() for m in models}


def _save_states(out_dir: Path, models: list[_Model], tag: str = "") -> dict[str, Any]:
    """Each model's accumulator state, for `trtverify merge` (plain arrays, no pickle)."""
    files = {}
    for k, m in enumerate(models):
        rel = f"{SHARD_DIR}/e2e-{tag}{k}.npz"
        state = m.acc.state()
        atomic_write(out_dir / rel, lambda f, state=state: np.savez(f, **state))
        files[m.name] = rel
    return {"shard_states": files}


def gate_checks(
    cfg: E2EStage, name: str, ref: TaskMetrics, cand: TaskMetrics, worst_sample: int | None = None
) -> list[CheckResult]:
    """The suite's gates on one candidate's metrics against the reference's; `worst_sample`: the dataset
    position of the sample that changed most, which a failing gate names."""
    checks = []
    ref_s, cand_s = ref.scalars(), cand.scalars()
    where: dict[str, Any] = {"candidate": name, "worst_sample": worst_sample}
    for g in cfg.gates:
        r, c = ref_s.get(g.metric), cand_s.get(g.metric)
        if (
            r is None
            or c is None
            or (isinstance(r, float) and math.isnan(r))
            or (isinstance(c, float) and math.isnan(c))
        ):
            why = {"reason": f"metric '{g.metric}' not computed", "available": sorted(ref_s)}
            checks.append(failed_check(f"{name}: {g.metric}", NAME, g.metric, why, **where))
            continue
        detail = {"reference": r, "candidate": c}
        if g.max_drop is not None:
            checks.append(
                limit_check(
                    f"{name}: {g.metric} drop <= {g.max_drop:g}",
                    NAME,
                    f"{g.metric}_drop",
                    r - c,
                    g.max_drop,
                    "<=",
                    detail=detail,
                    **where,
                )
            )
        if g.max_rel_drop is not None:
            rel = (r - c) / r if r else (0.0 if r == c else math.inf)
            checks.append(
                limit_check(
                    f"{name}: {g.metric} relative drop <= {g.max_rel_drop:g}",
                    NAME,
                    f"{g.metric}_rel_drop",
                    rel,
                    g.max_rel_drop,
                    "<=",
                    detail=detail,
                    **where,
                )
            )
        if g.min is not None:
            checks.append(
                limit_check(f"{name}: {g.metric} >= {g.min:g}", NAME, g.metric, c, g.min, ">=", detail=detail, **where)
            )
    return checks


SANITY_CHECK = "reference sanity: not degenerate"


def reference_sanity(task: Task, ref: TaskMetrics) -> tuple[ReferenceSanity | None, list[CheckResult], list[str]]:
    """The reference's sanity record, its check (with reference_sanity: fail) and its warning note."""
    mode = task.cfg.reference_sanity
    if mode == "ignore":
        return None, [], []
    reasons = task.sanity(ref)
    record = ReferenceSanity(mode=mode, degenerate=bool(reasons), reasons=reasons)
    notes = []
    if reasons:
        then = "fails" if mode == "fail" else "warns (stages.e2e.reference_sanity: fail makes it a failing check)"
        notes.append(
            f"warning: the reference looks degenerate: {'; '.join(reasons)}. Drop gates against it say little; "
            f"check its preprocessing, post-processing and labels. This {then}"
        )
    checks = []
    if mode == "fail":
        detail = {"reasons": reasons} if reasons else {}
        checks.append(limit_check(SANITY_CHECK, NAME, "reference_degenerate", len(reasons), 0, "<=", detail=detail))
    return record, checks, notes


def finalize(
    task: Task, models: Sequence[_Model], evaluated: int, class_file: str = CLASS_FILE, **fields: Any
) -> E2EResult:
    """Metrics, deltas, worst samples and gates from the models' accumulators. Above INLINE_CLASSES classes, the
    per-class rows and confusion matrices go to the file `class_file` beside results.json (the result carries it),
    and each candidate lists the classes that dropped most."""
    cfg = task.cfg
    metrics = {m.name: m.acc.compute() for m in models}
    ref = metrics[models[0].name]
    many = class_count(ref) > INLINE_CLASSES
    shown = inline if many else lambda m: m
    checks = [limit_check("samples evaluated", NAME, "samples", evaluated, 1, ">=")]
    sanity, sanity_checks, sanity_notes = reference_sanity(task, ref)
    checks += sanity_checks
    fields["notes"] = [*fields.get("notes", []), *sanity_notes]
    cands = []
    ref_samples = task.per_sample(models[0].acc) if models[1:] else None  # once, not once per candidate
    for m in models[1:]:
        cm = metrics[m.name]
        worst = task.worst(ref_samples, task.per_sample(m.acc), max(cfg.worst, 1))  # the first names a failing gate's
        gates = gate_checks(cfg, m.name, ref, cm, worst[0].index if worst else None)  # type: ignore[attr-defined]
        checks += gates
        cand_s = cm.scalars()
        per_class = task.per_class(ref, cm)
        cands.append(
            E2ECandidate(
                name=m.name,
                metrics=shown(cm),
                deltas={k: cand_s[k] - v for k, v in ref.scalars().items() if k in cand_s},
                per_class=dropped_most(per_class, WORST_CLASSES) if many else per_class,
                confused=task.confused(ref, cm, WORST_CLASSES),
                worst=worst[: cfg.worst],
                passed=all(c.passed for c in gates),
            )
        )
    files = {}
    if many:
        fields["class_data"], files[class_file] = pack(metrics, class_file)
    return E2EResult(
        status=status_of(checks),
        checks=checks,
        task=cfg.task,
        dataset=DatasetInfo(**task.reader.info, samples=len(task.reader)),
        samples=evaluated,
        gated=list(dict.fromkeys(g.metric for g in cfg.gates)),
        reference=shown(ref),
        reference_sanity=sanity,
        candidates=cands,
        **fields,
    ).with_files(files)


def merge_shards(loaded: LoadedSuite, shards: Sequence[tuple[Path, E2EResult]]) -> E2EResult:
    """One e2e result from the shards' accumulator states: each model's accumulators merged, then the
    metrics computed over the union of the samples (COCO over all detections, not an average)."""
    task = open_task(loaded)
    models: list[_Model] = []
    evaluated = 0
    for d, stage in shards:
        files = stage.shard_states or {}
        if models and list(files) != [m.name for m in models]:
            raise UsageError(
                f"{d}: its e2e stage evaluated {', '.join(files)}, another shard {', '.join(m.name for m in models)}"
            )
        for k, (name, rel) in enumerate(files.items()):
            part = task.restore(_load_state(d / rel))
            if len(models) <= k:
                models.append(_Model(name, None, part))
                continue
            try:
                models[k].acc.merge(part)
            except ValueError as exc:
                raise UsageError(f"{d}: {exc}") from exc
        if stage.shard_slice:
            evaluated += stage.shard_slice[1] - stage.shard_slice[0]
    if not models:
        raise UsageError("merge: no shard wrote e2e accumulator states")
    timings = sum_timings(stage.timings for _, stage in shards)
    note = f"merged from {count(len(shards), 'shard')}: {evaluated} of {count(len(task.reader), 'sample')}"
    # the class-data file's name the shards used (it tells the batch sizes of a sweep apart)
    class_file = next((s.class_data.path for _, s in shards if s.class_data is not None), CLASS_FILE)
    result = finalize(
        task, models, evaluated, class_file, timings=timings, notes=[note], overhead_vs_inference=overhead(timings)
    )
    # the baseline the shards would have compared with (their --reference-dir), else the suite's
    recorded = next((s.baseline_file for _, s in shards if s.baseline_file), None)
    path = Path(recorded) if recorded else drift.path_for(loaded.suite.reference_dir, loaded.suite.name)
    return drift.apply(result, loaded, path, update=False, sharded=False, shape=shards[0][1].shape)


def _load_state(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {k: data[k] for k in data.files}
    except FileNotFoundError:
        raise UsageError(f"{path}: missing (the shard's folder must hold what `trtverify run --shard` wrote)") from None
    except Exception as exc:  # OSError, ValueError, BadZipFile, EOFError, zlib.error: damaged or foreign
        raise UsageError(f"{path}: not a shard's accumulator state ({type(exc).__name__}: {exc})") from None


def worst_feeds(loaded: LoadedSuite, positions: Sequence[int]) -> list[dict[str, np.ndarray]]:
    """Feeds for the layerwise stage: the samples at `positions` of the e2e dataset, preprocessed."""
    cfg = loaded.suite.stages.e2e
    if cfg is None:
        raise UsageError(
            "--samples worst reads the samples from stage e2e's dataset: configure stages.e2e in the suite"
        )
    task_class: type[Task] = TASKS.load(cfg.task)
    if task_class.open.__func__ is not Task.open.__func__:  # type: ignore[attr-defined]
        reader = task_class.open(cfg, loaded.search_path).reader  # its own samples (keypoints: person crops)
    else:  # the dataset alone: the task would also load its post-processing hook, which nothing here runs
        reader = open_dataset(cfg.dataset, masks=task_class.reads_masks)
    pre = make_preprocess(cfg.preprocess, loaded.search_path)
    name = cfg.preprocess.input
    if name is None:
        from trtverify.graph.onnxinfo import graph_io, load_io

        name = graph_io(load_io(Path(loaded.suite.models.reference)))[0][0].name
    missing = [i for i in positions if not 0 <= i < len(reader)]
    if missing:  # the dataset changed since that run: feeding fewer samples than announced would hide it
        raise UsageError(
            f"--samples worst: sample {plural('position', len(missing))} {', '.join(map(str, missing[:5]))} "
            f"{plural('is|are', len(missing))} not in the e2e dataset "
            f"({count(len(reader), 'sample')}): it changed since that run; run the e2e stage again"
        )
    return [{name: pre(reader.image(i))[None]} for i in positions]
