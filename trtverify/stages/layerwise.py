"""Stage `layerwise`: every intermediate tensor of the reference against each candidate.

Reference: the reference ONNX in ONNX Runtime with every value tensor exposed. Candidate:
any backend that can expose intermediates. Tensors pair by exact name (or explicit rename);
what one side alone has is listed, classified, never silently dropped.

Localisation:
- `first_divergence`: the first tensor, in the reference's topological order, that breaks
  the checks;
- `root_causes`: each candidate node's own error. For ONNX candidates every node group
  (the node plus the Q/DQ/Cast nodes lowering inserted before it) is run on the
  *reference's* input values, so inherited error is removed. For backends without a graph
  (TensorRT), layers are ranked by the error they add: output error minus the largest
  error of their inputs (the ratio is reported too; it alone is undefined where inputs are
  exact).

Memory: tensors are exposed in chunks that fit `memory_budget_mb`; when the reference's
intermediates do not fit, they are kept on disk and read back memory-mapped.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends import candidate_backend
from trtverify.backends.onnxruntime import OnnxRuntimeBackend
from trtverify.compare.checks import CheckResult, TensorSeries, evaluate, extras_for
from trtverify.compare.metrics import CompareError, compare
from trtverify.compare.pairing import pair_names
from trtverify.config.models import LayerwiseStage
from trtverify.graph import GraphInfo, build_isolation_model, isolation_groups
from trtverify.stages.base import StageContext, StageResult
from trtverify.tensorstore import TensorStore, plan_chunks

NAME = "layerwise"
KEY_METRICS = ("rel_l2", "cosine", "max_abs", "sqnr", "mean_abs", "max_rel")
HISTOGRAM_SUSPECTS = 3  # root causes that get an error histogram, besides the first divergence


@dataclass
class ReferencePass:
    """Reference intermediates of every sample, and what is known about each tensor."""

    graph: GraphInfo
    order: list[str]  # value tensors in topological order
    store: TensorStore
    dtype: dict[str, str] = field(default_factory=dict)
    shape: dict[str, list[int]] = field(default_factory=dict)
    nbytes: dict[str, int] = field(default_factory=dict)
    max_abs: dict[str, float] = field(default_factory=dict)
    chunks: int = 0


def _as_written(backends: Any) -> Any:
    """ONNX Runtime settings for layerwise runs: the graph executes as written (no optimisation).

    From level 'basic' up, ONNX Runtime rewrites Q/DQ patterns only where the intermediate
    tensors are *not* graph outputs, so which tensors are exposed would change the numbers
    being compared (as marking outputs changes TensorRT's fusion). Measured on the demo
    INT8 model: exposing one tensor or all of them moved a Conv output by 1e-4 at 'basic'.
    """
    ort = backends.onnxruntime
    if ort.graph_optimization_level != "disable":
        ort = ort.model_copy(update={"graph_optimization_level": "disable"})
    return backends.model_copy(update={"onnxruntime": ort})


def _budget_bytes(cfg: LayerwiseStage) -> int:
    return int(cfg.memory_budget_mb * 1024 * 1024)


def _estimate_sizes(model: Any, feed: dict[str, np.ndarray], names: Sequence[str]) -> dict[str, int]:
    """Bytes per tensor from shape inference with the feed's concrete shapes (unknown: the largest known)."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for inp in m.graph.input:
        if inp.name in feed:
            dims = inp.type.tensor_type.shape.dim
            for d, v in zip(dims, feed[inp.name].shape):
                d.Clear()
                d.dim_value = int(v)
    try:
        inferred = onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    except Exception:  # inference is an estimate only; a failure means "unknown"
        inferred = m
    sizes: dict[str, int] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
        if t.elem_type and dims and all(d >= 0 for d in dims):
            itemsize = (
                onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
                if t.elem_type != onnx.TensorProto.STRING
                else 8
            )
            sizes[vi.name] = int(np.prod(dims)) * itemsize
        elif t.elem_type and not t.shape.dim and t.HasField("shape"):
            sizes[vi.name] = 8
    fallback = max(sizes.values(), default=4 << 20)
    return {n: sizes.get(n, fallback) for n in names}


def _reference_pass(
    ctx: StageContext, cfg: LayerwiseStage, samples: list[dict[str, np.ndarray]], workdir: Path, result: StageResult
) -> ReferencePass:
    suite = ctx.loaded.suite
    backend = OnnxRuntimeBackend(Path(suite.models.reference), _as_written(suite.backends).onnxruntime)
    backend.load()
    light = backend.light
    order = light.info.value_tensors()
    estimate = _estimate_sizes(light.model, samples[0], order)
    budget = _budget_bytes(cfg)
    total = sum(estimate.values()) * len(samples)
    # keep references in memory when all samples fit half the budget; the other half is for the candidate
    store = TensorStore(None if total <= budget // 2 else workdir / "reference")
    chunks = plan_chunks(order, estimate, max(budget // 3, 1))
    ref = ReferencePass(light.info, order, store, chunks=len(chunks))
    t0 = time.perf_counter()
    steps = len(chunks) * len(samples)
    for ci, chunk in enumerate(chunks):
        backend.expose(chunk)
        for si, feed in enumerate(samples):
            out = backend.infer(feed)
            for name in chunk:
                if name not in out:
                    continue
                arr = out[name]
                ref.store.put(si, name, arr)
                if name not in ref.dtype:
                    ref.dtype[name] = str(arr.dtype)
                    ref.shape[name] = list(arr.shape)
                    ref.nbytes[name] = int(arr.nbytes)
                if arr.dtype.kind == "f" and arr.size:
                    finite = np.abs(arr[np.isfinite(arr)]) if not np.isfinite(arr).all() else np.abs(arr)
                    if finite.size:
                        ref.max_abs[name] = max(ref.max_abs.get(name, 0.0), float(finite.max()))
            ctx.progress(NAME, ci * len(samples) + si + 1, steps, "reference")
            del out
    backend.close()
    result.timings["reference_s"] = result.timings.get("reference_s", 0.0) + time.perf_counter() - t0
    return ref


def _checks_for(cfg: LayerwiseStage, candidate: str) -> Any:
    base = cfg.candidate_checks.get(candidate, cfg.checks)
    return lambda tensor: cfg.tensors[tensor].checks if tensor in cfg.tensors else base


def _summary_worst(series: TensorSeries) -> dict[str, float]:
    out = {}
    summary = series.summary()["metrics"]
    for k, v in summary.items():
        out[k] = v["worst"]
    return out


def _lint(cand_model_path: Path, ref: ReferencePass) -> list[dict[str, Any]]:
    try:
        from trtverify.lint import lint_candidate
    except ImportError:  # lint arrives with its own module; the stage works without it
        return []
    findings = lint_candidate(cand_model_path, activation_max=ref.max_abs)
    return [f.to_dict() for f in findings]


def _graph_dtypes(light: Any) -> dict[str, int]:
    """Element types the candidate graph declares or infers for its tensors (no weights needed)."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(light.model, strict_mode=False)
    except Exception:  # only a fallback for dtypes; failures leave the map partial
        inferred = light.model
    vis = list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)
    return {v.name: v.type.tensor_type.elem_type for v in vis if v.type.tensor_type.elem_type}


def _isolate(
    ctx: StageContext,
    cfg: LayerwiseStage,
    light: Any,
    make_backend: Any,
    ref: ReferencePass,
    samples: list[dict[str, np.ndarray]],
    paired: list[tuple[str, str]],
    observed: dict[str, np.dtype],
    result: StageResult,
    label: str,
    only: set[str] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, str]]:
    """Run candidate node groups on the reference's inputs: {reference tensor: local worst metrics}.

    `make_backend(path, feeds)` runs the generated isolation model: ONNX Runtime for ONNX
    candidates, or the candidate's own backend (one TensorRT sub-engine for all suspects)
    when confirming suspects. `feeds` are the isolation model's inputs, for calibration.
    """
    import onnx

    cand_info = light.info
    ref_tensors = set(ref.order) | set(ref.graph.inputs)
    # rename maps reference names to candidate names; isolation works in candidate names
    cand_to_ref = {c: r for r, c in paired}
    wanted = [c for r, c in paired if only is None or r in only]
    groups, skipped = isolation_groups(
        cand_info, {cand_to_ref.get(t, t) for t in ref_tensors} | set(cand_to_ref), wanted
    )
    declared = _graph_dtypes(light)
    local: dict[str, list[dict[str, float]]] = {}
    budget = max(_budget_bytes(cfg) // 3, 1)
    chunks = plan_chunks(
        [g.key for g in groups],
        {g.key: sum(ref.nbytes.get(cand_to_ref.get(o, o), 0) for o in g.outputs) for g in groups},
        budget,
    )
    by_key = {g.key: g for g in groups}
    t0 = time.perf_counter()
    steps = len(chunks) * len(samples)
    for ci, keys in enumerate(chunks):
        chunk_groups = [by_key[k] for k in keys]
        boundary = sorted({b for g in chunk_groups for b in g.boundary})
        dtypes = {}
        for b in boundary:
            if b in observed:
                dtypes[b] = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(observed[b]))
            elif b in declared:
                dtypes[b] = declared[b]
            else:
                dtypes[b] = onnx.helper.np_dtype_to_tensor_dtype(
                    np.dtype(ref.dtype.get(cand_to_ref.get(b, b), "float32"))
                )
        model, out_map = build_isolation_model(light.model, cand_info, chunk_groups, dtypes)

        def feed_for(si: int) -> dict[str, np.ndarray]:
            out = {}
            for b in boundary:
                rname = cand_to_ref.get(b, b)
                value = samples[si][rname] if rname in samples[si] else ref.store.get(si, rname)
                out[b] = np.asarray(value).astype(onnx.helper.tensor_dtype_to_np_dtype(dtypes[b]), copy=False)
            return out

        iso = make_backend(light.save_variant(model), feed_for)
        iso.load()
        for si in range(len(samples)):
            outs = iso.infer(feed_for(si))
            for iso_name, cand_name in out_map.items():
                rname = cand_to_ref.get(cand_name, cand_name)
                if iso_name not in outs:
                    continue
                try:
                    c = compare(ref.store.get(si, rname), outs[iso_name])
                except CompareError:
                    continue
                local.setdefault(rname, []).append(c.metrics)
            ctx.progress(NAME, ci * len(samples) + si + 1, steps, f"{label}: isolate")
        iso.close()
    result.timings[f"{label}.isolate_s"] = result.timings.get(f"{label}.isolate_s", 0.0) + time.perf_counter() - t0
    worst: dict[str, dict[str, float]] = {}
    for rname, per_sample in local.items():
        w: dict[str, float] = {}
        for k in per_sample[0]:
            vals = [m[k] for m in per_sample]
            lower = k in ("max_abs", "mean_abs", "max_rel", "rel_l2")
            finite = [v for v in vals if v == v]
            w[k] = (max(finite) if lower else min(finite)) if finite else math.nan
        worst[rname] = w
    return worst, skipped


def _confirm(
    ctx: StageContext,
    cfg: LayerwiseStage,
    spec: Any,
    ref: ReferencePass,
    samples: list[dict[str, np.ndarray]],
    paired: list[tuple[str, str]],
    ranked: list[dict[str, Any]],
    workdir: Path,
    result: StageResult,
    label: str,
) -> list[dict[str, Any]]:
    """Run the top suspects in isolation on the candidate's own backend and re-rank them by that.

    For TensorRT this is one extra engine build holding every suspect side by side, each fed
    with the reference's inputs; suspects whose own error stays small drop down.
    """
    from trtverify.graph import LightModel

    top = ranked[: cfg.confirm_top]
    light = LightModel(Path(spec.path), workdir)
    backends = _as_written(ctx.loaded.suite.backends)

    def make(path: Path, feed_for: Any) -> Any:
        feeds = [feed_for(i) for i in range(len(samples))]  # calibration data for weakly typed INT8 builds
        return candidate_backend(spec.backend, path, backends, feeds)

    local, skipped = _isolate(
        ctx, cfg, light, make, ref, samples, paired, {}, result, f"{label}.confirm", only={rc["tensor"] for rc in top}
    )
    for rc in top:
        m = local.get(rc["tensor"])
        if m is not None:
            rc["confirmed_local"] = {k: m[k] for k in KEY_METRICS if k in m}
        elif rc["tensor"] in skipped:
            rc["confirmed_local"] = None
            rc["not_confirmed"] = skipped[rc["tensor"]]
    confirmed = sorted(top, key=lambda rc: -((rc.get("confirmed_local") or {}).get("rel_l2", -1.0)))
    return confirmed + ranked[cfg.confirm_top :]


def _inputs_error(row_tensor: str, ref: ReferencePass, errors: dict[str, float]) -> float:
    p = ref.graph.producers.get(row_tensor)
    if p is None:
        return 0.0
    node = ref.graph.nodes[p.index]
    vals = [errors[i] for i in node.input if i in errors]
    return max(vals) if vals else 0.0


def _run_candidate(
    ctx: StageContext,
    cfg: LayerwiseStage,
    name: str,
    ref: ReferencePass,
    samples: list[dict[str, np.ndarray]],
    workdir: Path,
    result: StageResult,
) -> dict[str, Any]:
    suite = ctx.loaded.suite
    spec = suite.models.candidates[name]
    backend = candidate_backend(spec.backend, Path(spec.path), _as_written(suite.backends), samples)
    backend.load()
    cand_names = list(dict.fromkeys(list(backend.intermediates()) + [m.name for m in backend.outputs()]))
    pairing = pair_names(ref.order, cand_names, cfg.rename, cfg.ignore)
    cand_graph = backend.light.info if isinstance(backend, OnnxRuntimeBackend) else None
    cand_only: dict[str, list[str]] = {"qdq": [], "cast": [], "renamed": [], "other": []}
    ref_nodes = {p.node for p in ref.graph.producers.values()}
    for t in pairing.candidate_only:
        kind = cand_graph.inserted_kind(t) if cand_graph else "other"
        if kind == "other" and cand_graph and t in cand_graph.producers and cand_graph.producers[t].node in ref_nodes:
            kind = "renamed"  # a reference node whose output a converter renamed (e.g. before an inserted cast)
        cand_only[kind].append(t)

    checks_for = _checks_for(cfg, name)
    series: dict[str, TensorSeries] = {r: TensorSeries(r, c, histogram=True) for r, c in pairing.pairs}
    cand_dtypes: dict[str, np.dtype] = {}
    chunks = plan_chunks(
        [c for _, c in pairing.pairs],
        {c: ref.nbytes.get(r, 0) for r, c in pairing.pairs},
        max(_budget_bytes(cfg) // 3, 1),
    )
    cand_to_ref = {c: r for r, c in pairing.pairs}
    t0 = time.perf_counter()
    steps = len(chunks) * len(samples)
    for ci, chunk in enumerate(chunks):
        backend.expose(chunk)
        for si, feed in enumerate(samples):
            out = backend.infer(feed)
            for cname in chunk:
                if cname not in out:
                    continue
                rname = cand_to_ref[cname]
                cand_dtypes.setdefault(cname, out[cname].dtype)
                series[rname].add(ref.store.get(si, rname), out[cname], extras_for(checks_for(cname)))
            ctx.progress(NAME, ci * len(samples) + si + 1, steps, f"{name}: compare")
            del out
    result.timings[f"{name}.candidate_s"] = time.perf_counter() - t0
    if isinstance(backend, OnnxRuntimeBackend):
        backend.release()  # its weights are not needed while the isolation model runs

    # rows, in the reference's topological order
    rows: list[dict[str, Any]] = []
    errors: dict[str, float] = {}
    aggregated: dict[tuple[str, str, float], dict[str, Any]] = {}
    nonfinite = 0
    for r, c in pairing.pairs:
        s = series[r]
        p = ref.graph.producers.get(r)
        row_checks = evaluate(s, checks_for(c))
        metrics = _summary_worst(s)
        errors[r] = metrics.get("rel_l2", math.nan)
        nonfinite += s.nonfinite["nonfinite_mismatch"]
        failed = [ch.name.split(": ", 1)[1] for ch in row_checks if not ch.passed]
        rows.append(
            {
                "tensor": r,
                **({"candidate_tensor": c} if c != r else {}),
                "node": p.node if p else None,
                "op_type": p.op_type if p else None,
                "topo_index": p.index if p else -1,
                "shape": s.shape,
                "dtype": s.dtype,
                "candidate_dtype": s.cand_dtype,
                "samples": s.samples,
                "metrics": metrics,
                **({k: v for k, v in s.nonfinite.items() if v} if any(s.nonfinite.values()) else {}),
                **({"errors": s.errors[:3]} if s.errors else {}),
                "passed": not failed,
                **({"failed": failed} if failed else {}),
            }
        )
        for ch in row_checks:
            if ch.metric in ("nonfinite_mismatch", "comparable"):
                continue
            key = (ch.metric, ch.op, float(ch.threshold or 0.0))
            agg = aggregated.setdefault(
                key, {"worst": None, "worst_tensor": None, "tensors": 0, "failed": 0, "first_failed": None}
            )
            agg["tensors"] += 1
            v = ch.value
            if v is not None:
                worse = agg["worst"] is None or (v > agg["worst"] if ch.op == "<=" else v < agg["worst"]) or v != v
                if worse:
                    agg["worst"], agg["worst_tensor"] = v, r
            if not ch.passed:
                agg["failed"] += 1
                agg["first_failed"] = agg["first_failed"] or r
    rows.sort(key=lambda row: row["topo_index"])

    first = next((row for row in rows if not row["passed"]), None)
    first_divergence = (
        {k: first[k] for k in ("tensor", "node", "op_type", "topo_index", "metrics", "failed")}
        if first is not None
        else None
    )

    # root causes
    method = cfg.root_cause_method
    if method == "auto":
        method = "isolate" if isinstance(backend, OnnxRuntimeBackend) else "amplification"
    root_causes: list[dict[str, Any]] = []
    not_isolated: dict[str, str] = {}
    row_by_tensor = {row["tensor"]: row for row in rows}
    if method == "isolate" and isinstance(backend, OnnxRuntimeBackend):
        ort_options = _as_written(suite.backends).onnxruntime
        local, not_isolated = _isolate(
            ctx,
            cfg,
            backend.light,
            lambda path, feed_for: OnnxRuntimeBackend(path, ort_options),
            ref,
            samples,
            pairing.pairs,
            cand_dtypes,
            result,
            name,
        )
        for r, m in local.items():
            row = row_by_tensor.get(r)
            if row is None:
                continue
            local_checks = [ch for ch in checks_for(row.get("candidate_tensor", r))]
            exceeds = any(not ch.passes(m.get(ch.metric, math.nan)) for ch in local_checks if ch.metric in m)
            root_causes.append(
                {
                    "node": row["node"],
                    "op_type": row["op_type"],
                    "tensor": r,
                    "topo_index": row["topo_index"],
                    "score": m.get("rel_l2", math.nan),
                    "local": {k: m[k] for k in KEY_METRICS if k in m},
                    "inherited_rel_l2": _inputs_error(r, ref, errors),
                    "output_rel_l2": errors.get(r),
                    "exceeds_checks": exceeds,
                }
            )
    else:
        method = "amplification"
        for row in rows:
            out_err = errors.get(row["tensor"], math.nan)
            in_err = _inputs_error(row["tensor"], ref, errors)
            if out_err != out_err:
                continue
            root_causes.append(
                {
                    "node": row["node"],
                    "op_type": row["op_type"],
                    "tensor": row["tensor"],
                    "topo_index": row["topo_index"],
                    "score": out_err - in_err,
                    "added_rel_l2": out_err - in_err,
                    "amplification": (out_err / in_err) if in_err > 0 else (math.inf if out_err > 0 else 1.0),
                    "inherited_rel_l2": in_err,
                    "output_rel_l2": out_err,
                    "exceeds_checks": not row["passed"],
                }
            )
    root_causes.sort(key=lambda rc: (-(rc["score"] if rc["score"] == rc["score"] else math.inf), rc["topo_index"]))
    if method == "amplification" and cfg.confirm_top and root_causes:
        root_causes = _confirm(ctx, cfg, spec, ref, samples, pairing.pairs, root_causes, workdir, result, name)
    for i, rc in enumerate(root_causes):
        rc["rank"] = i + 1
    root_causes = root_causes[: cfg.root_causes]

    # error histograms of the suspects: the first divergence and the top root causes
    suspects: list[tuple[str, str]] = []
    if first_divergence is not None:
        suspects.append((first_divergence["tensor"], "first divergence"))
    suspects += [(rc["tensor"], f"root cause #{rc['rank']}") for rc in root_causes[:HISTOGRAM_SUSPECTS]]
    histograms: list[dict[str, Any]] = []
    for tensor, reason in suspects:
        known = next((h for h in histograms if h["tensor"] == tensor), None)
        if known is not None:
            known["reason"] += f", {reason}"
            continue
        h = series[tensor].histogram_dict() if tensor in series else None
        row = row_by_tensor[tensor]
        if h is not None:
            histograms.append(
                {
                    "tensor": tensor,
                    "node": row["node"],
                    "op_type": row["op_type"],
                    "topo_index": row["topo_index"],
                    "reason": reason,
                    **h,
                }
            )

    # lint beside the rows it concerns
    lint: list[dict[str, Any]] = []
    if isinstance(backend, OnnxRuntimeBackend):
        lint = _lint(Path(spec.path), ref)
        by_node: dict[str, list[dict[str, Any]]] = {}
        for f in lint:
            by_node.setdefault(f.get("node") or "", []).append(f)
            if f.get("tensor") in row_by_tensor:
                row_by_tensor[f["tensor"]].setdefault("lint", []).append(f["kind"])
        for row in rows:
            for f in by_node.get(row["node"] or "\0", []):
                if f["kind"] not in row.get("lint", []):
                    row.setdefault("lint", []).append(f["kind"])

    # stage checks: one per candidate per check definition, aggregated over tensors
    checks: list[CheckResult] = [
        CheckResult(
            f"{name}: tensors compared", "pairs", float(len(pairing.pairs)), 1.0, ">=", len(pairing.pairs) >= 1, None
        ),
        CheckResult(
            f"{name}: nonfinite_mismatch <= 0", "nonfinite_mismatch", float(nonfinite), 0.0, "<=", nonfinite == 0, None
        ),
    ]
    for (metric, op, thr), agg in aggregated.items():
        checks.append(
            CheckResult(
                f"{name}: {metric} {op} {thr:g} (every tensor)",
                metric,
                agg["worst"],
                thr,
                op,
                agg["failed"] == 0,
                agg["worst_tensor"],
                {
                    "tensors": agg["tensors"],
                    "tensors_failed": agg["failed"],
                    **({"first_failed": agg["first_failed"]} if agg["first_failed"] else {}),
                },
            )
        )
    for ch in checks:
        result.checks.append(ch)
    ref_only = pairing.reference_only
    if not isinstance(backend, OnnxRuntimeBackend):
        note = "not exposed by the candidate (fused or optimised away)"
    else:
        note = "not in the candidate graph"
    backend.close()
    return {
        "name": name,
        "backend": spec.backend,
        "model": str(spec.path),
        "samples": len(samples),
        "chunks": len(chunks),
        "first_divergence": first_divergence,
        "root_cause_method": method,
        "root_causes": root_causes,
        "histograms": histograms,
        "not_isolated": not_isolated,
        "rows": rows,
        "unmatched": {
            "reference_only": ref_only,
            "reference_only_reason": note,
            "candidate_only": cand_only,
            "ignored": pairing.ignored,
            "bad_renames": pairing.bad_renames,
        },
        "lint": lint,
        "passed": all(ch.passed for ch in checks),
    }


def run(ctx: StageContext) -> StageResult:
    suite = ctx.loaded.suite
    cfg = suite.stages.layerwise
    assert cfg is not None
    result = StageResult(NAME, "failed")
    samples = ctx.samples[: cfg.samples] if cfg.samples else ctx.samples
    names = suite.candidates_of(cfg)
    if ctx.shard is not None:
        from trtverify.shard import owns

        names = [n for n in names if owns(ctx.shard, ctx.loaded, (NAME, n))]
        if not names:
            return StageResult(
                NAME,
                "skipped",
                notes=[f"shard {ctx.shard}: every candidate of this stage runs in another shard"],
                details={"sharded_away": True},
            )
    result.details["samples"] = len(samples)
    if not samples or not names:
        result.checks.append(CheckResult("samples and candidates", "count", 0.0, 1.0, ">=", False, None))
        return result
    if suite.backends.onnxruntime.graph_optimization_level != "disable":
        result.notes.append(
            "ONNX models run as written in this stage (ONNX Runtime graph optimisation disabled): "
            "its rewrites of Q/DQ patterns depend on which tensors are exposed, which would make the numbers depend on what is compared"
        )
    with tempfile.TemporaryDirectory(prefix="trtverify-layerwise-") as tmp:
        workdir = Path(tmp)
        ref = _reference_pass(ctx, cfg, samples, workdir, result)
        result.details["reference"] = {
            "model": str(suite.models.reference),
            "tensors": len(ref.order),
            "chunks": ref.chunks,
            "store": "disk (memory-mapped)" if ref.store.on_disk else "memory",
        }
        result.details["candidates"] = [_run_candidate(ctx, cfg, n, ref, samples, workdir, result) for n in names]
    return StageResult.from_checks(
        NAME, result.checks, details=result.details, notes=result.notes, timings=result.timings
    )
