"""The reference pass: every value tensor of the reference ONNX model, for every sample."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends.onnxruntime import OnnxRuntimeBackend
from trtverify.config.backends import Backends
from trtverify.config.stages import LayerwiseStage
from trtverify.graph.onnxgraph import GraphIndex
from trtverify.stages.base import StageContext, timed
from trtverify.stages.layerwise.stream import chunks_for, exposing, stream
from trtverify.util.errors import LoadError, RunError, UsageError
from trtverify.util.tensorstore import TensorStore

NAME = "layerwise"


@dataclass
class ReferencePass:
    """Reference intermediates of every sample, and what is known about each tensor."""

    graph: GraphIndex
    order: list[str]  # value tensors in topological order
    store: TensorStore
    dtype: dict[str, str] = field(default_factory=dict)
    shape: dict[str, tuple[int, ...]] = field(default_factory=dict)  # of the first sample
    nbytes: dict[str, int] = field(default_factory=dict)
    max_abs: dict[str, float] = field(default_factory=dict)
    chunks: int = 0
    light: Any = None  # the reference's LightModel (structural pairing runs it for its shape arithmetic)
    uncomputed: dict[str, str] = field(default_factory=dict)  # value tensors after a plugin without a reference

    def input_tensors(self, tensor: str) -> list[str]:
        """The inputs of the node that produces `tensor`."""
        p = self.graph.producers.get(tensor)
        return [i for i in self.graph.nodes[p.index].input if i] if p is not None else []

    def inputs_error(self, tensor: str, errors: dict[str, float]) -> float:
        """The largest error (rel_l2) among the inputs of the node that produces `tensor` (NaN errors skipped)."""
        vals = [errors[i] for i in self.input_tensors(tensor) if i in errors and errors[i] == errors[i]]
        return max(vals) if vals else 0.0


def as_written(backends: Backends) -> Backends:
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


def budget_bytes(cfg: LayerwiseStage) -> int:
    return int(cfg.memory_budget_mb * 1024 * 1024)


def infer_with_feed(model: Any, feed: dict[str, np.ndarray]) -> Any:
    """A copy of `model` with the feed's concrete input shapes and inferred value types and shapes (as far as
    inference gets: its result is an estimate; a failure leaves the shapes unknown)."""
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
        return onnx.shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    except Exception:  # an estimate only: a failure means "unknown"
        return m


def update_max_abs(max_abs: dict[str, float], name: str, arr: np.ndarray) -> None:
    """Fold the largest finite |x| of `arr` into max_abs[name] (float tensors only). A value at the type's extreme
    (beyond half its largest finite value: a mask's finfo.min fill) counts as -inf does, as no activation's."""
    if arr.dtype.kind == "f" and arr.size:
        ok = np.isfinite(arr)
        finite = np.abs(arr) if ok.all() else np.abs(arr[ok])
        if finite.size and float(finite.max()) >= float(np.finfo(arr.dtype).max) / 2:
            finite = finite[finite < float(np.finfo(arr.dtype).max) / 2]
        if finite.size:
            max_abs[name] = max(max_abs.get(name, 0.0), float(finite.max()))


def estimate_sizes(model: Any, feed: dict[str, np.ndarray], names: Sequence[str]) -> dict[str, int]:
    """Bytes per tensor from shape inference with the feed's concrete shapes (unknown: the largest known)."""
    import onnx

    inferred = infer_with_feed(model, feed)
    sizes: dict[str, int] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
        t = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
        if t.elem_type and dims and all(d >= 0 for d in dims):
            string = t.elem_type == onnx.TensorProto.STRING
            itemsize = 8 if string else onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).itemsize
            sizes[vi.name] = int(np.prod(dims)) * itemsize
        elif t.elem_type and not t.shape.dim and t.HasField("shape"):
            sizes[vi.name] = 8
    fallback = max(sizes.values(), default=4 << 20)
    return {n: sizes.get(n, fallback) for n in names}


def reference_pass(
    ctx: StageContext,
    cfg: LayerwiseStage,
    samples: list[dict[str, np.ndarray]],
    workdir: Path,
    timings: dict[str, float],
) -> ReferencePass:
    try:
        return _reference_pass(ctx, cfg, samples, workdir, timings)
    except LoadError as exc:  # nothing can be compared with a reference that does not load: a usage error
        raise UsageError(f"models.reference: {exc}; layerwise compares against a reference ONNX Runtime loads") from exc
    except RunError as exc:  # nor with one that fails on these inputs (generated ones may not suit it)
        raise UsageError(
            f"models.reference: {exc}; the reference must run on the inputs compared: give it inputs it takes "
            "(trtverify layerwise --inputs FILE.npz; a suite's inputs:)"
        ) from exc


def _reference_pass(
    ctx: StageContext,
    cfg: LayerwiseStage,
    samples: list[dict[str, np.ndarray]],
    workdir: Path,
    timings: dict[str, float],
) -> ReferencePass:
    suite = ctx.loaded.suite
    backend = OnnxRuntimeBackend(Path(suite.models.reference), as_written(suite.backends).onnxruntime)
    with backend:
        light = backend.graph()
        skip = backend.uncomputed()  # after a plugin node without a reference: rows of their own, never compared
        order = [t for t in light.info.value_tensors() if t not in skip]
        estimate = estimate_sizes(light.model, samples[0], order)
        budget = budget_bytes(cfg)
        total = sum(estimate.values()) * len(samples)
        # keep references in memory when all samples fit half the budget; the other half is for the candidate
        store = TensorStore(None if total <= budget // 2 else workdir / "reference")
        chunks = chunks_for(order, estimate, budget)
        ref = ReferencePass(light.info, order, store, chunks=len(chunks), light=light, uncomputed=dict(skip))
        t0 = time.perf_counter()

        def progress(done: int, steps: int) -> None:
            ctx.progress(NAME, done, steps, "reference")

        for chunk, si, out in stream(chunks, len(samples), exposing(backend, samples), progress):
            for name in chunk:
                if name not in out:
                    continue
                arr = out[name]
                ref.store.put(si, name, arr)
                if name not in ref.dtype:
                    ref.dtype[name] = str(arr.dtype)
                    ref.shape[name] = tuple(arr.shape)
                    ref.nbytes[name] = int(arr.nbytes)
                update_max_abs(ref.max_abs, name, arr)
    # what ONNX Runtime gave no tensor for (a sequence, a map) is neither compared nor fed to isolation runs
    ref.order = [t for t in ref.order if t in ref.dtype]
    timed(timings, "reference_s", time.perf_counter() - t0)
    return ref
