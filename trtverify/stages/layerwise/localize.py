"""Root-cause strategies: which candidate node caused the divergence.

- `isolate` (ONNX candidates run as written): every candidate node group (the node plus the
  Q/DQ/Cast nodes lowering put before it) runs on the *reference's* input values, so the error
  that remains is the node's own, separated from what it inherited;
- `amplification` (any backend): each layer scores the error it *adds*, its output rel_l2 minus
  the largest rel_l2 of its inputs (the ratio is reported too; alone it is undefined where the
  inputs are exact);
- `confirm`: the top amplification suspects isolated on the candidate's own backend (for
  TensorRT one sub-engine build holding every suspect) and re-ranked by that.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends.base import Backend, candidate_backend
from trtverify.compare.checks import worst_of
from trtverify.compare.metrics import CompareError, Comparison, compare
from trtverify.compare.parallel import mapper
from trtverify.config.checks import Check
from trtverify.config.models import Candidate
from trtverify.graph.lightmodel import LightModel
from trtverify.graph.onnxgraph import GraphIndex
from trtverify.stages.base import StageContext, timed
from trtverify.stages.layerwise.isolation import build_isolation_model, isolation_groups
from trtverify.stages.layerwise.models import RootCause, Row
from trtverify.stages.layerwise.reference import NAME, ReferencePass, as_written, budget_bytes
from trtverify.stages.layerwise.stream import Outputs, chunks_for, stream
from trtverify.util import halfcast

KEY_METRICS = ("rel_l2", "cosine", "max_abs", "sqnr", "mean_abs", "max_rel")
# runs an isolation model (an onnx.ModelProto over the candidate's weights) whose sample i is feed_for(i)
BackendFor = Callable[[Any, Callable[[int], dict[str, np.ndarray]]], Backend]


@dataclass(frozen=True)
class Local:
    """A node's own error, on the reference's inputs."""

    metrics: dict[str, float]  # worst over samples, over positions finite on both sides
    nonfinite: int  # positions non-finite in isolation where the reference is finite (or the other way round)
    inputs_nonfinite: list[str]  # its reference inputs that are not finite in the candidate's type (overflow)
    shape_mismatch: str | None = None  # on the reference's inputs it gives another shape (a baked size, ...)
    sides: tuple[int, int] = (0, 0)  # of `nonfinite`: (in the reference only, in the candidate only)


@dataclass
class Evidence:
    """What the candidate's comparison found, for the strategies to rank."""

    ref: ReferencePass
    samples: list[dict[str, np.ndarray]]
    pairs: list[tuple[str, str]]  # (reference tensor, candidate tensor)
    rows: list[Row]
    errors: dict[str, float]  # reference tensor -> worst rel_l2
    observed: dict[str, np.dtype]  # candidate tensor -> dtype it came back in
    checks_for: Callable[[str], Sequence[Check]]
    distinct: set[str] = field(default_factory=set)  # candidate tensors named like a reference tensor, another value


def _graph_dtypes(light: LightModel) -> dict[str, int]:
    """Element types the candidate graph declares or infers for its tensors (no weights needed; the graph's one
    shape inference, shared with the lint)."""
    g = light.inferred.graph
    vis = list(g.value_info) + list(g.input) + list(g.output)
    return {v.name: v.type.tensor_type.elem_type for v in vis if v.type.tensor_type.elem_type}


def isolate(
    ctx: StageContext,
    budget: int,
    light: LightModel,
    make_backend: BackendFor,
    ev: Evidence,
    timings: dict[str, float],
    label: str,
    only: set[str] | None = None,
) -> tuple[dict[str, Local], dict[str, str]]:
    """Run candidate node groups on the reference's inputs: {reference tensor: its own error},
    and the tensors that could not be isolated, with why.

    `make_backend(model, feed_for)` runs the generated isolation model: ONNX Runtime for ONNX
    candidates, or the candidate's own backend when confirming suspects (`feed_for(i)` gives the
    isolation model's inputs of sample i, also its calibration data).
    """
    import onnx

    ref, samples = ev.ref, ev.samples
    cand_info = light.info
    # isolation works in candidate names: a group is fed the reference's values at every candidate tensor
    # that holds a reference value (paired, or same-named and not rewritten), and computes the rest itself
    cand_to_ref = {c: r for r, c in ev.pairs}
    ref_to_cand = dict(ev.pairs)
    wanted = [c for r, c in ev.pairs if only is None or r in only]
    known = ((set(ref.order) | set(ref.graph.inputs)) - ev.distinct) | set(cand_to_ref)
    groups, skipped = isolation_groups(cand_info, known, wanted)
    declared = _graph_dtypes(light)
    sizes = {g.key: sum(ref.nbytes.get(cand_to_ref.get(o, o), 0) for o in g.outputs) for g in groups}
    # a group also holds the weights its nodes compute from constants when it runs (an emulated FP16 weight
    # widened to FP32 by a Cast): counted too, so that a chunk of groups never holds more of them than fits
    computed = {g.key: _computed_weight_bytes(cand_info, g) for g in groups}
    by_key = {g.key: g for g in groups}
    out_map: dict[str, str] = {}  # of the open chunk: isolated output -> candidate tensor
    overflowed: set[str] = set()  # boundary tensors whose reference values are not finite in the candidate's type
    boundary_of = {o: g.boundary for g in groups for o in g.outputs}

    def dtype_of(b: str) -> int:
        if b in ev.observed:
            return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(ev.observed[b]))
        if b in declared:
            return declared[b]
        return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(ref.dtype.get(cand_to_ref.get(b, b), "float32")))

    @contextlib.contextmanager
    def open_chunk(keys: list[str]) -> Iterator[Callable[[int], Outputs]]:
        chunk_groups = [by_key[k] for k in keys]
        boundary = sorted({b for g in chunk_groups for b in g.boundary})
        dtypes = {b: dtype_of(b) for b in boundary}
        model, mapping = build_isolation_model(light.model, cand_info, chunk_groups, dtypes)
        out_map.clear()
        out_map.update(mapping)

        def fed(b: str, si: int) -> tuple[np.ndarray, bool]:
            """Boundary tensor `b` of sample `si` in the candidate's type, and whether that cast overflowed."""
            rname = cand_to_ref.get(b, b)
            value = np.asarray(samples[si][rname] if rname in samples[si] else ref.store.get(si, rname))
            with np.errstate(over="ignore"):  # out-of-range values become inf: recorded by the caller
                cast = halfcast.cast(value, onnx.helper.tensor_dtype_to_np_dtype(dtypes[b]))
            return cast, cast is not value and cast.dtype.kind == "f" and _overflows(value, cast)

        def feed_for(si: int) -> dict[str, np.ndarray]:
            out = {}
            for b, (value, over) in zip(boundary, each(lambda b: fed(b, si), boundary)):
                out[b] = value
                if over:
                    overflowed.add(b)
            return out

        with make_backend(model, feed_for) as iso:
            yield lambda si: iso.infer(feed_for(si))

    def progress(done: int, steps: int) -> None:
        ctx.progress(NAME, done, steps, f"{label}: isolate")

    local: dict[str, list[Comparison]] = {}
    nonfinite: dict[str, int] = {}
    sides: dict[str, tuple[int, int]] = {}
    mismatched: dict[str, str] = {}
    t0 = time.perf_counter()
    # a chunk's feeds (the reference's values at its boundary, in the candidate's types) and its outputs are both
    # held while it runs: chunks of half of one sample's compared tensors keep isolation within the memory the
    # comparison pass needed, instead of adding to its peak
    half = max(sum(sizes.values()) // 2, 1)
    limit = min(budget, 3 * max(half, max(computed.values(), default=0)))
    chunks = chunks_for([g.key for g in groups], {k: sizes[k] + computed[k] for k in sizes}, limit)
    with mapper() as each:  # the casts of a chunk's feeds and the comparisons of its outputs side by side
        for _chunk, si, outs in stream(chunks, len(samples), open_chunk, progress):
            present = [(iso, cand_to_ref.get(c, c)) for iso, c in out_map.items() if iso in outs]

            def judged(item: tuple[str, str], si: int = si, outs: Outputs = outs) -> Comparison | CompareError:
                try:
                    return compare(ref.store.get(si, item[1]), outs[item[0]])
                except CompareError as exc:
                    return exc

            for (_iso, rname), c in zip(present, each(judged, present)):  # in order, whatever finished first
                if isinstance(c, CompareError):
                    if "shape mismatch" in str(c):  # its own doing: it was fed the reference's inputs
                        mismatched.setdefault(rname, str(c))
                    continue
                local.setdefault(rname, []).append(c)
                nonfinite[rname] = nonfinite.get(rname, 0) + c.nonfinite_mismatch
                r_only, c_only = sides.get(rname, (0, 0))
                sides[rname] = (r_only + c.ref_only_nonfinite, c_only + c.cand_only_nonfinite)
    timed(timings, f"{label}.isolate_s", time.perf_counter() - t0)
    out = {}
    for rname, per_sample in local.items():
        worst = {k: v for k, v in worst_of(per_sample).items() if v == v}  # NaN: nothing finite to compare
        inputs = sorted(
            cand_to_ref.get(b, b) for b in boundary_of.get(ref_to_cand.get(rname, rname), ()) if b in overflowed
        )
        out[rname] = Local(worst, nonfinite[rname], inputs, sides=sides.get(rname, (0, 0)))
    for rname, why in mismatched.items():
        if rname not in out:
            out[rname] = Local({}, 0, [], why)
    return out, skipped


def _computed_weight_bytes(g: GraphIndex, group: Any) -> int:
    """Bytes of the values a group's Cast nodes make from constants when it runs (FP32: 4 bytes a value)."""
    total = 0
    for i in group.nodes:
        node = g.nodes[i]
        if node.op_type == "Cast" and node.input and node.input[0] in g.constants:
            dims = g.constants[node.input[0]].dims
            total += 4 * int(np.prod(dims)) if dims else 4
    return total


def _overflows(value: np.ndarray, cast: np.ndarray) -> bool:
    """Whether casting made finite values non-finite (a reference value out of the candidate type's range)."""
    if cast.dtype == np.float16 and value.dtype.kind == "f" and value.size:
        # within float16's range: nothing overflowed (numpy's isfinite on float16 costs 1.7 ns a value, max 0.1)
        if max(float(value.max()), -float(value.min())) <= 65504.0:  # False with a NaN: the full check
            return False
    if np.isfinite(cast).all():
        return False
    return bool(np.any(np.isfinite(value) & ~np.isfinite(cast)))


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and value == value else None


def _suspect(row: Row) -> dict[str, object]:
    """Who a row blames: the candidate node computing it (where a rewrite moved the work), else the reference's."""
    note = row.pairing
    if note is not None and note.candidate_node is not None:
        return {"node": note.candidate_node, "op_type": note.candidate_op_type, "pairing": note}
    return {"node": row.node, "op_type": row.op_type, "pairing": note}


def isolate_ranking(local: dict[str, Local], ev: Evidence) -> list[RootCause]:
    """Suspects by their own (local) error; a non-finite output where the reference is finite scores +inf."""
    by_tensor = {row.tensor: row for row in ev.rows}
    out = []
    for r, own in local.items():
        row = by_tensor.get(r)
        if row is None:
            continue
        m = own.metrics
        checks = ev.checks_for(row.candidate_tensor or r)
        exceeds = own.nonfinite > 0 or own.shape_mismatch is not None
        exceeds = exceeds or any(not ch.passes(m[ch.metric]) for ch in checks if ch.metric in m)
        out.append(
            RootCause(
                **_suspect(row),  # type: ignore[arg-type]
                tensor=r,
                topo_index=row.topo_index,
                score=math.inf if own.nonfinite or own.shape_mismatch else m.get("rel_l2", 0.0),
                shape_mismatch=own.shape_mismatch,
                local={k: m[k] for k in KEY_METRICS if k in m},
                nonfinite=own.nonfinite or None,
                ref_only_nonfinite=own.sides[0] if own.nonfinite else None,
                cand_only_nonfinite=own.sides[1] if own.nonfinite else None,
                inputs_nonfinite=own.inputs_nonfinite or None,
                inherited_rel_l2=ev.ref.inputs_error(r, ev.errors),
                output_rel_l2=_finite_or_none(ev.errors.get(r)),
                exceeds_checks=exceeds,
            )
        )
    return out


# Ops that cannot make an elementwise difference larger (|f(a) - f(b)| <= |a - b|, or they move values without
# computing): their output's *relative* error can exceed their input's where they shrink the values (a Relu zeroing
# most of them), but not the absolute error. Judged by mean |difference|, they add error only where it grows.
NONEXPANSIVE = frozenset(
    {"Relu", "Clip", "Sigmoid", "Tanh", "Abs", "Neg", "Softsign", "Softplus", "HardSigmoid", "Identity", "Reshape",
     "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Dropout"}
)  # fmt: skip
ROUNDING = 1e-3  # mean |difference| may grow this much (the op's own rounding) and still add nothing


def _adds_nothing(row: Row, inputs: list[Row]) -> bool:
    """A non-expansive op whose mean |difference| is no larger than its data input's (same number of elements)."""
    if row.op_type not in NONEXPANSIVE or not inputs or row.shape is None:
        return False
    data = inputs[0]
    out, inp = row.metrics.get("mean_abs"), data.metrics.get("mean_abs")
    if out is None or inp is None or data.shape is None or math.prod(data.shape) != math.prod(row.shape):
        return False
    return out <= inp * (1 + ROUNDING)


def amplification_ranking(ev: Evidence) -> list[RootCause]:
    """Suspects by the error each layer adds to the largest error of its inputs; a layer whose output turns
    non-finite from finite inputs scores +inf, one that inherits non-finite inputs scores 0; a non-expansive op
    (NONEXPANSIVE) whose mean |difference| does not grow scores 0, however its relative error grew."""
    by_tensor = {row.tensor: row for row in ev.rows}
    out = []
    for row in ev.rows:
        if row.not_comparable is not None:
            continue
        out_err = ev.errors.get(row.tensor, math.nan)
        in_err = ev.ref.inputs_error(row.tensor, ev.errors)
        bad_inputs = [t for t in ev.ref.input_tensors(row.tensor) if t in by_tensor and by_tensor[t].nonfinite_mismatch]
        fields: dict[str, object] = {}
        if row.nonfinite_mismatch:
            score = 0.0 if bad_inputs else math.inf
            fields = {
                "nonfinite": row.nonfinite_mismatch,
                "ref_only_nonfinite": row.ref_only_nonfinite or 0,
                "cand_only_nonfinite": row.cand_only_nonfinite or 0,
                "inputs_nonfinite": bad_inputs or None,
            }
        elif out_err != out_err:
            continue
        else:
            added = out_err - in_err
            inputs = [by_tensor[t] for t in ev.ref.input_tensors(row.tensor) if t in by_tensor]
            score = 0.0 if _adds_nothing(row, inputs) else added
            fields = {
                "added_rel_l2": added,
                "amplification": (out_err / in_err) if in_err > 0 else (math.inf if out_err > 0 else 1.0),
            }
        out.append(
            RootCause(
                **_suspect(row),  # type: ignore[arg-type]
                tensor=row.tensor,
                topo_index=row.topo_index,
                score=score,
                **fields,  # type: ignore[arg-type]
                inherited_rel_l2=in_err,
                output_rel_l2=out_err if out_err == out_err else None,
                exceeds_checks=not row.passed,
            )
        )
    return out


def ranked(causes: list[RootCause]) -> list[RootCause]:
    """Non-finite outputs from finite inputs first, then non-finite outputs of out-of-range inputs, then the
    worst finite error; ties in topological order."""

    def key(rc: RootCause) -> tuple[int, float, int]:
        tier = 2 if not rc.nonfinite else (1 if rc.inputs_nonfinite else 0)
        return tier, -rc.score if tier == 2 else 0.0, rc.topo_index

    return sorted(causes, key=key)


def confirm(
    ctx: StageContext,
    budget: int,
    top: int,
    spec: Candidate,
    ev: Evidence,
    causes: list[RootCause],
    workdir: Path,
    timings: dict[str, float],
    label: str,
) -> list[RootCause]:
    """Run the top suspects in isolation on the candidate's own backend and re-rank them by that.

    For TensorRT this is one extra engine build holding every suspect side by side, each fed
    with the reference's inputs; suspects whose own error stays small drop down.
    """
    light = LightModel(Path(spec.path), workdir)
    backends = as_written(ctx.loaded.suite.backends)

    def make(model: Any, feed_for: Callable[[int], dict[str, np.ndarray]]) -> Backend:
        feeds = [feed_for(i) for i in range(len(ev.samples))]  # calibration data for weakly typed INT8 builds
        return candidate_backend(spec.backend, light.save_variant(model), backends, feeds)

    suspects = causes[:top]
    only = {rc.tensor for rc in suspects}
    local, skipped = isolate(ctx, budget, light, make, ev, timings, f"{label}.confirm", only=only)
    checked = []
    for rc in suspects:
        own = local.get(rc.tensor)
        if own is not None:
            m = own.metrics
            confirmed = {k: m[k] for k in KEY_METRICS if k in m}
            if own.nonfinite:
                confirmed["nonfinite"] = float(own.nonfinite)
            rc = rc.model_copy(update={"confirmed_local": confirmed})
        elif rc.tensor in skipped:
            rc = rc.model_copy(update={"not_confirmed": skipped[rc.tensor]})
        checked.append(rc)
    checked.sort(key=_confirmed_key)
    return checked + causes[top:]


def _confirmed_key(rc: RootCause) -> tuple[int, float]:
    """Confirmed non-finite first, then by confirmed own rel_l2; unconfirmed suspects last."""
    c = rc.confirmed_local
    if c is None:
        return 2, 0.0
    return (0, 0.0) if c.get("nonfinite") else (1, -c.get("rel_l2", 0.0))


def root_causes(
    ctx: StageContext,
    method: str,
    backend: Backend,
    spec: Candidate,
    ev: Evidence,
    workdir: Path,
    timings: dict[str, float],
    label: str,
) -> tuple[str, list[RootCause], dict[str, str]]:
    """(the method used, every suspect ranked, tensors that could not be isolated)."""
    cfg = ctx.loaded.suite.stages.layerwise
    assert cfg is not None
    budget = budget_bytes(cfg)
    if method == "auto":
        method = "isolate" if backend.capabilities.onnx_graph else "amplification"
    if method == "isolate" and backend.capabilities.onnx_graph:
        options = as_written(ctx.loaded.suite.backends).onnxruntime

        light = backend.graph()

        def make(model: Any, feed_for: Any) -> Backend:
            from trtverify.backends.onnxruntime import OnnxRuntimeBackend

            return OnnxRuntimeBackend(light.runnable(model), options)  # over the candidate's own weight files

        local, not_isolated = isolate(ctx, budget, light, make, ev, timings, label)
        return "isolate", ranked(isolate_ranking(local, ev)), not_isolated
    causes = ranked(amplification_ranking(ev))
    if cfg.confirm_top and causes and spec.captured is not None:  # read from a file: nothing here re-runs it
        why = "not confirmed: the candidate was captured on another machine, and confirming re-runs it"
        return "amplification", causes, {rc.tensor: why for rc in causes[: cfg.confirm_top]}
    if cfg.confirm_top and causes:
        causes = confirm(ctx, budget, cfg.confirm_top, spec, ev, causes, workdir, timings, label)
    return "amplification", causes, {}
