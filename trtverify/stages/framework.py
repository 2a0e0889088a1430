"""Stage `framework`: did the export to ONNX change what the model computes?

Reference: the PyTorch model (or its stored outputs, when every hash matches).
Candidate: the reference ONNX model under ONNX Runtime. Same N inputs, every output compared.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends import backend_class
from trtverify.compare.checks import CheckResult, evaluate, run_comparisons
from trtverify.compare.pairing import pair_names
from trtverify.errors import MissingDependency
from trtverify.fsutil import sha256_file
from trtverify.reference import hash_samples
from trtverify.stages.base import StageContext, StageResult

NAME = "framework"
STORE_KIND = "pytorch"


def _module_file(spec: str, search_path: list[Path]) -> Path | None:
    """Source file of a hook's module, found without importing it (so no torch import)."""
    from trtverify.hooks import extra_sys_path

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
    from trtverify.environment import library_versions

    return {k: v for k, v in library_versions().items() if k in ("torch", "numpy", "onnxruntime", "onnx")}


def _pytorch_outputs(
    ctx: StageContext, samples: list[dict[str, np.ndarray]], result: StageResult
) -> list[dict[str, np.ndarray]]:
    suite = ctx.loaded.suite
    store = ctx.store
    depends = reference_depends(ctx, samples)
    lookup = store.lookup(STORE_KIND, depends)
    info: dict[str, Any] = {"store": str(lookup.folder), "state": lookup.state, "reasons": lookup.reasons}
    result.details["reference"] = info
    if lookup.state == "valid" and not ctx.update_reference:
        info["source"] = "stored"
        info["created"] = (lookup.manifest or {}).get("created")
        info["versions"] = (lookup.manifest or {}).get("versions")
        result.notes.append(f"reference: stored PyTorch outputs from {lookup.folder} (hashes match; PyTorch not run)")
        return lookup.outputs  # type: ignore[return-value]
    if lookup.state in ("stale", "corrupt") and not ctx.update_reference:
        result.notes.append(
            f"stored reference in {lookup.folder} is {lookup.state} and was NOT used: {'; '.join(lookup.reasons)}. "
            "Running PyTorch instead; rerun with --update-reference to rewrite it."
        )
    cls = backend_class("torch")
    backend = cls(
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
                f"{exc.args[0]}\n  (needed because the stored reference is {lookup.state}: {'; '.join(lookup.reasons)})",
            )
        raise
    outs = []
    t0 = time.perf_counter()
    for i, feed in enumerate(samples):
        outs.append(backend.infer(feed))
        ctx.progress(NAME, i + 1, len(samples), "PyTorch")
    result.timings["pytorch_s"] = time.perf_counter() - t0
    backend.close()
    info["source"] = "pytorch"
    if lookup.state == "missing" or ctx.update_reference:
        store.save(STORE_KIND, depends, samples, outs, _versions())
        info["saved"] = True
        result.notes.append(
            f"reference: PyTorch outputs {'rewritten' if lookup.state != 'missing' else 'stored'} in {lookup.folder}"
        )
    return outs


def run(ctx: StageContext) -> StageResult:
    suite = ctx.loaded.suite
    cfg = suite.stages.framework
    assert cfg is not None
    result = StageResult(NAME, "failed")
    samples = ctx.samples[: cfg.samples] if cfg.samples else ctx.samples
    result.details["samples"] = len(samples)
    if not samples:
        result.checks.append(
            CheckResult("samples", "samples", 0.0, 1.0, ">=", False, None, {"reason": "zero samples compared"})
        )
        return result

    ref_outs = _pytorch_outputs(ctx, samples, result)

    onnx_backend = backend_class("onnxruntime")(Path(suite.models.reference), suite.backends.onnxruntime)
    onnx_backend.load()
    cand_outs = []
    t0 = time.perf_counter()
    for i, feed in enumerate(samples):
        cand_outs.append(onnx_backend.infer(feed))
        ctx.progress(NAME, i + 1, len(samples), "ONNX Runtime")
    result.timings["onnxruntime_s"] = time.perf_counter() - t0
    onnx_backend.close()

    ref_names = list(ref_outs[0]) if ref_outs else []
    cand_names = [m.name for m in onnx_backend.outputs()]
    pairing = pair_names(ref_names, cand_names, cfg.rename, cfg.ignore)
    result.details["pairing"] = pairing.to_dict()

    t0 = time.perf_counter()
    series = run_comparisons(
        ref_outs, cand_outs, pairing.pairs, lambda name: cfg.outputs[name].checks if name in cfg.outputs else cfg.checks
    )
    result.timings["compare_s"] = time.perf_counter() - t0

    checks: list[CheckResult] = []
    checks.append(
        CheckResult("outputs compared", "pairs", float(len(pairing.pairs)), 1.0, ">=", len(pairing.pairs) >= 1)
    )
    unmatched = pairing.reference_only + pairing.candidate_only
    checks.append(
        CheckResult(
            "unmatched outputs",
            "unmatched",
            float(len(unmatched)),
            0.0,
            "<=",
            not unmatched,
            None,
            {"pytorch_only": pairing.reference_only, "onnx_only": pairing.candidate_only} if unmatched else {},
        )
    )
    if pairing.bad_renames:
        checks.append(
            CheckResult(
                "rename sources exist",
                "bad_renames",
                float(len(pairing.bad_renames)),
                0.0,
                "<=",
                False,
                None,
                {"unknown": pairing.bad_renames},
            )
        )
    for unknown in sorted(set(cfg.outputs) - {c for _, c in pairing.pairs}):
        checks.append(
            CheckResult(
                f"{unknown}: configured output exists",
                "exists",
                0.0,
                1.0,
                ">=",
                False,
                unknown,
                {"reason": "stages.framework.outputs names an output that was not compared"},
            )
        )
    rows = []
    for s in series:
        out_checks = evaluate(s, cfg.outputs[s.candidate].checks if s.candidate in cfg.outputs else cfg.checks)
        checks.extend(out_checks)
        rows.append({**s.summary(), "passed": all(c.passed for c in out_checks)})
    result.details["outputs"] = rows
    if getattr(onnx_backend, "casts", None):
        result.notes.append(f"inputs cast for ONNX Runtime: {onnx_backend.casts}")
    done = StageResult.from_checks(NAME, checks, details=result.details, notes=result.notes, timings=result.timings)
    return done
