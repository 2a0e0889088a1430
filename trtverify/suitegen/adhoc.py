"""Suites made from command-line arguments (`trtverify layerwise REF CAND`).

The suite is written to the output folder as YAML and then loaded like any other, so the
command-line path goes through the same validation and runner, and leaves a suite the
user can rerun and edit.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from trtverify.graph.onnxinfo import graph_io, load_io
from trtverify.util.errors import UsageError
from trtverify.util.fsutil import atomic_write_text

# METRIC[@PARAM=VALUE,...] <= or >= VALUE, e.g. rel_l2<=0.01, topk_agreement@k=5>=0.9 (metric_key's spelling)
_CHECK = re.compile(r"^\s*([a-z][a-z0-9_]*)(?:@([^<>=\s]+=[^<>\s]*))?\s*(<=|>=)\s*([-+0-9.eE]+|inf)\s*$")
_PARAM = re.compile(r"^([a-z]+)=([-+0-9.eE]+)$")


# the note on `out: .` every written suite carries
_OUT_NOTE = "# out: . -- `trtverify run` of this file writes into its folder; change it if you copy the file\n"


def parse_check(text: str) -> dict[str, Any]:
    """One --check as a suite check: any metric the checks know, with its parameters after '@'."""
    from pydantic import ValidationError

    from trtverify.config.checks import METRICS, Check

    example = "e.g. rel_l2<=0.01, cosine>=0.999 or topk_agreement@k=5>=0.9"
    m = _CHECK.match(text)
    if not m:
        raise UsageError(f"--check '{text}': expected METRIC<=VALUE or METRIC>=VALUE, {example}")
    metric, params, op, value = m.groups()
    if metric not in METRICS:
        raise UsageError(f"--check '{text}': unknown metric '{metric}' (metrics: {', '.join(METRICS)})")
    want = "<=" if METRICS[metric].better == "lower" else ">="
    if op != want:
        raise UsageError(f"--check '{text}': {metric} is {METRICS[metric].better}-is-better: write {metric}{want}VALUE")
    check: dict[str, Any] = {"metric": metric, ("max" if op == "<=" else "min"): float(value)}
    for part in (params or "").split(",") if params else []:
        pm = _PARAM.match(part)
        if not pm:
            raise UsageError(f"--check '{text}': expected PARAM=NUMBER after '@', {example}")
        key, number = pm.groups()
        if key not in METRICS[metric].params:
            known = ", ".join(METRICS[metric].params) or "none"
            raise UsageError(f"--check '{text}': '{key}' is not a parameter of {metric} (its parameters: {known})")
        check[key] = int(float(number)) if key == "k" else float(number)
    try:
        Check(**check)
    except ValidationError as exc:
        why = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise UsageError(f"--check '{text}': {why}") from None
    return check


def _name(path: Path, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", path.stem) or "candidate"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


def _generated_inputs(reference: Path, dims: Sequence[str], seed: int) -> dict[str, Any]:
    """Generated inputs at the given dynamic dimensions; `NAME=V1,V2,...` sweeps them (inputs.shapes: every
    combination of the values given, the first one also the generated shape)."""
    values: dict[str, list[int]] = {}
    for d in dims:
        key, _, val = d.partition("=")
        parts = val.split(",")
        if not key or not val or not all(p.isdigit() and int(p) >= 1 for p in parts):
            raise UsageError(
                f"--dim '{d}': expected NAME=VALUE or NAME=V1,V2,... with positive integers, e.g. --dim batch=8 or "
                "--dim batch=1,8,32 (a shape sweep)"
            )
        if key in values:
            raise UsageError(f"--dim '{d}': '{key}' is given twice; give its values once, comma-separated")
        values[key] = list(dict.fromkeys(int(p) for p in parts))
    inputs, _ = graph_io(load_io(reference))
    names = {str(d) for m in inputs for d in (m.shape or ()) if not (isinstance(d, int) and d > 0)}
    unknown = sorted(set(values) - names)
    if unknown:
        raise UsageError(
            f"--dim {', '.join(unknown)}: {reference.name} has no dynamic dimension of that name "
            f"(its dynamic dimensions: {', '.join(sorted(names)) or 'none'})"
        )
    combos = [dict(zip(values, c)) for c in itertools.product(*values.values())] or [{}]

    def shapes_at(choice: dict[str, int]) -> dict[str, list[int]]:
        return {
            m.name: [d if isinstance(d, int) and d > 0 else choice.get(str(d), 1) for d in (m.shape or ())]
            for m in inputs
        }

    spec: dict[str, Any] = {}
    for m in inputs:
        if m.shape is None:
            raise UsageError(f"{reference}: input '{m.name}' has no declared shape; pass --inputs FILE.npz")
        if m.dtype in ("object", "string"):
            raise UsageError(
                f"{reference}: input '{m.name}' is a string tensor; inputs are generated only for numbers, pass "
                "--inputs FILE.npz"
            )
        dtype = (
            m.dtype
            if m.dtype in ("float32", "float16", "float64", "int64", "int32", "int8", "uint8", "bool")
            else "float32"
        )
        spec[m.name] = {"shape": shapes_at(combos[0])[m.name], "dtype": dtype, "range": [0.0, 1.0]}
    out: dict[str, Any] = {"samples": 1, "seed": seed, "generate": spec}
    if len(combos) > 1:
        out["shapes"] = [shapes_at(c) for c in combos]
    return out


def _file_inputs(inputs_file: Path, dims: Sequence[str]) -> dict[str, Any]:
    """`inputs: {file: ...}`; --dim is refused beside it, never dropped: the file's arrays fix the shapes."""
    if dims:
        raise UsageError(
            f"--dim {' '.join(dims)} with --inputs {inputs_file}: --dim sets the shapes of generated inputs, and the "
            "arrays of an inputs file fix their own; drop --dim, or save the file at the shape you want "
            "(several shapes: a suite with inputs.generate and inputs.shapes, docs/suites.md)"
        )
    return {"file": str(inputs_file.resolve())}


def _kit_inputs(capture: Path) -> tuple[Path, int | None]:
    """The inputs of the kit a capture was made from (its manifest in the capture's folder or the one above)."""
    from trtverify.toolout.kit import MANIFEST, find_kit, read_kit

    manifest = find_kit(capture)
    if manifest is None:
        raise UsageError(
            f"{capture}: no capture kit ({MANIFEST}) in its folder or the one above: a capture is compared only with "
            "the feeds it was made from; make them with `trtverify capture` and keep the capture in the kit's folder"
        )
    kit = read_kit(manifest)
    if not kit.inputs_file.is_file():
        raise UsageError(f"{manifest}: its inputs file {kit.inputs_file} is missing")
    return kit.inputs_file, (kit.batch_size if kit.batch_size > 1 else None)


def _add_plugins(suite: dict[str, Any], plugins: dict[str, str] | None) -> None:
    """--plugin references, found in the folder the command ran in (so is a rerun of the suite written)."""
    if plugins:
        suite["python_path"] = [str(Path.cwd())]
        suite["plugins"] = dict(plugins)


def layerwise_suite(
    out: Path,
    reference: Path,
    candidates: list[Path],
    *,
    inputs_file: Path | None,
    samples: int | None,
    dims: Sequence[str],
    seed: int,
    backend: str,
    precisions: list[str],
    checks: list[str],
    memory_budget: float | None,
    root_causes: int | None,
    fail_on_lint: Sequence[str] = (),
    plugins: dict[str, str] | None = None,
    calibration_cache: Path | None = None,
    captured: Sequence[tuple[Path, str | None, int | None]] = (),
    batch_size: int | None = None,
    layer_info: Path | None = None,
    unmarked: Sequence[tuple[Path, str | None]] = (),
) -> Path:
    """Write `out/suite.yaml` for a layerwise comparison and return its path. `captured`: (file, runner, iteration)
    of each candidate captured on another machine; without `inputs_file` the first capture's kit gives the inputs.
    `layer_info`: the engine's layer information, for every capture."""
    reference = reference.resolve()
    if captured and inputs_file is None and not dims:
        inputs_file, batch_size = _kit_inputs(captured[0][0])
    # a calibration cache alone is judged against the reference run as the candidate
    if not candidates and not captured:
        if backend == "onnxruntime" and calibration_cache is None:
            raise UsageError("give a CANDIDATE model, or --backend tensorrt/tensorrt-rtx to build the reference itself")
        candidates = [reference]
    taken: set[str] = set()
    cands: dict[str, Any] = {_name(c, taken): {"path": str(c.resolve()), "backend": backend} for c in candidates}
    info = str(layer_info.resolve()) if layer_info else None
    for i, (file, runner, iteration) in enumerate(captured):
        plain = unmarked[i] if i < len(unmarked) else (None, None)  # its outputs-only capture
        chosen = {"runner": runner, "iteration": iteration, "layerinfo": info,
                  "unmarked": plain[0] and str(plain[0].resolve()), "unmarked_runner": plain[1]}  # fmt: skip
        cands[_name(Path(f"captured_{file.stem}"), taken)] = {"captured": str(file.resolve())} | {
            k: v for k, v in chosen.items() if v is not None
        }
    if inputs_file is not None:
        inputs: dict[str, Any] = _file_inputs(inputs_file, dims)
        if samples:
            inputs["samples"] = samples
        if batch_size:
            inputs["batch_size"] = batch_size
    else:
        inputs = _generated_inputs(reference, dims, seed)
        if samples:
            inputs["samples"] = samples
    stage: dict[str, Any] = {}
    if checks:
        stage["checks"] = [parse_check(c) for c in checks]
    if memory_budget is not None:
        stage["memory_budget_mb"] = memory_budget
    if root_causes is not None:
        stage["root_causes"] = root_causes
    if fail_on_lint:
        stage["lint"] = {"fail_on": list(fail_on_lint)}
    suite: dict[str, Any] = {
        "name": re.sub(r"[^A-Za-z0-9_.-]", "_", f"layerwise-{reference.stem}"),
        "description": "made by `trtverify layerwise`",
        "out": ".",  # `trtverify run` of this file writes here, not into reports/<name> over another run
        "models": {"reference": str(reference), "candidates": cands},
        "inputs": inputs,
        "stages": {"layerwise": stage},
    }
    _add_plugins(suite, plugins)
    if precisions:
        if backend == "onnxruntime":
            raise UsageError("--precision is a TensorRT builder flag: use it with --backend tensorrt")
        suite["backends"] = {backend.replace("-", "_"): {"precisions": precisions}}
    if calibration_cache is not None:  # the cache a TensorRT <= 10 INT8 build reads; layerwise judges its ranges
        if backend != "onnxruntime" and (backend != "tensorrt" or "int8" not in precisions):
            raise UsageError(
                "--calibration-cache is TensorRT <= 10's INT8 calibration: with --backend tensorrt give --precision "
                "int8; with the default backend its ranges are judged without TensorRT"
            )
        trt = suite.setdefault("backends", {}).setdefault("tensorrt", {"precisions": ["int8"]})
        trt["calibration_cache"] = str(calibration_cache.resolve())
    out.mkdir(parents=True, exist_ok=True)
    path = out / "suite.yaml"
    atomic_write_text(
        path,
        "# written by trtverify layerwise; rerun with: trtverify run "
        + str(path)
        + "\n"
        + _OUT_NOTE
        + yaml.safe_dump(suite, sort_keys=False),
    )
    return path


def repair_suite(
    out: Path,
    reference: Path,
    precision: str,
    *,
    inputs_file: Path | None,
    samples: int | None,
    dims: Sequence[str],
    calibration: Path | None,
    candidate: Path | None,
    checks: list[str],
    tensors: str,
    max_evaluations: int,
    holdout: float = 0.25,
    plugins: dict[str, str] | None = None,
    method: str = "auto",
    sensitivity: dict[str, Any] | None = None,
) -> Path:
    """Write `out/suite.yaml` for `trtverify repair` (stage repair) and return its path."""
    reference = reference.resolve()
    if inputs_file is not None:
        inputs: dict[str, Any] = _file_inputs(inputs_file, dims)
    else:
        inputs = _generated_inputs(reference, dims, 0)
    if samples:
        inputs["samples"] = samples
    stage: dict[str, Any] = {
        "precision": precision,
        "tensors": tensors,
        "max_evaluations": max_evaluations,
        "holdout": holdout,
    }
    if checks:
        stage["checks"] = [parse_check(c) for c in checks]
    if calibration is not None:
        stage["calibration"] = str(calibration.resolve())
    if method != "auto":
        stage["method"] = method
    if sensitivity is not None:
        stage["sensitivity"] = sensitivity
    models: dict[str, Any] = {"reference": str(reference)}
    if candidate is not None:
        models["candidates"] = {precision: str(candidate.resolve())}
        stage["candidate"] = precision
    suite = {
        "name": re.sub(r"[^A-Za-z0-9_.-]", "_", f"repair-{reference.stem}-{precision}"),
        "description": "made by `trtverify repair`",
        "out": ".",
        "models": models,
        "inputs": inputs,
        "stages": {"repair": stage},
    }
    _add_plugins(suite, plugins)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "suite.yaml"
    repaired = (out / f"repair-{precision}" / f"{reference.stem}_{precision}_repaired.onnx").resolve()
    tensorrt = (
        "\n# The repaired ONNX is what TensorRT 11 and TensorRT-RTX build (strongly typed, no precision flags). To\n"
        "# check it as an engine on a GPU, add it as a TensorRT candidate and compare it layer by layer:\n"
        f"#   models:\n#     candidates:\n#       repaired_trt: {{path: {repaired}, backend: tensorrt}}\n"
        "#   backends:\n#     tensorrt: {strongly_typed: true}\n"
        "#   stages:\n#     layerwise: {candidates: [repaired_trt]}\n"
    )
    atomic_write_text(
        path,
        f"# written by trtverify repair; rerun with: trtverify run {path}\n"
        + _OUT_NOTE
        + yaml.safe_dump(suite, sort_keys=False)
        + tensorrt,
    )
    return path
