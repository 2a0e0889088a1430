"""Stage `perf`: latency, throughput and speed-up of every model, gated; what TensorRT built for each engine.

Models that run here (the reference and candidates under ONNX Runtime, the PyTorch model, TensorRT candidates
through Polygraphy's runner where TensorRT can run) are measured at each batch size with warm-up and the
stability rule of `trtverify.perf.measure`. TensorRT engines built and measured elsewhere are read from the files
trtexec wrote for them (`stages.perf.engines`): latency from its performance summary, per-layer time and
precision from its exports, with the engine audit's findings and, against another engine (`vs`), the layer diff.

Speed-ups compare rows measured in the same environment only (a CPU run here against an A100 engine means
nothing); the regression gate compares each row with the stored baseline from the same environment, and a
baseline from another environment is reported as not comparable, never as a failure.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from trtverify.backends.base import Backend, candidate_backend
from trtverify.backends.onnxruntime import OnnxRuntimeBackend
from trtverify.compare.checks import CheckResult, failed_check, limit_check
from trtverify.config.findings import selects
from trtverify.config.perfstage import PerfEngine, PerfStage
from trtverify.engine.audit import Audit, audit_layers, engine_layers
from trtverify.engine.diff import EngineDiff, diff_read
from trtverify.engine.metadata import batch_of, device_fingerprint, profile_performance
from trtverify.graph.onnxinfo import TensorMeta
from trtverify.perf import baseline as store
from trtverify.perf.measure import Budget, LatencyStats, measure
from trtverify.stages.base import StageContext, StageResult, status_of
from trtverify.util.errors import BackendError, UsageError
from trtverify.util.record import Record, optional
from trtverify.util.words import count

NAME = "perf"
TENSORRT = ("tensorrt", "tensorrt-rtx")
Role = Literal["reference", "candidate", "pytorch", "engine"]


class BaselineCompare(Record):
    """This row against the stored baseline."""

    state: Literal["comparable", "not_comparable", "missing", "updated"]
    median_ms: float | None = optional("the baseline's median")
    change: float | None = optional("(median - baseline median) / baseline median")
    why: str | None = optional("why it is not comparable")


class PerfRow(Record):
    """One model at one batch size."""

    key: str = Field(
        description="role:model:backend@bBATCH (no @b part where the batch is not known), the baseline's key"
    )
    model: str = Field(description="reference, a candidate's name, pytorch, or an engine's name")
    role: Role
    backend: str
    source: Literal["measured", "trtexec"]
    batch: int | None
    median_ms: float | None = Field(description="latency per call: the number speed-ups and baselines use")
    mean_ms: float | None
    p99_ms: float | None
    median_from: str = Field(description="where median_ms comes from")
    throughput: float | None = Field(description="samples per second")
    stats: LatencyStats | None = optional("the measurement (source measured)")
    speedup: float | None = optional("latency of `speedup_vs` / this latency")
    speedup_vs: str | None = optional("the row compared with: the reference, or an engine's `vs`")
    speedup_vs_pytorch: float | None = optional("PyTorch's latency / this latency")
    fingerprint: dict[str, str | None] = Field(description="the environment it was measured in")
    baseline: BaselineCompare | None = optional()


class EngineEntry(Record):
    """An engine read from trtexec's files."""

    name: str
    files: list[str]
    vs: str | None = optional()
    audit: Audit
    diff: EngineDiff | None = optional("against `vs`: A is `vs`, B this engine")


class PerfResult(StageResult):
    """Stage perf: latency and throughput per model and batch size, speed-ups, baseline, engine audits."""

    name: Literal["perf"] = "perf"
    rows: list[PerfRow] | None = optional("one per model and batch size")
    engines: list[EngineEntry] | None = optional("one per engine of stages.perf.engines")
    baseline_file: str | None = optional("reference_outputs/<suite>/perf/baseline.json")
    fingerprint: dict[str, str | None] | None = optional("this machine's environment")


def batch_feed(samples: list[dict[str, np.ndarray]], inputs: list[TensorMeta], batch: int) -> dict[str, np.ndarray]:
    """A feed of `batch` rows: the samples' rows along the first axis, cycled as needed."""
    feed = {}
    for meta in inputs:
        dim0 = meta.shape[0] if meta.shape else None
        if isinstance(dim0, int) and dim0 != batch:
            raise UsageError(
                f"stages.perf.batch_sizes: {meta.name} fixes its first dimension to {dim0}, so batch {batch} cannot "
                f"run; list batch_sizes: [{dim0}]"
            )
        rows = [s[meta.name] for s in samples]
        if any(r.ndim == 0 for r in rows):
            raise UsageError(f"stages.perf: input {meta.name} is a scalar: it has no batch dimension to size")
        have = np.concatenate(rows, axis=0)
        reps = -(-batch // have.shape[0])
        feed[meta.name] = np.ascontiguousarray(np.concatenate([have] * reps, axis=0)[:batch])
    return feed


def default_batches(samples: list[dict[str, np.ndarray]], inputs: list[TensorMeta]) -> list[int]:
    first = samples[0][inputs[0].name] if samples and inputs else None
    return [int(first.shape[0])] if first is not None and first.ndim else [1]


def _budget(cfg: PerfStage) -> Budget:
    return Budget(warmup=cfg.warmup, window=cfg.window, max_cv=cfg.max_cv, min_runs=cfg.min_runs,
                  max_runs=cfg.max_runs, budget_s=cfg.budget_s, min_time_s=cfg.min_time_s)  # fmt: skip


def _measured_row(model: str, role: Role, backend: str, stats: LatencyStats, fp: dict[str, str | None]) -> PerfRow:
    return PerfRow(
        key=f"{role}:{model}:{backend}@b{stats.batch}",
        model=model,
        role=role,
        backend=backend,
        source="measured",
        batch=stats.batch,
        median_ms=stats.median_ms,
        mean_ms=stats.mean_ms,
        p99_ms=stats.p99_ms,
        median_from=f"measured: median of {count(stats.runs, 'run')} after {stats.warmup} warm-up ({stats.stopped_by})",
        throughput=stats.throughput,
        stats=stats,
        fingerprint=fp,
    )


def _measure_backend(ctx: StageContext, backend: Backend, feeds: dict[int, dict[str, np.ndarray]], what: str,
                     budget: Budget, notes: list[str], failures: list[CheckResult]) -> list[LatencyStats]:  # fmt: skip
    """Each batch size timed; nothing where the model does not run natively here (a note says why) or cannot be
    loaded or run (a failed check says why: a session that crashes ONNX Runtime is made in a child process first,
    backends/ortprobe.py)."""
    out = []
    if isinstance(backend, OnnxRuntimeBackend):
        backend.probe_first = True
    try:
        with backend:
            if isinstance(backend, OnnxRuntimeBackend) and backend.emulated is not None:
                notes.append(
                    f"{what} not timed: ONNX Runtime's {', '.join(backend.options.providers)} has no kernels for its "
                    "BF16 types, so it runs emulated in FP32 here (for accuracy), whose time says nothing of its "
                    "speed; time it where it runs natively (a GPU provider, or TensorRT)"
                )
                return out
            backend.prepare()
            plugins = getattr(backend, "plugin_labels", None)
            if plugins:
                notes.append(
                    f"{what}: its time includes {count(len(plugins), 'plugin node')} ({', '.join(plugins[:3])}) "
                    "computed by a reference here (numpy, a hook or a custom-op library), not by the TensorRT plugin"
                )
            for batch, feed in feeds.items():
                ctx.progress(NAME, 0, 0, f"timing {what} at batch {batch}")
                out.append(measure(lambda f=feed: backend.infer(f), batch, budget))
    except BackendError as exc:
        failures.append(failed_check(f"{what}: loads and runs", NAME, "runs", {"reason": str(exc)}))
    return out


def _torch_wanted(ctx: StageContext, cfg: PerfStage, notes: list[str]) -> bool:
    suite = ctx.loaded.suite
    if cfg.pytorch == "never" or suite.models.pytorch is None:
        if cfg.pytorch == "always":
            raise UsageError("stages.perf.pytorch: always, but the suite has no models.pytorch")
        return False
    if cfg.pytorch == "auto" and importlib.util.find_spec("torch") is None:
        notes.append("PyTorch not measured: torch is not installed (stages.perf.pytorch: auto)")
        return False
    return True


def _engine_row(name: str, eng: PerfEngine, a: Audit) -> PerfRow:
    perf, info = profile_performance(list(eng.files))
    summary, where = (a.performance, "trtexec log") if a.performance is not None else (perf, "profile metadata")
    batch = batch_of(info.get("inference_options") or {})
    lat = (summary.stats.get("latency") or summary.stats.get("gpu_compute") or {}) if summary else {}
    if lat.get("median") is not None or lat.get("mean") is not None:
        median = lat.get("median", lat.get("mean"))
        median_from = f"trtexec latency {'median' if 'median' in lat else 'mean'} ({where})"
    else:
        median, median_from = a.total_ms, "sum of per-layer average times (--exportProfile; profiling adds overhead)"
    qps = summary.throughput_qps if summary else None
    throughput = qps * batch if qps is not None and batch else None
    return PerfRow(
        key=f"engine:{name}:tensorrt" + (f"@b{batch}" if batch else ""),
        model=name,
        role="engine",
        backend="tensorrt",
        source="trtexec",
        batch=batch,
        median_ms=median,
        mean_ms=lat.get("mean"),
        p99_ms=lat.get("p99"),
        median_from=median_from,
        throughput=throughput,
        fingerprint=device_fingerprint(list(eng.files)),
    )


def _engines(cfg: PerfStage) -> tuple[list[EngineEntry], list[PerfRow]]:
    read = {name: engine_layers(list(eng.files)) for name, eng in cfg.engines.items()}  # each engine read once
    audits = {name: audit_layers(*engine) for name, engine in read.items()}
    entries, rows = [], []
    for name, eng in cfg.engines.items():
        vs = eng.vs
        d = diff_read(read[vs][0], read[name][0], audits[vs], audits[name]) if vs is not None else None
        entries.append(EngineEntry(name=name, files=[str(f) for f in eng.files], vs=eng.vs, audit=audits[name], diff=d))
        rows.append(_engine_row(name, eng, audits[name]))
    return entries, rows


def _ratio(base: PerfRow | None, row: PerfRow) -> float | None:
    if base is None or not base.median_ms or not row.median_ms or base.fingerprint != row.fingerprint:
        return None
    return base.median_ms / row.median_ms


def _speedups(rows: list[PerfRow], cfg: PerfStage) -> list[PerfRow]:
    by = {(r.role, r.model, r.batch): r for r in rows}
    out = []
    for r in rows:
        update: dict[str, Any] = {}
        if r.role == "candidate":
            ref = by.get(("reference", "reference", r.batch))
            update = {"speedup": _ratio(ref, r), "speedup_vs": "reference"}
        elif r.role == "engine" and cfg.engines[r.model].vs is not None:
            vs = cfg.engines[r.model].vs
            base = next((x for x in rows if x.role == "engine" and x.model == vs), None)
            update = {"speedup": _ratio(base, r), "speedup_vs": vs}
        if r.role in ("reference", "candidate"):
            update["speedup_vs_pytorch"] = _ratio(by.get(("pytorch", "pytorch", r.batch)), r)
        out.append(r.model_copy(update=update))
    return out


def _with_baseline(ctx: StageContext, rows: list[PerfRow], notes: list[str]) -> tuple[list[PerfRow], Path]:
    path = store.path_for(ctx.store.root, ctx.loaded.suite.name)  # --reference-dir moves it with the references
    if ctx.update_baseline:
        entries = {
            r.key: {
                "median_ms": r.median_ms,
                "p99_ms": r.p99_ms,
                "throughput": r.throughput,
                "fingerprint": r.fingerprint,
                "from": r.median_from,
            }  # fmt: skip
            for r in rows
            if r.median_ms is not None
        }
        store.save(path, ctx.loaded.suite.name, entries)
        notes.append(f"baseline rewritten: {path} ({count(len(entries), 'row')})")
        return [r.model_copy(update={"baseline": BaselineCompare(state="updated", median_ms=r.median_ms)})
                for r in rows], path  # fmt: skip
    stored = store.load(path)
    if stored is None:
        notes.append(f"no performance baseline in {path}: run with --update-baseline to store this run's numbers")
    out = []
    for r in rows:
        entry = (stored or {}).get(r.key)
        if not isinstance(entry, dict) or not isinstance(entry.get("median_ms"), (int, float)):
            cmp = BaselineCompare(state="missing")
        else:
            base = float(entry["median_ms"])
            why = store.differences(entry.get("fingerprint") or {}, r.fingerprint)
            if why:
                text = "measured elsewhere: " + "; ".join(why)
                cmp = BaselineCompare(state="not_comparable", median_ms=base, why=text)
            else:
                change = (r.median_ms - base) / base if r.median_ms is not None and base > 0 else None
                cmp = BaselineCompare(state="comparable", median_ms=base, change=change)
        out.append(r.model_copy(update={"baseline": cmp}))
    unstored = sum(1 for r in out if r.source == "measured" and r.baseline and r.baseline.state == "missing")
    if stored is not None and unstored:
        notes.append(f"{count(unstored, 'row')} measured here with no entry in {path}, so no latency regression "
                     "gate on them: --update-baseline stores this machine's numbers (a latency measured here holds for "
                     "this machine only)")  # fmt: skip
    return out, path


def _checks(cfg: PerfStage, rows: list[PerfRow], entries: list[EngineEntry]) -> list[CheckResult]:
    checks = [limit_check("models timed", NAME, "rows", sum(1 for r in rows if r.median_ms is not None), 1, ">=")]
    for r in rows:
        label = f"{r.model} batch {r.batch}" if r.batch is not None else r.model
        want = cfg.min_speedup.get(r.model) if isinstance(cfg.min_speedup, dict) else cfg.min_speedup
        if r.role == "engine":
            want = cfg.engines[r.model].min_speedup
        if want is not None and r.role in ("candidate", "engine"):
            name = f"{label}: speed-up over {r.speedup_vs} >= {want:g}"
            if r.speedup is None:
                why = {"reason": f"no comparable {r.speedup_vs} timing (same batch size, same environment)"}
                checks.append(failed_check(name, NAME, "speedup", why, candidate=r.model))
            else:
                checks.append(limit_check(name, NAME, "speedup", r.speedup, want, ">=", candidate=r.model))
        b = r.baseline
        if cfg.max_regression is not None and b is not None and b.state == "comparable" and b.change is not None:
            detail = {"baseline_ms": b.median_ms, "median_ms": r.median_ms}
            checks.append(limit_check(f"{label}: latency regression <= {cfg.max_regression:.0%} of the baseline",
                                      NAME, "regression", b.change, cfg.max_regression, "<=", candidate=r.model,
                                      detail=detail))  # fmt: skip
        if cfg.require_stable and r.stats is not None:
            detail = {"window_cv": r.stats.window_cv, "max_cv": cfg.max_cv, "runs": r.stats.runs}
            checks.append(limit_check(f"{label}: measurement stable", NAME, "stable", float(r.stats.stable), 1, ">=",
                                      candidate=r.model, detail=detail))  # fmt: skip
    for e in entries:
        for name in cfg.fail_on:
            hits = [f for f in e.audit.findings if selects(name, f.kind, f.severity)]
            listed = [{"kind": f.kind, "message": f.message, "layers": f.layers[:10]} for f in hits]
            checks.append(limit_check(f"{e.name}: no {name} engine findings", NAME, f"{name}_findings", len(hits), 0,
                                      "<=", candidate=e.name, detail={"findings": listed} if hits else {}))  # fmt: skip
    return checks


def run(ctx: StageContext) -> PerfResult:
    suite = ctx.loaded.suite
    cfg = suite.stages.perf
    assert cfg is not None
    notes: list[str] = []
    budget = _budget(cfg)
    batches = cfg.batch_sizes or default_batches(ctx.samples, ctx.model_inputs)
    feeds = {b: batch_feed(ctx.samples, ctx.model_inputs, b) for b in batches}
    here = store.local_fingerprint()
    rows: list[PerfRow] = []
    # timed as ONNX Runtime runs them: an FP16 emulation (accuracy stages) would time FP32 kernels and casts
    native = suite.backends.onnxruntime.model_copy(update={"fp16_on_cpu": "native"})
    backends = suite.backends.model_copy(update={"onnxruntime": native})
    ref = OnnxRuntimeBackend(Path(suite.models.reference), native)
    failures: list[CheckResult] = []
    rows += [_measured_row("reference", "reference", "onnxruntime", s, here)
             for s in _measure_backend(ctx, ref, feeds, "reference", budget, notes, failures)]  # fmt: skip
    for name in suite.candidates_of(cfg):
        c = suite.models.candidates[name]
        if c.backend in TENSORRT and name in cfg.engines:
            continue  # read from its trtexec files below
        assert c.path is not None
        backend = candidate_backend(c.backend, Path(c.path), backends, ctx.samples)
        runner = "polygraphy" if c.backend in TENSORRT else c.backend
        rows += [_measured_row(name, "candidate", runner, s, here)
                 for s in _measure_backend(ctx, backend, feeds, name, budget, notes, failures)]  # fmt: skip
    if _torch_wanted(ctx, cfg, notes):
        from trtverify.backends.torch import TorchBackend

        assert suite.models.pytorch is not None
        torch_backend = TorchBackend(suite.models.pytorch, suite.backends.torch, search_path=ctx.loaded.search_path,
                                     default_input_names=[m.name for m in ctx.model_inputs])  # fmt: skip
        rows += [_measured_row("pytorch", "pytorch", "torch", s, here)
                 for s in _measure_backend(ctx, torch_backend, feeds, "PyTorch", budget, notes, failures)]  # fmt: skip
    entries, engine_rows = _engines(cfg)
    rows = _speedups(rows + engine_rows, cfg)
    rows, path = _with_baseline(ctx, rows, notes)
    unstable = [f"{r.model} batch {r.batch}" for r in rows if r.stats is not None and not r.stats.stable]
    if unstable:
        notes.append(f"not stable within the budget (window CV > {cfg.max_cv}): {', '.join(unstable)}")
    checks = failures + _checks(cfg, rows, entries)
    return PerfResult(
        status=status_of(checks),
        checks=checks,
        notes=notes,
        rows=rows,
        engines=entries or None,
        baseline_file=str(path),
        fingerprint=here,
    )
