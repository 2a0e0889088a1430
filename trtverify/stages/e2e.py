"""Stage `e2e`: task metrics of the reference and each candidate on a validation set.

The data is read and preprocessed once, in background threads, while the first model runs
over it; it is kept (in chunks of `chunk_mb`), and the other models run over it in turn. Gates compare each
candidate with the reference: `max_drop` (absolute), `max_rel_drop`, `min`. The samples
where candidate and reference disagree most are listed for drill-down
(`trtverify run --stage layerwise --samples worst`).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends import candidate_backend
from trtverify.backends.onnxruntime import OnnxRuntimeBackend
from trtverify.compare.checks import CheckResult
from trtverify.config.models import E2EStage
from trtverify.errors import UsageError
from trtverify.stages.base import StageContext, StageResult
from trtverify.tasks.datasets import Batch, Reader, batches, default_workers, make_preprocess, open_dataset

NAME = "e2e"
CLASSIFICATION_METRICS = ("accuracy", "macro_f1", "micro_f1", "weighted_f1")
DETECTION_METRICS = (
    "map",
    "ap50",
    "ap75",
    "ap_small",
    "ap_medium",
    "ap_large",
    "ar1",
    "ar10",
    "ar100",
    "ar_small",
    "ar_medium",
    "ar_large",
    "precision",
    "recall",
    "f1",
)


def gate_metrics(cfg: E2EStage) -> tuple[str, ...]:
    if cfg.task == "classification":
        return CLASSIFICATION_METRICS + tuple(f"top{k}_accuracy" for k in cfg.top_k)
    return DETECTION_METRICS


def _postprocess(cfg: E2EStage, search_path: Any) -> Any:
    """The suite's post-processing hook, or None for the built-in."""
    from trtverify.hooks import load_hook

    if cfg.postprocess.hook:
        return load_hook(cfg.postprocess.hook, search_path, what="postprocess.hook")
    return None


def _call(hook: Any, outputs: dict[str, np.ndarray], **context: Any) -> Any:
    """Call a user hook with the context keywords it declares (all of them if it takes **kwargs)."""
    import inspect

    try:
        params = inspect.signature(hook).parameters
    except (TypeError, ValueError):
        return hook(outputs, **context)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return hook(outputs, **context)
    return hook(outputs, **{k: v for k, v in context.items() if k in params})


def _softmax(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64) - x.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class _Model:
    """One model's backend, accumulator and per-sample record."""

    def __init__(self, name: str, backend: Any):
        self.name = name
        self.backend = backend
        self.acc: Any = None
        self.infer_s = 0.0
        self.batches: list[
            tuple[list[int], np.ndarray, np.ndarray]
        ] = []  # classification: (positions, argmax, softmax float32) per batch
        self.record: dict[int, np.ndarray] | None = None  # raw predictions by position, kept for a sharded run


def _select_output(outputs: dict[str, np.ndarray], wanted: str | None, model: str) -> np.ndarray:
    if wanted is None:
        return next(iter(outputs.values()))
    if wanted not in outputs:
        raise UsageError(f"postprocess.output '{wanted}' is not an output of {model} (outputs: {', '.join(outputs)})")
    return outputs[wanted]


def _detections(outputs: dict[str, np.ndarray], batch: Batch, cfg: E2EStage, hook: Any, model: str) -> list[np.ndarray]:
    input_size = tuple(batch.inputs.shape[2:4] if cfg.preprocess.layout == "NCHW" else batch.inputs.shape[1:3])
    if hook is not None:
        dets = _call(hook, outputs, image_sizes=batch.sizes, input_size=input_size)
    else:
        raw = _select_output(outputs, cfg.postprocess.output, model)
        if raw.ndim != 3 or raw.shape[-1] != 6:
            raise UsageError(
                f"{model}: detection output of shape {list(raw.shape)} is not the raw layout [B, K, 6] "
                "(x1, y1, x2, y2, score, class); name the right output or give a postprocess.hook"
            )
        dets = []
        for b, (h, w) in enumerate(batch.sizes):
            d = raw[b].astype(np.float64).copy()
            d[:, [0, 2]] *= w / input_size[1]
            d[:, [1, 3]] *= h / input_size[0]
            dets.append(d)
    if len(dets) != len(batch.index):
        raise UsageError(
            f"{model}: postprocessing returned {len(dets)} detection arrays for a batch of {len(batch.index)}"
        )
    return [np.asarray(d, dtype=np.float64).reshape(-1, 6) for d in dets]


def _consume(m: _Model, cfg: E2EStage, reader: Reader, index: list[int], out: Any, labels: Any = None) -> None:
    """Add one batch of a model's post-processed outputs (scores [B, C] or B detection arrays)."""
    from trtverify.tasks.classification import ClassificationAccumulator
    from trtverify.tasks.detection import DetectionAccumulator

    if cfg.task == "classification":
        scores = np.asarray(out)
        if scores.ndim != 2:
            raise UsageError(
                f"{m.name}: classification scores must be [batch, classes], got shape {list(scores.shape)}"
            )
        if m.acc is None:
            m.acc = ClassificationAccumulator(
                scores.shape[1], top_k=[k for k in cfg.top_k if k <= scores.shape[1]], class_names=reader.class_names
            )
        m.acc.update(
            np.asarray(labels if labels is not None else [reader.label(i) for i in index]),
            scores,
            ids=[reader.ids[i] for i in index],
        )
        # whole-batch arrays, no per-sample Python: this runs beside inference and holds the GIL
        m.batches.append((list(index), scores.argmax(axis=1), _softmax(scores).astype(np.float32)))
        if m.record is not None:
            m.record.update(zip(index, np.array(scores)))
    else:
        if m.acc is None:
            m.acc = DetectionAccumulator(reader.truth, iou=cfg.iou, score_threshold=cfg.score_threshold)
        m.acc.update([reader.ids[i] for i in index], out)
        if m.record is not None:
            m.record.update(zip(index, out))


def _post(m: _Model, cfg: E2EStage, reader: Reader, hook: Any, outputs: dict[str, np.ndarray], batch: Batch) -> None:
    """Post-process one batch of a model's outputs (hook or built-in) and add it to its metrics."""
    if cfg.task == "classification":
        out = (
            _call(hook, outputs, image_sizes=batch.sizes)
            if hook
            else _select_output(outputs, cfg.postprocess.output, m.name)
        )
    else:
        out = _detections(outputs, batch, cfg, hook, m.name)
    _consume(m, cfg, reader, batch.index, out, batch.labels)


def _run_models(
    ctx: StageContext, cfg: E2EStage, reader: Reader, models: list[_Model], result: StageResult, indices: range
) -> None:
    """Model by model over chunks of the data (all of it when it fits in `chunk_mb`).

    The first model runs while its chunk is read and preprocessed in background threads; the
    chunk is kept, and every other model then runs over it. Post-processing and metric updates
    run in one background thread, in order, at most a few batches behind. A model's backend is
    prepared before its first pass and closed after its last, so that with ONNX Runtime one
    intra-op thread pool is busy at a time: its threads can spin-wait between runs without
    stealing the cores of another model's pool. Creating and freeing sessions count as load time,
    not loop time (the raw-inference baseline in `bench/` leaves both out too).
    """
    from concurrent.futures import Future, ThreadPoolExecutor

    pre = make_preprocess(cfg.preprocess, ctx.loaded.search_path)
    hook = _postprocess(cfg, ctx.loaded.search_path)
    input_name = cfg.preprocess.input
    limit = cfg.chunk_mb * 2**20
    n_batches = len(range(0, len(indices), cfg.batch_size))
    wait = sessions = 0.0  # sessions: creating and freeing them, counted as load time, not loop time
    read = 0  # batches taken from the reader so far
    done = [0] * len(models)
    chunks = 0

    pending: list[Future[None]] = []
    t_start = time.perf_counter()
    workers = default_workers(cfg.workers)
    result.details["workers"] = workers
    source = iter(batches(reader, indices, cfg.batch_size, pre, workers))
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="trtverify-post") as poster:

        def infer(k: int, batch: Batch) -> None:
            # a post-processing error stops the run here, not at the end; and a slow hook cannot
            # pile up model outputs in memory
            while pending and (pending[0].done() or len(pending) > 4):
                pending.pop(0).result()
            m = models[k]
            name = input_name or m.backend.inputs()[0].name
            t0 = time.perf_counter()
            outputs = m.backend.infer({name: batch.inputs})
            m.infer_s += time.perf_counter() - t0
            pending.append(poster.submit(_post, m, cfg, reader, hook, outputs, batch))
            done[k] += len(batch.index)
            ctx.progress(NAME, done[k], len(indices), m.name)

        while read < n_batches:
            chunk: list[Batch] = []
            held = 0
            chunks += 1
            for k, m in enumerate(models):
                if chunks == 1 and hasattr(m.backend, "prepare"):  # session creation: not part of inference
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
    result.timings["wall_s"] = time.perf_counter() - t_start - sessions
    result.timings["load_s"] = result.timings.get("load_s", 0.0) + sessions
    result.timings["data_wait_s"] = wait
    for m in models:
        result.timings[f"{m.name}.infer_s"] = m.infer_s
    result.timings["inference_s"] = sum(m.infer_s for m in models)
    result.details["chunks"] = chunks
    result.details["overhead_vs_inference"] = _overhead(result.timings)


def _overhead(timings: dict[str, float]) -> float | None:
    """Stage wall time over the models' inference time, minus 1."""
    raw = timings.get("inference_s", 0.0)
    return timings["wall_s"] / raw - 1.0 if raw > 0 and "wall_s" in timings else None


def _predictions(m: _Model) -> dict[int, tuple[int, np.ndarray]]:
    """Position -> (predicted class, softmax row) of a classification model."""
    return {i: (int(p), prob) for index, preds, probs in m.batches for i, p, prob in zip(index, preds, probs)}


def _worst_classification(
    reader: Reader, ref: dict[int, tuple[int, np.ndarray]], cand: dict[int, tuple[int, np.ndarray]], n: int
) -> list[dict[str, Any]]:
    """`ref`, `cand`: the models' `_predictions`."""
    rows = []
    for i, (rp, rprob) in ref.items():
        cp, cprob = cand[i]
        label = reader.label(i)
        score = abs(float(rprob[rp]) - float(cprob[rp]))
        flipped = rp != cp
        lost = flipped and rp == label
        rows.append((lost, flipped, score, i, rp, cp, label))
    rows.sort(key=lambda r: (not r[0], not r[1], -r[2], r[3]))
    return [
        {
            "index": i,
            "id": reader.ids[i],
            "label": label,
            "reference": rp,
            "candidate": cp,
            "flipped": flipped,
            "lost": lost,
            "prob_change": score,
        }
        for lost, flipped, score, i, rp, cp, label in rows[:n]
    ]


def _worst_detection(reader: Reader, ref: _Model, cand: _Model, n: int) -> list[dict[str, Any]]:
    ra, ca = ref.acc.per_image(), cand.acc.per_image()
    rc, cc = ref.acc.per_image_counts(), cand.acc.per_image_counts()
    index = {img_id: i for i, img_id in enumerate(reader.ids)}
    rows = []
    for k, r in ra.items():
        c = ca.get(k, math.nan)
        if r != r or c != c or r - c <= 0:  # undefined (no ground-truth box) or not worse
            continue
        rows.append((r - c, k))
    rows.sort(key=lambda row: (-row[0], index.get(row[1], 0)))
    return [
        {
            "index": index[k],
            "id": k,
            "reference_ap": ra[k],
            "candidate_ap": ca[k],
            "ap_drop": d,
            "reference_fp": rc.get(k, {}).get("fp"),
            "candidate_fp": cc.get(k, {}).get("fp"),
        }
        for d, k in rows[:n]
    ]


def _per_class(ref: dict[str, Any], cand: dict[str, Any], task: str) -> list[dict[str, Any]]:
    key = "f1" if task == "classification" else "ap"
    ident = "class" if task == "classification" else "category_id"
    by = {row[ident]: row for row in cand.get("per_class", [])}
    out = []
    for row in ref.get("per_class", []):
        c = by.get(row[ident], {})
        entry = {
            ident: row[ident],
            "name": row.get("name"),
            f"reference_{key}": row.get(key),
            f"candidate_{key}": c.get(key),
        }
        if row.get(key) is not None and c.get(key) is not None:
            entry[f"delta_{key}"] = c[key] - row[key]
        out.append(entry)
    return out


def _gates(cfg: E2EStage, name: str, ref: dict[str, Any], cand: dict[str, Any]) -> list[CheckResult]:
    checks = []
    for g in cfg.gates:
        r, c = ref.get(g.metric), cand.get(g.metric)
        if (
            r is None
            or c is None
            or (isinstance(r, float) and math.isnan(r))
            or (isinstance(c, float) and math.isnan(c))
        ):
            checks.append(
                CheckResult(
                    f"{name}: {g.metric}",
                    g.metric,
                    None,
                    None,
                    "==",
                    False,
                    None,
                    {
                        "reason": f"metric '{g.metric}' not computed",
                        "available": sorted(k for k, v in ref.items() if isinstance(v, (int, float))),
                    },
                )
            )
            continue
        detail = {"reference": r, "candidate": c}
        if g.max_drop is not None:
            checks.append(
                CheckResult(
                    f"{name}: {g.metric} drop <= {g.max_drop:g}",
                    f"{g.metric}_drop",
                    r - c,
                    g.max_drop,
                    "<=",
                    r - c <= g.max_drop,
                    None,
                    detail,
                )
            )
        if g.max_rel_drop is not None:
            rel = (r - c) / r if r else (0.0 if r == c else math.inf)
            checks.append(
                CheckResult(
                    f"{name}: {g.metric} relative drop <= {g.max_rel_drop:g}",
                    f"{g.metric}_rel_drop",
                    rel,
                    g.max_rel_drop,
                    "<=",
                    rel <= g.max_rel_drop,
                    None,
                    detail,
                )
            )
        if g.min is not None:
            checks.append(
                CheckResult(f"{name}: {g.metric} >= {g.min:g}", g.metric, c, g.min, ">=", c >= g.min, None, detail)
            )
    return checks


def run(ctx: StageContext) -> StageResult:
    from trtverify.shard import SHARD_DIR, e2e_slice, save_predictions

    suite = ctx.loaded.suite
    cfg = suite.stages.e2e
    assert cfg is not None
    result = StageResult(NAME, "failed")
    reader = open_dataset(cfg.dataset)
    indices = e2e_slice(len(reader), cfg.batch_size, ctx.shard)
    if ctx.shard is not None and not indices:
        return StageResult(
            NAME,
            "skipped",
            details={"shard_slice": [indices.start, indices.stop], "sharded_away": True},
            notes=[f"shard {ctx.shard}: no batches of the dataset's {len(reader)} samples fall to this shard"],
        )
    names = suite.candidates_of(cfg)
    # The first model runs while the data is read and preprocessed, so its ONNX Runtime threads do
    # not spin-wait (spinning threads would take the cores the reading needs); the others run over
    # the kept data with the configured setting (ONNX Runtime's default: spin).
    quiet = suite.backends.onnxruntime.model_copy(update={"allow_spinning": False})
    models = [_Model("reference", OnnxRuntimeBackend(Path(suite.models.reference), quiet))]
    for n in names:
        spec = suite.models.candidates[n]
        models.append(_Model(n, candidate_backend(spec.backend, Path(spec.path), suite.backends, ctx.samples)))
    if ctx.shard is not None:
        result.details["shard_slice"] = [indices.start, indices.stop]
        for m in models:
            m.record = {}
    t0 = time.perf_counter()
    for m in models:  # inputs and outputs of every model first: a broken candidate fails before any inference
        m.backend.load()
    result.timings["load_s"] = time.perf_counter() - t0
    try:
        _run_models(ctx, cfg, reader, models, result, indices)
    finally:
        for m in models:
            m.backend.close()
    if ctx.shard is not None and ctx.out_dir is not None:
        files = {}
        for k, m in enumerate(models):
            rel = f"{SHARD_DIR}/e2e-{k}.npz"
            save_predictions(ctx.out_dir / rel, cfg.task, m.record or {})
            files[m.name] = rel
        result.details["shard_predictions"] = files
    return finalize(cfg, reader, models, result, len(indices))


def finalize(cfg: E2EStage, reader: Reader, models: list[_Model], result: StageResult, evaluated: int) -> StageResult:
    """Metrics, deltas, worst samples and gates from the models' accumulators."""
    metrics = {m.name: m.acc.compute() for m in models}
    ref = metrics["reference"]
    result.details.update({"task": cfg.task, "dataset": {**reader.info, "samples": len(reader)}, "samples": evaluated})
    result.details["reference"] = ref
    checks = [CheckResult("samples evaluated", "samples", float(evaluated), 1.0, ">=", evaluated >= 1)]
    cands = []
    ref_predictions = _predictions(models[0]) if cfg.task == "classification" else {}  # once, not once per candidate
    for m in models[1:]:
        cm = metrics[m.name]
        scalar = [k for k, v in ref.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        worst = (
            _worst_classification(reader, ref_predictions, _predictions(m), cfg.worst)
            if cfg.task == "classification"
            else _worst_detection(reader, models[0], m, cfg.worst)
        )
        gate_checks = _gates(cfg, m.name, ref, cm)
        checks += gate_checks
        cands.append(
            {
                "name": m.name,
                "metrics": cm,
                "deltas": {k: cm[k] - ref[k] for k in scalar if isinstance(cm.get(k), (int, float))},
                "per_class": _per_class(ref, cm, cfg.task),
                "worst": worst,
                "passed": all(c.passed for c in gate_checks),
            }
        )
    result.details["candidates"] = cands
    return StageResult.from_checks(NAME, checks, details=result.details, notes=result.notes, timings=result.timings)


def merge_shards(loaded: Any, shards: list[tuple[Path, dict[str, Any]]]) -> StageResult:
    """One e2e result from the shards' raw predictions: the metrics over the union of samples."""
    from trtverify.shard import add_timings, load_predictions

    cfg = loaded.suite.stages.e2e
    if cfg is None:
        raise UsageError(f"{loaded.path}: has no stage e2e, but the shards ran one")
    reader = open_dataset(cfg.dataset)
    names: list[str] | None = None
    records: dict[str, dict[int, np.ndarray]] = {}
    result = StageResult(NAME, "failed")
    for d, stage in shards:
        files = stage.get("shard_predictions") or {}
        if names is None:
            names = list(files)
        elif list(files) != names:
            raise UsageError(f"{d}: its e2e stage evaluated {', '.join(files)}, another shard {', '.join(names)}")
        for name, rel in files.items():
            part = load_predictions(d / rel, cfg.task)
            both = records.setdefault(name, {}).keys() & part.keys()
            if both:
                raise UsageError(f"{d}: sample {min(both)} of model {name} is also in another shard")
            records[name].update(part)
        add_timings(result.timings, stage.get("timings", {}))
    if not names:
        raise UsageError("merge: no shard wrote e2e predictions")
    models = [_Model(n, None) for n in names]
    evaluated = sorted(records[names[0]])
    for m in models:
        rec = records[m.name]
        if sorted(rec) != evaluated:
            raise UsageError(f"merge: model {m.name} has predictions for other samples than the reference")
        for lo in range(0, len(evaluated), cfg.batch_size):
            index = evaluated[lo : lo + cfg.batch_size]
            out = np.stack([rec[i] for i in index]) if cfg.task == "classification" else [rec[i] for i in index]
            _consume(m, cfg, reader, index, out)
    result.notes.append(f"merged from {len(shards)} shard(s): {len(evaluated)} of {len(reader)} samples")
    result.details["overhead_vs_inference"] = _overhead(result.timings)
    return finalize(cfg, reader, models, result, len(evaluated))


def worst_feeds(ctx_loaded: Any, results_path: Path, limit: int | None = None) -> list[dict[str, np.ndarray]]:
    """Feeds for the layerwise stage: the worst samples a previous e2e run listed (union over candidates)."""
    try:
        previous = json.loads(Path(results_path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UsageError(
            f"--samples worst needs a previous run with stage e2e: {results_path} not found (run the e2e stage first, or pass --from-results)"
        ) from None
    except ValueError as exc:
        raise UsageError(f"{results_path}: not valid JSON ({exc})") from exc
    e2e = next((s for s in previous.get("stages", []) if s.get("name") == NAME), None)
    if e2e is None or not e2e.get("candidates"):
        raise UsageError(f"{results_path}: has no e2e results with worst samples; run the e2e stage first")
    order: list[int] = []
    for cand in e2e["candidates"]:
        for w in cand.get("worst", []):
            if w["index"] not in order:
                order.append(w["index"])
    if limit:
        order = order[:limit]
    if not order:
        raise UsageError(f"{results_path}: the e2e run listed no worst samples")
    cfg = ctx_loaded.suite.stages.e2e
    if cfg is None:
        raise UsageError(
            "--samples worst reads the samples from stage e2e's dataset: configure stages.e2e in the suite"
        )
    reader = open_dataset(cfg.dataset)
    pre = make_preprocess(cfg.preprocess, ctx_loaded.search_path)
    name = cfg.preprocess.input
    if name is None:
        from trtverify.onnxinfo import graph_io, load_io

        name = graph_io(load_io(Path(ctx_loaded.suite.models.reference)))[0][0].name
    return [{name: pre(reader.image(i))[None]} for i in order if i < len(reader)]
