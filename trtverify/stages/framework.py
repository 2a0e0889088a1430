"""Stage `framework`: did the export to ONNX change what the model computes?

Reference: the PyTorch model (or its stored outputs, when every hash matches).
Candidate: the reference ONNX model under ONNX Runtime. Same N inputs, every output compared.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import Field

from trtverify.backends.base import Backend
from trtverify.backends.onnxruntime import OnnxRuntimeBackend
from trtverify.backends.torch import TorchBackend
from trtverify.compare.checks import CheckResult, TensorSummary, evaluate, limit_check, run_comparisons
from trtverify.compare.pairing import Pairing, PairingRecord, pair_names
from trtverify.data.reference import hash_samples
from trtverify.lint.linter import baked_shapes
from trtverify.stages import framework_detections, framework_repeat
from trtverify.stages.base import StageContext, StageResult, status_of
from trtverify.stages.layerwise.detmodels import DetectionRow
from trtverify.util.errors import MissingDependency
from trtverify.util.fsutil import sha256_file
from trtverify.util.record import Record, optional

NAME = "framework"
STORE_KIND = "pytorch"


class FrameworkReference(Record):
    """Where the PyTorch outputs came from."""

    store: str = Field(description="the reference store folder")
    state: Literal["valid", "missing", "stale", "corrupt"] = Field(description="what the store held")
    reasons: list[str] = Field(description="why it was not valid")
    source: Literal["stored", "pytorch"] | None = optional("stored outputs, or PyTorch run now")
    created: str | None = optional("when the stored outputs were made")
    versions: dict[str, str] | None = optional("library versions the stored outputs were made with")
    saved: bool | None = optional("the outputs were (re)written to the store")


class FrameworkOutput(TensorSummary):
    passed: bool


class FrameworkResult(StageResult):
    """Stage framework: PyTorch against the reference ONNX model in ONNX Runtime."""

    name: Literal["framework"] = "framework"
    samples: int | None = optional("samples compared")
    reference: FrameworkReference | None = optional()
    pairing: PairingRecord | None = optional("how PyTorch outputs paired with ONNX outputs")
    outputs: list[FrameworkOutput] | None = optional("one row per output compared element by element")
    detections: list[DetectionRow] | None = optional(
        "detection outputs (NMS plugins' four outputs, [B, K, 6] rows) compared box to box by class and IoU"
    )


def _module_file(spec: str, search_path: list[Path]) -> Path | None:
    """Source file of a hook's module, found without importing it (so no torch import)."""
    from trtverify.util.hooks import extra_sys_path

    module = spec.split(":")[0]
    with extra_sys_path(search_path):
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            return None
    return Path(found.origin) if found and found.origin and Path(found.origin).is_file() else None


def reference_depends(ctx: StageContext, samples: list[dict[str, np.ndarray]]) -> dict[str, str]:
    """Everything the PyTorch outputs depend on, as hashes: model files, factory source, config, inputs."""
    suite = ctx.loaded.suite
    pt = suite.models.pytorch
    assert pt is not None
    dep: dict[str, str] = {"inputs": hash_samples(samples)}
    for key in ("weights", "torchscript", "exported"):
        p = getattr(pt, key)
        if p is not None:
            dep[f"{key}:{Path(p).name}"] = sha256_file(Path(p))
    if pt.factory:
        src = _module_file(pt.factory, ctx.loaded.search_path)
        if src is not None:
            dep[f"factory_source:{src.name}"] = sha256_file(src)
    config = {
        "factory": pt.factory,
        "kwargs": pt.kwargs,
        "input_names": pt.input_names,
        "output_names": pt.output_names,
    }
    dep["config"] = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()
    return dep


def _versions() -> dict[str, str]:
    from trtverify.util.environment import library_versions

    return {k: v for k, v in library_versions().items() if k in ("torch", "numpy", "onnxruntime", "onnx")}


def store_kind(shape: str | None) -> str:
    """The stored reference's folder: one per shape set in a sweep (`pytorch@x=8x3x224x224`), so that every set's
    outputs are kept and a sweep runs without PyTorch once stored."""
    return STORE_KIND if shape is None else f"{STORE_KIND}@{re.sub(r'[^A-Za-z0-9=._-]+', '_', shape)}"


def _infer_all(
    ctx: StageContext,
    backend: Backend,
    samples: list[dict[str, np.ndarray]],
    what: str,
    timings: dict,
    key: str,
    repeat: bool = False,
) -> list[dict[str, np.ndarray]]:
    """Every sample through a loaded `backend`, timed under `key`; the backend is closed after. `repeat`: the
    first sample runs once more (timed under `key`_repeat) and must give the same outputs (framework_repeat)."""
    outs = []
    t0 = time.perf_counter()
    try:
        for i, feed in enumerate(samples):
            outs.append(backend.infer(feed))
            ctx.progress(NAME, i + 1, len(samples), what)
        timings[key] = time.perf_counter() - t0
        if repeat and samples:
            t1 = time.perf_counter()
            again = backend.infer(samples[0])
            timings[f"{key.removesuffix('_s')}_repeat_s"] = time.perf_counter() - t1
            framework_repeat.check_deterministic(outs[0], again)
    finally:
        backend.close()
    return outs


def _pytorch_outputs(
    ctx: StageContext, samples: list[dict[str, np.ndarray]], notes: list[str], timings: dict[str, float]
) -> tuple[list[dict[str, np.ndarray]], FrameworkReference]:
    """The PyTorch outputs: stored ones when every hash matches, else PyTorch run now."""
    suite = ctx.loaded.suite
    store = ctx.store
    depends = reference_depends(ctx, samples)
    lookup = store.lookup(store_kind(ctx.shape), depends)
    where = {"store": str(lookup.folder), "state": lookup.state, "reasons": lookup.reasons}
    if lookup.state == "valid" and not ctx.update_reference:
        notes.append(f"reference: stored PyTorch outputs from {lookup.folder} (hashes match; PyTorch not run)")
        manifest = lookup.manifest or {}
        info = FrameworkReference(
            **where, source="stored", created=manifest.get("created"), versions=manifest.get("versions")
        )
        return lookup.outputs, info  # type: ignore[return-value]
    if lookup.state in ("stale", "corrupt") and not ctx.update_reference:
        notes.append(
            f"stored reference in {lookup.folder} is {lookup.state} and was NOT used: {'; '.join(lookup.reasons)}. "
            "Running PyTorch instead; rerun with --update-reference to rewrite it."
        )
    assert suite.models.pytorch is not None
    backend = TorchBackend(
        suite.models.pytorch,
        suite.backends.torch,
        search_path=ctx.loaded.search_path,
        default_input_names=[m.name for m in ctx.model_inputs],
    )
    try:
        backend.load()
    except MissingDependency as exc:
        if lookup.state in ("stale", "corrupt"):
            exc.args = (
                f"{exc.args[0]}\n  (needed because the stored reference is {lookup.state}: "
                f"{'; '.join(lookup.reasons)})",
            )
        raise
    outs = _infer_all(ctx, backend, samples, "PyTorch", timings, "pytorch_s", repeat=True)
    saved = None
    if lookup.state == "missing" or ctx.update_reference:
        store.save(store_kind(ctx.shape), depends, samples, outs, _versions())
        saved = True
        notes.append(
            f"reference: PyTorch outputs {'rewritten' if lookup.state != 'missing' else 'stored'} in {lookup.folder}"
        )
    return outs, FrameworkReference(**where, source="pytorch", saved=saved)


def _unmatched_label(pairing: Pairing) -> str:
    """'unmatched outputs', naming them and the rename that would pair them where there are any."""
    ref_only, cand_only = pairing.reference_only, pairing.candidate_only
    if not ref_only and not cand_only:
        return "unmatched outputs"
    parts = []
    if ref_only:
        parts.append("PyTorch only: " + ", ".join(ref_only))
    if cand_only:
        parts.append("ONNX only: " + ", ".join(cand_only))
    if ref_only and cand_only:
        pairs = ", ".join(f"{r}: {c}" for r, c in zip(ref_only, cand_only))
        parts.append(f"pair them with stages.framework.rename: {{{pairs}}}")
    return f"unmatched outputs ({'; '.join(parts)})"


def _baked_notes(model: Path) -> list[str]:
    """Where the ONNX model gives another shape than PyTorch: the nodes whose constants fix a size the model
    declares dynamic (the lint's shape_baked), the usual cause of an export right only at its traced size."""
    found = baked_shapes(model)
    if not found:
        return []
    shown = "; ".join(f.message.split(": its constant")[0] + f" (constant {f.detail.get('values')})" for f in found[:3])
    more = f"; and {len(found) - 3} more" if len(found) > 3 else ""
    return [
        "the ONNX model gives another shape than PyTorch, and its export fixes a size it declares dynamic "
        f"(lint shape_baked): {shown}{more}. Export it with the size computed from the input"
    ]


def run(ctx: StageContext) -> FrameworkResult:
    suite = ctx.loaded.suite
    cfg = suite.stages.framework
    assert cfg is not None
    samples = ctx.samples_upto(cfg.samples)
    if not samples:
        check = limit_check("samples", NAME, "samples", 0, 1, ">=", detail={"reason": "zero samples compared"})
        return FrameworkResult(status="failed", checks=[check], samples=0)
    notes: list[str] = []
    timings: dict[str, float] = {}
    ref_outs, reference = _pytorch_outputs(ctx, samples, notes, timings)

    onnx_backend = OnnxRuntimeBackend(Path(suite.models.reference), suite.backends.onnxruntime)
    onnx_backend.load()
    cand_outs = _infer_all(ctx, onnx_backend, samples, "ONNX Runtime", timings, "onnxruntime_s")

    ref_names = list(ref_outs[0]) if ref_outs else []
    cand_names = [m.name for m in onnx_backend.outputs()]
    pairing = pair_names(ref_names, cand_names, cfg.rename, cfg.ignore)

    def checks_for(output: str) -> Any:
        return cfg.outputs[output].checks if output in cfg.outputs else cfg.checks

    t0 = time.perf_counter()
    first = cand_outs[0] if cand_outs else {}
    found = framework_detections.groups(onnx_backend.graph().info, first, pairing.pairs, set(cfg.outputs))
    as_boxes = {t for g in found for t in g.onnx.tensors}
    elementwise = [(r, c) for r, c in pairing.pairs if c not in as_boxes]
    series = run_comparisons(ref_outs, cand_outs, elementwise, checks_for)
    det_rows, det_checks = framework_detections.compare(found, ref_outs, cand_outs)
    timings["compare_s"] = time.perf_counter() - t0

    checks: list[CheckResult] = [
        limit_check("outputs compared", NAME, "pairs", len(pairing.pairs), 1, ">="),
    ]
    unmatched = pairing.reference_only + pairing.candidate_only
    detail = {"pytorch_only": pairing.reference_only, "onnx_only": pairing.candidate_only} if unmatched else {}
    checks.append(limit_check(_unmatched_label(pairing), NAME, "unmatched", len(unmatched), 0, "<=", detail=detail))
    if pairing.bad_renames:
        bad = {"unknown": pairing.bad_renames}
        checks.append(
            limit_check("rename sources exist", NAME, "bad_renames", len(pairing.bad_renames), 0, "<=", detail=bad)
        )
    for unknown in sorted(set(cfg.outputs) - {c for _, c in pairing.pairs}):
        why = {"reason": "stages.framework.outputs names an output that was not compared"}
        checks.append(
            limit_check(f"{unknown}: configured output exists", NAME, "exists", 0, 1, ">=", tensor=unknown, detail=why)
        )
    rows = []
    for s in series:
        evaluated = evaluate(s, checks_for(s.candidate), stage=NAME)
        checks.extend(evaluated.checks)
        rows.append(FrameworkOutput(**dict(s.summary()), passed=all(c.passed for c in evaluated.checks)))
    checks += det_checks
    if not all(c.passed for c in checks):
        notes += filter(None, [framework_repeat.input_independent(samples, ref_outs, cand_outs)])
    if any("shape mismatch" in e for s in series for e in s.errors):
        notes += _baked_notes(Path(suite.models.reference))
    if onnx_backend.casts:
        notes.append(f"inputs cast for ONNX Runtime: {onnx_backend.casts}")
    return FrameworkResult(
        status=status_of(checks),
        checks=checks,
        notes=notes,
        timings=timings,
        samples=len(samples),
        reference=reference,
        pairing=pairing.record(),
        outputs=rows,
        detections=det_rows or None,
    )
