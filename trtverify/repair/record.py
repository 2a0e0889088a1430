"""repair.json: the keep-list, its verification, its cost, and the keep-list in the forms users' tools take."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from trtverify.backends.onnxruntime import OnnxRuntimeBackend
from trtverify.config.backends import OnnxRuntimeOptions
from trtverify.convert.modelopt import exact_patterns
from trtverify.graph.onnxgraph import GraphIndex
from trtverify.repair.evaluate import Evaluation
from trtverify.repair.search import Search
from trtverify.repair.sensitivity import Sensitivity
from trtverify.stages.layerwise.reference import infer_with_feed
from trtverify.util.errors import BackendError
from trtverify.util.record import Record, omitted
from trtverify.util.words import count

LATENCY_RUNS = 20


class Checked(Record):
    """The target's checks on one evaluation."""

    keep: list[str]
    passed: bool
    failed: list[str]
    values: dict[str, dict[str, float]] = Field(description="tensor -> checked metric -> worst value over samples")


class Cost(Record):
    nodes: int = Field(description="nodes kept in FP32")
    of_nodes: int = Field(description="nodes in the model")
    flops_share: float = Field(description="share of the model's multiply-adds computed by kept nodes (estimate)")
    params_share: float = Field(description="share of the model's float parameters read by kept nodes")
    latency_ms: dict[str, float] = Field(
        description="ONNX Runtime latency (the suite's providers and graph optimisation level), mean of a short run on "
        "the first sample: reference, before, after; a model missing here is in not_measured or load_errors"
    )
    not_measured: dict[str, str] = omitted(
        dict, "models not timed because they cannot run natively here (BF16 on a CPU), and why"
    )
    load_errors: dict[str, str] = omitted(
        dict,
        "models ONNX Runtime could not load or run (a crash included: the session is made in a child process "
        "first), and why",
    )


class CurvePoint(Record):
    """One reference tensor's worst rel_l2 before (nothing kept) and after (repaired)."""

    tensor: str
    node: str | None
    index: int = Field(description="position in the reference's topological order of value tensors")
    before: float | None = Field(description="null: not compared (or non-finite in the candidate)")
    after: float | None
    kept: bool = Field(description="its node is on the keep-list")


def curve(result: Search) -> list[CurvePoint]:
    assert result.before is not None and result.after is not None
    kept = set(result.keep)
    out = []
    for i, t in enumerate(result.order):
        node = result.producer.get(t)
        b, a = result.before.errors.get(t), result.after.errors.get(t)
        if t in result.before.nonfinite:
            b = None
        if t in result.after.nonfinite:
            a = None
        out.append(CurvePoint(tensor=t, node=node, index=i, before=b, after=a, kept=node in kept))
    return out


class RepairRecord(Record):
    """What `trtverify repair` found (DIR/repair.json)."""

    reference: str
    precision: str
    passed: bool = Field(description="the repaired model passes the target (verified by evaluation)")
    keep: list[str] = Field(description="ONNX node names kept in FP32: 1-minimal (removing any one fails)")
    repaired_model: str = Field(description="the repaired ONNX model, in the output folder")
    evaluations: int
    seconds: float
    target: list[str] = Field(description="the checks, and the tensors they apply to")
    seeds: dict[str, str] = Field(description="nodes the search started from, and why")
    before: Checked
    after: Checked
    cost: Cost
    exports: dict[str, Any] = Field(description="the keep-list as each tool takes it")
    curve: list[CurvePoint] = Field(description="every reference tensor's rel_l2 before and after the repair")
    stopped: str | None = Field(default=None, description="where it did not pass: why the search ended there")
    rows: dict[str, int] = Field(default_factory=dict, description="input rows the search used, and held out")
    verified: Checked | None = Field(
        default=None, description="the repaired model's checks on the held-out rows (none held out: null)"
    )
    candidate_precision: str | None = Field(
        default=None, description="what the lowered model computes in, read from its graph (e.g. int8+fp16)"
    )
    calibration: dict[str, Any] | None = Field(
        default=None,
        description="int8 made here: how it was calibrated (method, calibration_rows; auto: chosen_by, held_out_rows "
        "and each method's worst rel_l2 on them over the judged tensors, figures; judged, judged_why; skipped: "
        "methods stopped by auto's budget)",
    )
    sensitivity: Sensitivity | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="the sensitivity table and its exclusion lists (stages.repair.sensitivity, repair --sensitivity)",
    )
    pending: list[str] = omitted(
        list,
        "what was not done yet when this file was written: it is written as soon as the search ends (and when "
        "the search is interrupted), then again after the verification and the latencies",
    )


def checked(ev: Evaluation) -> Checked:
    return Checked(keep=list(ev.keep), passed=ev.passed, failed=list(ev.failed), values=ev.checked)


def exports(
    keep: Sequence[str], repaired: Path, precision: str, op_types: dict[str, str] | None = None
) -> dict[str, Any]:

    names = list(keep)
    kinds = sorted({(op_types or {}).get(n, "") for n in names} - {""})
    out: dict[str, Any] = {
        "tensorrt_strongly_typed": str(repaired),
        "onnxruntime_float16_node_block_list": names,
        "onnxruntime_quantization_nodes_to_exclude": names,
        # AutoCast keeps a node FP32 by regex; ModelOpt's quantizer excludes nodes from Q/DQ only (its FP16 rest
        # still lowers them): an FP32 node there takes --op_types_to_exclude_fp16 (every node of the type)
        "modelopt_autocast": f"--nodes_to_exclude {' '.join(exact_patterns(names))}" if names else "",
        "modelopt_quantization": (
            f"--nodes_to_exclude {' '.join(names)} --op_types_to_exclude_fp16 {' '.join(kinds)}" if names else ""
        ),
        "polygraphy": (
            f"--layer-precisions {' '.join(f'{n}:float32' for n in names)} --precision-constraints obey"
            if names
            else ""
        ),
        "trtexec": (
            f"--layerPrecisions={','.join(f'{n}:fp32' for n in names)} --precisionConstraints=obey" if names else ""
        ),
    }
    if names and kinds:
        of_kinds = sum(1 for t in (op_types or {}).values() if t in kinds)
        out["modelopt_quantization_scope"] = (
            f"--op_types_to_exclude_fp16 keeps every {', '.join(kinds)} node in FP32: {count(of_kinds, 'node')}, "
            f"{of_kinds - len(names)} more than the {len(names)} of the keep-list (ModelOpt's quantizer excludes "
            "from FP16 by op type only); the repaired ONNX keeps exactly the keep-list"
        )
    out["note"] = (
        "TensorRT 11 and TensorRT-RTX build the repaired ONNX as it is, strongly typed, with no precision flags "
        f"({precision} with FP32 islands); polygraphy and trtexec flags: TensorRT <= 10 (weakly typed), whose ONNX "
        "parser names layers after ONNX nodes"
    )
    return out


def cost(reference: Any, keep: Sequence[str], feed: dict[str, np.ndarray]) -> Cost:
    """What the keep-list costs in the work and parameters of the model (latencies: `with_latency`)."""
    macs, params = _work(reference, feed)
    g = GraphIndex.from_model(reference)
    labels = [g.label(i) for i in range(len(g.nodes))]
    kept = set(keep)
    total_macs = sum(macs.values()) or 1
    total_params = sum(params.values()) or 1
    return Cost(
        nodes=len(kept),
        of_nodes=len(labels),
        flops_share=sum(v for k, v in macs.items() if k in kept) / total_macs,
        params_share=sum(v for k, v in params.items() if k in kept) / total_params,
        latency_ms={},
    )


def with_latency(cost_: Cost, paths: dict[str, Path], feed: dict[str, np.ndarray], options: OnnxRuntimeOptions) -> Cost:
    """`cost_` with each model's latency in ONNX Runtime with `options`, or why it is not measured."""
    latency, not_measured, errors = {}, {}, {}
    for name, path in paths.items():
        ms, why, error = _latency(path, feed, options)
        if ms is not None:
            latency[name] = ms
        elif error:
            errors[name] = why
        else:
            not_measured[name] = why
    return cost_.model_copy(update={"latency_ms": latency, "not_measured": not_measured, "load_errors": errors})


def _work(model: Any, feed: dict[str, np.ndarray]) -> tuple[dict[str, int], dict[str, int]]:
    """Per node label: multiply-adds (Conv, ConvTranspose, Gemm, MatMul; output size for the rest) and float
    parameters read."""
    m = infer_with_feed(model, feed)  # an estimate: unknown shapes count as nothing
    shapes = {}
    for vi in [*m.graph.input, *m.graph.output, *m.graph.value_info]:
        dims = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if dims and all(d > 0 for d in dims):
            shapes[vi.name] = dims
    g = GraphIndex.from_model(model)
    # initializers and Constant nodes alike (PaddlePaddle's exports hold every weight in a Constant node)
    sizes = {name: int(np.prod(t.dims)) for name, t in g.constants.items() if t.data_type in (1, 10, 16)}
    macs, params = {}, {}
    for i, n in enumerate(g.nodes):
        label = g.label(i)
        params[label] = sum(sizes.get(x, 0) for x in n.input)
        out = shapes.get(n.output[0]) if n.output else None
        if out is None:
            macs[label] = 0
            continue
        per = 1
        w = shapes.get(n.input[1]) if len(n.input) > 1 else None
        w = w or (
            [int(d) for d in g.constants[n.input[1]].dims] if len(n.input) > 1 and n.input[1] in g.constants else None
        )
        if n.op_type in ("Conv", "ConvTranspose") and w:
            per = int(np.prod(w[1:]))
        elif n.op_type in ("Gemm", "MatMul") and w:
            per = w[0] if n.op_type == "MatMul" or not any(a.name == "transB" and a.i for a in n.attribute) else w[1]
        macs[label] = int(np.prod(out)) * per
    return macs, params


def _latency(path: Path, feed: dict[str, np.ndarray], options: OnnxRuntimeOptions) -> tuple[float | None, str, bool]:
    """(ms, "", False) measured; (None, why, False) where the model cannot run natively here (BF16 on a CPU runs
    emulated: its time would be the emulation's); (None, why, True) where ONNX Runtime cannot load or run it. The
    session is timed, so it is made in a child process first: a crash there is an error, not the end of the run."""
    backend = OnnxRuntimeBackend(path, options.model_copy(update={"fp16_on_cpu": "native"}))
    backend.probe_first = True
    try:
        with backend:
            if backend.emulated is not None:
                providers = ", ".join(options.providers)
                return None, f"not timed: ONNX Runtime's {providers} has no BF16 kernels (it runs emulated here)", False
            backend.prepare()
            backend.infer(feed)
            t0 = time.perf_counter()
            for _ in range(LATENCY_RUNS):
                backend.infer(feed)
    except BackendError as exc:
        return None, str(exc), True
    return (time.perf_counter() - t0) / LATENCY_RUNS * 1000.0, "", False


def record(
    reference: Path, result: Search, repaired: Path, target: list[str], seconds: float, cost_: Cost
) -> RepairRecord:
    assert result.before is not None and result.after is not None
    return RepairRecord(
        reference=str(reference),
        precision=result.precision,
        passed=result.passed,
        keep=list(result.keep),
        repaired_model=str(repaired),
        evaluations=len(result.steps),
        seconds=seconds,
        target=target,
        seeds=result.seeds,
        before=checked(result.before),
        after=checked(result.after),
        cost=cost_,
        exports=exports(result.keep, repaired, result.precision, {n.name: n.op_type for n in result.model.graph.node}),
        curve=curve(result),
        stopped=result.stopped or None,
        calibration=result.calibration,
    )
