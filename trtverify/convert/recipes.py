"""Candidate recipes: `{from: reference, precision: fp16|int8, keep: [...], ...}` made into ONNX files.

Each recipe's model is written to `<run folder>/candidates/<name>-<hash>.onnx`, the hash covering the
reference file, the recipe and (INT8) the calibration samples, so a rerun reuses it and any change
makes a new one. The files are the strongly typed graphs TensorRT 11 builds: FP16 types with FP32
islands, or symmetric per-channel Q/DQ.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.config.models import Candidate
from trtverify.convert.output import save_checked
from trtverify.util.errors import UsageError
from trtverify.util.fsutil import sha256_file


def recipe_key(reference: Path, spec: Candidate, calibration: Sequence[dict[str, np.ndarray]]) -> str:
    h = hashlib.sha256(sha256_file(reference).encode())
    recipe = spec.model_dump(
        include={"precision", "keep", "calibration", "symmetric", "per_channel", "method"}, mode="json"
    )
    h.update(json.dumps(recipe, sort_keys=True).encode())
    for feed in calibration:
        for name in sorted(feed):
            h.update(name.encode())
            h.update(np.ascontiguousarray(feed[name]).tobytes())
    return h.hexdigest()[:16]


# `method: auto`: calibrates `reference` into `out` with the method it finds best and says what it chose (the
# repair layer's repair/calibrate.py, handed down by the runner: the comparison runs models, which convert/ does not)
Chooser = Callable[[Path, Path, Sequence[dict[str, np.ndarray]], bool, bool], dict[str, Any]]


def make(
    reference: Path,
    name: str,
    spec: Candidate,
    samples: Sequence[dict[str, np.ndarray]],
    folder: Path,
    choose: Chooser | None = None,
) -> Path:
    """The recipe's ONNX file (made, or reused when the same recipe made it before)."""
    import onnx

    from trtverify.convert.fp16 import to_fp16
    from trtverify.convert.int8 import keep_fp32, quantize, record_calibration

    calibration: Sequence[dict[str, np.ndarray]] = []
    if spec.precision == "int8":
        count = spec.calibration.samples if spec.calibration else 256
        calibration = list(samples[:count])
    path = folder / f"{name}-{recipe_key(reference, spec, calibration)}.onnx"
    if path.is_file():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    model = onnx.load(str(reference))
    try:
        if spec.precision == "fp16":
            made: Any = to_fp16(model, spec.keep)
        else:
            tmp = folder / f".{name}-quantized.onnx"
            if spec.method == "auto" and choose is not None:
                record = choose(reference, tmp, calibration, spec.symmetric, spec.per_channel)
            else:
                method = "minmax" if spec.method == "auto" else spec.method  # auto without a chooser: nothing to run
                quantize(reference, tmp, calibration, symmetric=spec.symmetric, per_channel=spec.per_channel,
                         method=method)  # fmt: skip
                record = {"method": method, "calibration_rows": len(calibration)}
            made = onnx.load(str(tmp))
            tmp.unlink()
            if spec.keep:
                made = keep_fp32(made, model, spec.keep)
            record_calibration(made, record)
    except ValueError as exc:
        raise UsageError(f"models.candidates.{name}: {exc}") from exc
    try:
        save_checked(made, path, reference, f"models.candidates.{name}")  # as `convert -o`: written once it loads
    except UsageError as exc:
        raise UsageError(f"models.candidates.{name}: {exc}") from exc
    return path


def materialize(
    reference: Path,
    candidates: dict[str, Candidate],
    samples: Sequence[dict[str, np.ndarray]],
    folder: Path,
    choose: Callable[[str], Chooser] | None = None,
) -> dict[str, Candidate]:
    """Every candidate with a path: recipes made into files in `folder`, the others as they are. `choose(name)`: the
    chooser of `method: auto` for recipe `name`."""
    out = {}
    for name, spec in candidates.items():
        if spec.from_ is None:
            out[name] = spec
        else:
            chooser = choose(name) if choose is not None else None
            out[name] = spec.model_copy(update={"path": make(reference, name, spec, samples, folder, chooser)})
    return out
