"""Stage `layerwise`: every intermediate tensor of the reference against each candidate.

Reference: the reference ONNX in ONNX Runtime with every value tensor exposed. Candidate: any backend that can expose
intermediates. Tensors pair by exact name (or explicit rename); what one side alone has is listed, classified, never
silently dropped. A capture's tensors with statistics alone are compared by those (`statrows`); captured
candidates are also checked against themselves and each other (`consistency`).

Localisation: `first_divergence` is the first tensor, in the reference's topological order, that breaks the checks;
`root_causes` rank each candidate node by its own error (`trtverify.stages.layerwise.localize`).
Memory: tensors are exposed in chunks that fit `memory_budget_mb`; when the reference's intermediates do not fit,
they are kept on disk and read back memory-mapped.
"""

from __future__ import annotations

import fnmatch
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import numpy as np

from trtverify.backends.base import Backend, candidate_backend
from trtverify.compare.checks import CheckResult, TensorSeries, evaluate, extras_for, failed_check, limit_check
from trtverify.compare.pairing import Pairing, pair_names
from trtverify.compare.parallel import mapper
from trtverify.compare.semantic import Resolved, resolve
from trtverify.config.backends import Backends
from trtverify.config.checks import Check
from trtverify.config.findings import LINT_KINDS
from trtverify.config.models import Candidate
from trtverify.config.stages import LayerwiseStage, precision_checks
from trtverify.graph.lightmodel import LightModel
from trtverify.graph.onnxgraph import GraphIndex
from trtverify.graph.onnxinfo import load_onnx
from trtverify.lint.findings import LintFinding
from trtverify.lint.linter import LOOSEST_LAST, lint_candidate, node_precisions, precision_label, precision_parts
from trtverify.stages.base import StageContext, status_of
from trtverify.stages.layerwise import capnotes, consistency, detections, drift, nodegraph, selection, statrows
from trtverify.stages.layerwise import plugins as around_plugins
from trtverify.stages.layerwise import ranges as quant_ranges
from trtverify.stages.layerwise.localize import Evidence, root_causes
from trtverify.stages.layerwise.models import (
    CacheRanges,
    FirstDivergence,
    LayerwiseCandidate,
    LayerwiseReference,
    LayerwiseResult,
    PairNote,
    Row,
)
from trtverify.stages.layerwise.pairs import CandidateShapes, coverage, try_structure, unmatched
from trtverify.stages.layerwise.reference import NAME, ReferencePass, as_written, budget_bytes, reference_pass
from trtverify.stages.layerwise.saturation import saturation_note, sided
from trtverify.stages.layerwise.stream import Outputs, chunks_for, exposing, stream
from trtverify.stages.layerwise.suspects import histograms, with_lint
from trtverify.toolout import calibcache
from trtverify.util.errors import BackendError


def candidate_precision(spec: Candidate, backends: Backends, graph: LightModel | None = None) -> str:
    """What a candidate computes in: its `precision`, else what its graph's types and Q/DQ say, mixed parts
    joined ('int8+fp16'), with the TensorRT precision flags of a weakly typed build added. `graph`: the
    candidate's graph as read already (else read from its file)."""
    if spec.precision is not None:
        return spec.precision
    found = precision_parts(graph if graph is not None else Path(spec.path))
    options = getattr(backends, spec.backend.replace("-", "_"), None)
    flags = [p for p in getattr(options, "precisions", []) if p in LOOSEST_LAST and p not in found]
    return precision_label(sorted(set(found + flags) - ({"fp32"} if flags else set()), key=LOOSEST_LAST.index,
                                  reverse=True))  # fmt: skip


def loosest(precision: str) -> str:
    """The part of a (mixed) precision whose defaults apply: 'int8+fp16' -> 'int8'."""
    return max(precision.split("+"), key=LOOSEST_LAST.index)


def checks_of(cfg: LayerwiseStage, candidate: str, precision: str) -> tuple[Callable[[str], Sequence[Check]], str]:
    """The checks of each tensor, and where the candidate's checks come from."""
    if candidate in cfg.candidate_checks:
        base, source = cfg.candidate_checks[candidate], "stages.layerwise.candidate_checks"
    elif cfg.checks is not None:
        base, source = cfg.checks, "stages.layerwise.checks"
    else:
        base, source = precision_checks(loosest(precision)), f"default for {loosest(precision)}"
    return (lambda tensor: cfg.tensors[tensor].checks if tensor in cfg.tensors else base), source


def _lint_checks(name: str, fail_on: Sequence[str], findings: list[LintFinding]) -> list[CheckResult]:
    """One failing check per lint finding kind that `fail_on` selects (a severity or a kind), and a passing one
    per selector that found nothing."""
    chosen: dict[str, list[LintFinding]] = {}
    hit: set[str] = set()
    for f in findings:
        for sel in fail_on:
            if sel == f.severity or fnmatch.fnmatchcase(f.kind, sel):
                chosen.setdefault(f.kind, []).append(f)
                hit.add(sel)
    out = []
    for kind, fs in chosen.items():
        first = fs[0]
        because = "; TensorRT is why" if LINT_KINDS.get(kind) else ""
        detail = {"kind": kind, "severity": first.severity, "first_node": first.node, "message": first.message}
        what = f"{name}: lint {kind} ({first.severity}{because}) at {first.node or first.tensor}"
        where = {"candidate": name, "tensor": first.tensor, "detail": detail}
        out.append(limit_check(what, NAME, "lint_findings", len(fs), 0, "<=", **where))
    for sel in fail_on:
        if sel not in hit:
            out.append(limit_check(f"{name}: lint {sel}", NAME, "lint_findings", 0, 0, "<=", candidate=name))
    return out


def _compare(
    ctx: StageContext,
    backend: Backend,
    name: str,
    ref: ReferencePass,
    samples: list[dict[str, np.ndarray]],
    pairing: Pairing,
    checks_for: Callable[[str], Sequence[Check]],
    timings: dict[str, float],
    dets: detections.Plan,
) -> tuple[dict[str, TensorSeries], dict[str, np.dtype], int]:
    """Every paired tensor of every sample against the reference's; (series by reference tensor,
    candidate dtypes seen, chunks). The values detection rows need are kept for them (`dets`)."""
    covered = dets.covered
    series = {r: TensorSeries(r, c, histogram=True) for r, c in pairing.pairs if r not in covered}
    cand_dtypes: dict[str, np.dtype] = {}
    cfg = ctx.loaded.suite.stages.layerwise
    assert cfg is not None
    chunks = chunks_for(
        [c for _, c in pairing.pairs], {c: ref.nbytes.get(r, 0) for r, c in pairing.pairs}, budget_bytes(cfg)
    )
    cand_to_ref = {c: r for r, c in pairing.pairs}
    extras = {c: extras_for(checks_for(c)) for c in cand_to_ref}  # once per tensor, not per sample

    def progress(done: int, steps: int) -> None:
        ctx.progress(NAME, done, steps, f"{name}: compare")

    t0 = time.perf_counter()
    # parameterised metrics (frac_outside_tol, topk) work on whole-tensor float64 copies: one tensor at a time then
    with mapper(single=any(extras.values())) as each:
        for chunk, si, out in stream(chunks, len(samples), exposing(backend, samples), progress):
            present = [c for c in chunk if c in out]
            for cname in present:
                cand_dtypes.setdefault(cname, out[cname].dtype)

            def add(cname: str, si: int = si, out: Outputs = out) -> None:
                rname = cand_to_ref[cname]  # each tensor's series is its own: the step's tensors side by side
                if dets.keep(si, cname, out[cname]) or rname in covered:
                    return
                series[rname].add(ref.store.get(si, rname), out[cname], extras[cname])

            each(add, present)
    timings[f"{name}.candidate_s"] = time.perf_counter() - t0
    return series, cand_dtypes, len(chunks)


def _note(resolved: Resolved, tensor: str) -> PairNote | None:
    m = resolved.matches.get(tensor)
    if m is None or m.how is None:
        return None
    return PairNote(how=m.how, why=m.why, candidate_node=m.candidate_node, candidate_op_type=m.candidate_op_type)


def _not_comparable_rows(ref: ReferencePass, resolved: Resolved) -> list[Row]:
    """Rows of reference tensors the candidate rewrote: said so, and left out of every check."""
    rows = []
    for r, why in resolved.rewritten.items():
        p = ref.graph.producers.get(r)
        rows.append(
            Row(
                tensor=r,
                node=p.node if p else None,
                op_type=p.op_type if p else None,
                topo_index=p.index if p else -1,
                shape=None,
                dtype=ref.dtype.get(r),
                candidate_dtype=None,
                samples=0,
                metrics={},
                not_comparable=why,
                passed=True,
            )
        )
    return rows


def _rows_and_checks(
    name: str,
    ref: ReferencePass,
    resolved: Resolved,
    series: dict[str, TensorSeries],
    checks_for: Callable[[str], Sequence[Check]],
    missing: dict[str, str],
    allowed: Sequence[str],
    covered: Collection[str] = (),
) -> tuple[list[Row], list[CheckResult]]:
    """One row per tensor pair (reference topological order), and the candidate's stage checks: one per check
    definition, aggregated over tensors. `missing`: tensors after a plugin without a reference; `covered`:
    tensors compared as detections (no row here)."""
    pairing = resolved.pairing
    rows: list[Row] = [row for row in _not_comparable_rows(ref, resolved) if row.tensor not in covered]
    rows += around_plugins.rows(ref, missing)
    aggregated: dict[tuple[str, str, float], dict[str, object]] = {}
    nonfinite = 0
    for r, c in pairing.pairs:
        if r in covered:
            continue
        s = series[r]
        p = ref.graph.producers.get(r)
        evaluated = evaluate(s, checks_for(c), stage=NAME, candidate=name)
        nonfinite += s.nonfinite["nonfinite_mismatch"]
        counts = sided({k: v for k, v in s.nonfinite.items() if v})
        rows.append(
            Row(
                tensor=r,
                candidate_tensor=c if c != r else None,
                pairing=_note(resolved, r),
                node=p.node if p else None,
                op_type=p.op_type if p else None,
                topo_index=p.index if p else -1,
                shape=s.shape,
                dtype=s.dtype,
                candidate_dtype=s.cand_dtype,
                samples=s.samples,
                metrics={k: v for k, v in s.worst().items() if v == v},  # NaN: nothing finite to measure
                **counts,
                saturated_values=list(s.saturated_values) if s.saturated_values and counts.get("saturated") else None,
                errors=s.errors[:3] or None,
                passed=not evaluated.failed,
                failed=evaluated.failed or None,
            )
        )
        for ch in evaluated.checks:
            if ch.metric in ("nonfinite_mismatch", "comparable"):
                continue
            key = (ch.metric, ch.op, float(ch.threshold or 0.0))
            empty = dict.fromkeys(("worst", "worst_tensor", "worst_sample", "first_failed")) | {
                "tensors": 0,
                "failed": 0,
            }
            agg = aggregated.setdefault(key, empty)
            agg["tensors"] += 1  # type: ignore[operator]
            v = ch.value
            if v is not None and v == v:  # NaN: no position finite on both sides; the nonfinite check says so
                w = agg["worst"]
                if w is None or (v > w if ch.op == "<=" else v < w):  # type: ignore[operator]
                    agg["worst"], agg["worst_tensor"], agg["worst_sample"] = v, r, ch.worst_sample
            if not ch.passed:
                agg["failed"] += 1  # type: ignore[operator]
                agg["first_failed"] = agg["first_failed"] or r
    rows.sort(key=lambda row: row.topo_index)
    where = {"candidate": name}
    n = len(pairing.pairs)
    outputs = [r for r, _ in pairing.pairs if r in ref.graph.outputs]
    checks = [
        limit_check(f"{name}: tensors compared", NAME, "pairs", n, 1, ">=", **where),
        # the outputs are the contract: a run that compared none of them, or left one uncomputed, fails
        around_plugins.outputs_check(name, ref.graph.outputs, outputs, missing, allowed),
        limit_check(f"{name}: nonfinite_mismatch <= 0", NAME, "nonfinite_mismatch", nonfinite, 0, "<=", **where),
    ]
    for (metric, op, thr), agg in aggregated.items():
        detail = {"tensors": agg["tensors"], "tensors_failed": agg["failed"]}
        if agg["first_failed"]:
            detail["first_failed"] = agg["first_failed"]
        w = agg["worst"]
        if agg["failed"] and (w is None or (w <= thr if op == "<=" else w >= thr)):  # type: ignore[operator]
            # every failure is a tensor with no finite value to measure: name it, not a passing one
            agg["worst"], agg["worst_tensor"], agg["worst_sample"] = None, agg["first_failed"], None
        checks.append(
            CheckResult(
                name=f"{name}: {metric} {op} {thr:g} (every tensor)",
                stage=NAME,
                metric=metric,
                value=agg["worst"],  # type: ignore[arg-type]
                threshold=thr,
                op=op,  # type: ignore[arg-type]
                passed=agg["failed"] == 0,
                tensor=agg["worst_tensor"],  # type: ignore[arg-type]
                worst_sample=agg["worst_sample"],  # type: ignore[arg-type]
                detail=detail,
                **where,
            )
        )
    return rows, checks


def _candidate(
    ctx: StageContext,
    cfg: LayerwiseStage,
    name: str,
    ref: ReferencePass,
    samples: list[dict[str, np.ndarray]],
    workdir: Path,
    timings: dict[str, float],
    last: bool = False,
) -> tuple[LayerwiseCandidate, list[CheckResult]]:
    suite = ctx.loaded.suite
    spec = suite.models.candidates[name]
    backend = candidate_backend(spec.backend, Path(spec.path), as_written(suite.backends), samples, spec.capture)
    ort_options = as_written(suite.backends).onnxruntime
    with backend:
        cand_names = list(dict.fromkeys(list(backend.intermediates()) + [m.name for m in backend.outputs()]))
        plugin_notes = backend.plugin_notes()
        rounded = getattr(backend, "emulated", None)
        emulation = (
            f"emulated as a GPU computes it (ONNX Runtime's CPU lacks BF16 kernels and runs FP16 ops in FP32): FP32 "
            f"compute, each of {rounded} BF16/FP16 tensors rounded to its type (docs/stages/layerwise.md#fp16-and-"
            "bf16-on-a-cpu)"
            if rounded is not None
            else getattr(backend, "ran_as", None)  # a capture: where and how it was made
        )
        onnx_graph = backend.capabilities.onnx_graph
        # the candidate's ONNX graph says what each name holds, also for engines built from it (TensorRT marks
        # ONNX tensor names); isolation needs more than the graph: a backend that runs it as written
        cand_graph = backend.graph().info if onnx_graph else GraphIndex.from_model(load_onnx(Path(spec.path)))
        t0 = time.perf_counter()
        resolved = resolve(pair_names(ref.order, cand_names, cfg.rename, cfg.ignore), ref.graph, cand_graph, cfg.rename)
        # the candidate as given (not its emulated twin), read once by the backend, weights left in their files
        source = getattr(backend, "source_graph", None) if onnx_graph else None
        structure = source.info if source is not None else cand_graph  # the twin's extra casts are not the model's
        shapes = CandidateShapes(backend.graph() if onnx_graph else Path(spec.path), structure, samples[0], ort_options)
        failed = None
        if cfg.pair_by_structure:
            resolved, failed = try_structure(resolved, ref, structure, shapes, samples[0], ort_options)
        pairing = resolved.pairing
        paired, paired_check = coverage(name, ref, structure, cand_names, resolved, cfg, failed)
        timings[f"{name}.pairing_s"] = time.perf_counter() - t0
        precision = candidate_precision(spec, suite.backends, source)
        checks_for, checks_source = checks_of(cfg, name, precision)
        dets = detections.plan(ref, pairing.pairs, cfg.detections)
        series, observed, chunks = _compare(ctx, backend, name, ref, samples, pairing, checks_for, timings, dets)
        ranges = quant_ranges.report(ref, structure, pairing.pairs, samples) if onnx_graph else []
        backend.release()  # its weights are not needed while the isolation model runs
        missing = around_plugins.uncomputed(ref, backend.uncomputed())
        rows, checks = _rows_and_checks(
            name, ref, resolved, series, checks_for, missing, cfg.allow_uncompared, dets.covered
        )
        rows, checks = selection.merged(rows, checks, ref, dets.picked, name)  # index tensors, by what they select
        checks.insert(1, paired_check)
        rows, checks, by_stats = statrows.merged(rows, checks, name, ref, backend, samples, checks_for, precision)
        det_checks, det_source = detections.checks_of(cfg.detections, name, loosest(precision))
        det_rows, det_results = detections.compare(name, ref, dets, len(samples), cfg.detections, det_checks)
        checks += det_results
        first = next((row for row in rows if not row.passed), None)
        first_divergence = (
            FirstDivergence(**{k: getattr(first, k) for k in FirstDivergence.model_fields}) if first else None
        )
        errors = {row.tensor: row.metrics.get("rel_l2", float("nan")) for row in rows if row.not_comparable is None}
        pairs = [(r, c) for r, c in pairing.pairs if r not in dets.covered]  # detections have no elementwise error
        ev = Evidence(ref, samples, pairs, rows, errors, observed, checks_for, resolved.distinct)
        method, causes, not_isolated = root_causes(
            ctx, cfg.root_cause_method, backend, spec, ev, workdir, timings, name
        )
        ranked = [rc.model_copy(update={"rank": i + 1}) for i, rc in enumerate(causes)]
        causes = ranked[: cfg.root_causes]  # every node's own error stays on the graph (nodegraph)
        more, consistent = consistency.within(name, backend, spec, loosest(precision), ref, len(samples))
        checks += more  # a capture against itself (its consistency feeds) and against its outputs-only capture
        if last:  # no candidate needs the reference's values any more: the lint runs without them in memory
            ref.store.clear()
        lint = (
            # an ONNX graph run as written: strongly typed, like what TensorRT 11 builds from it
            lint_candidate(
                source if source is not None else Path(spec.path),
                activation_max=ref.max_abs,
                reference=ref.graph,  # the reference as the reference pass read it
                strongly_typed=True,
            )
            if onnx_graph
            else []
        )
        checks += _lint_checks(name, cfg.lint.fail_on, lint)
    reason = "not in the candidate graph" if onnx_graph else backend.unexposed
    per_node = node_precisions(source if source is not None else Path(spec.path)) if onnx_graph else None
    mix = Counter(per_node.values()) if per_node else None
    result = LayerwiseCandidate(
        name=name,
        backend=spec.backend,
        model=str(spec.path),
        samples=len(samples),
        precision=precision,
        precision_mix=dict(mix.most_common()) if mix else None,
        emulation=capnotes.with_precision_note(emulation, spec, precision, rows),
        checks_source=checks_source,
        chunks=chunks,
        first_divergence=first_divergence,
        root_cause_method=method,  # type: ignore[arg-type]
        root_causes=causes,
        histograms=histograms(first_divergence, causes, series, rows),
        not_isolated=not_isolated,
        rows=with_lint(rows, lint),
        detections=det_rows or None,
        detection_checks_source=det_source if det_rows else None,
        paired=statrows.covered(paired, by_stats),
        unmatched=around_plugins.without(
            unmatched(resolved, structure, ref, reason, shapes, cand_graph), missing | by_stats
        ),
        after_plugins=around_plugins.counts(missing),
        plugins=plugin_notes or None,
        ranges=ranges or None,
        lint=lint,
        consistency=consistent or None,
        graph=nodegraph.build(ref.graph, rows, ranked, per_node),
        passed=all(ch.passed for ch in checks),
    )
    return result, checks


def run(ctx: StageContext) -> LayerwiseResult:
    suite = ctx.loaded.suite
    cfg = suite.stages.layerwise
    assert cfg is not None
    samples = ctx.samples_upto(cfg.samples)
    names = ctx.candidates(suite.candidates_of(cfg))
    if not samples or not names:
        check = limit_check("samples and candidates", NAME, "count", 0, 1, ">=")
        return LayerwiseResult(status="failed", checks=[check], samples=len(samples))
    notes = []
    if ctx.chosen_by is not None:
        cap = f" (samples: {cfg.samples} applies to the suite's own inputs)" if cfg.samples else ""
        notes.append(f"inputs: {ctx.chosen_by}, all {len(samples)} fed{cap}")
    if suite.backends.onnxruntime.graph_optimization_level != "disable":
        notes.append(
            "ONNX models run as written in this stage (ONNX Runtime graph optimisation disabled): "
            "its rewrites of Q/DQ patterns depend on which tensors are exposed, which would make the numbers depend "
            "on what is compared"
        )
    timings: dict[str, float] = {}
    checks: list[CheckResult] = []
    candidates = []
    with tempfile.TemporaryDirectory(prefix="trtverify-layerwise-") as tmp:
        workdir = Path(tmp)
        ref = reference_pass(ctx, cfg, samples, workdir, timings)
        reference = LayerwiseReference(
            model=str(suite.models.reference),
            tensors=len(ref.order),
            chunks=ref.chunks,
            store="disk (memory-mapped)" if ref.store.on_disk else "memory",
        )
        # the TensorRT calibration cache judged on the reference's values: now if it is there, else after the
        # candidates (a TensorRT candidate calibrating in this run writes it), the reference's values kept till then
        cache = suite.backends.tensorrt.calibration_cache
        cache_ranges = _judge_cache(ref, cache, samples, timings) if cache is not None and cache.is_file() else None
        pending = cache is not None and cache_ranges is None
        broken: list[tuple[str, BackendError]] = []
        for i, n in enumerate(names):
            last = i == len(names) - 1 and not pending
            try:
                cand, cand_checks = _candidate(ctx, cfg, n, ref, samples, workdir, timings, last=last)
            except BackendError as exc:  # this candidate cannot be loaded or run (a native crash included): the
                broken.append((n, exc))  # others are still compared
                continue
            candidates.append(cand)
            checks += cand_checks
            notes += [note for note in [saturation_note(cand)] if note]
        if pending and cache is not None:
            if cache.is_file():
                cache_ranges = _judge_cache(ref, cache, samples, timings)
            else:
                notes.append(f"backends.tensorrt.calibration_cache {cache}: not there after the candidates ran, "
                             "so no range of it was judged")  # fmt: skip
    pairs = consistency.between(candidates, suite.models.candidates, lambda n, p: checks_of(cfg, n, p)[0], ref)
    if broken and not candidates:  # nothing compared: the stage's error
        raise BackendError("; ".join(f"{n}: {exc}" if len(broken) > 1 else str(exc) for n, exc in broken))
    for n, exc in broken:
        checks.append(failed_check(f"{n}: loads and runs", NAME, "runs", {"reason": str(exc)}, candidate=n))
    result = LayerwiseResult(
        status=status_of(checks),
        checks=checks,
        notes=notes,
        timings=timings,
        samples=len(samples),
        reference=reference,
        candidates=candidates,
        calibration_cache=cache_ranges,
        capture_pairs=pairs,
    )
    return drift.apply(ctx, samples, result)


def _judge_cache(
    ref: ReferencePass, cache: Path, samples: list[dict[str, np.ndarray]], timings: dict[str, float]
) -> CacheRanges:
    """backends.tensorrt.calibration_cache's ranges against the reference's values (UsageError where it is not a
    cache: file and line)."""
    t0 = time.perf_counter()
    out = quant_ranges.cache_report(ref, calibcache.read(cache), samples)
    timings["calibration_cache_s"] = time.perf_counter() - t0
    return out
