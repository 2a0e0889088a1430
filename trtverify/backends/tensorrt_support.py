"""Pieces of the TensorRT backends that need no TensorRT object: name escaping, the build mode for
a library version, the default optimisation profile, the log capture and the errors it turns into.

Kept apart from `trtverify.backends.tensorrt` so that what can be checked on a CPU is plain code.
"""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends.base import Feed
from trtverify.config.backends import TYPE_FLAGS, TensorRTOptions
from trtverify.graph.onnxgraph import QDQ_OPS
from trtverify.graph.onnxinfo import TensorMeta
from trtverify.util.errors import BackendError, UsageError

# suite log_verbosity -> G_LOGGER severity attribute. Polygraphy's TensorRT logger forwards
# TensorRT VERBOSE as G_LOGGER.extra_verbose and TensorRT INFO as G_LOGGER.verbose.
SEVERITY = {"verbose": "EXTRA_VERBOSE", "info": "VERBOSE", "warning": "WARNING"}


def literal(name: str) -> str:
    """`name` as an fnmatch pattern that matches only itself.

    Polygraphy's `ModifyNetworkOutputs(outputs=...)` treats names containing `* ? [ ]` as
    wildcard patterns; TensorRT's generated names (`(Unnamed Layer* 3) [Shuffle]_output`)
    contain them and would otherwise match nothing or the wrong tensors.
    """
    return "".join(f"[{c}]" if c in "*?[]" else c for c in name)


def python_warnings(caught: Sequence[warnings.WarningMessage] | None) -> list[str]:
    return [
        f"# python warning: {w.category.__name__}: {w.message} ({Path(w.filename).name}:{w.lineno})"
        for w in caught or ()
    ]


def error_lines(lines: Sequence[str]) -> list[str]:
    return [ln for ln in lines if ln.startswith(("[E]", "[!]"))]


def holds_qdq(model: Any) -> bool:
    return any(n.op_type in QDQ_OPS for n in model.graph.node)


def resolve_strongly_typed(options: TensorRTOptions, *, rtx: bool, version: str) -> bool:
    """The build mode for the installed library; ValueError with the fix when options and version clash.

    `version` is `tensorrt.__version__` (or `tensorrt_rtx.__version__` when `rtx`).
    """
    major_minor = tuple(int(x) for x in (version.split(".") + ["0"])[:2] if x.isdigit())
    lib = f"TensorRT-RTX {version}" if rtx else f"TensorRT {version}"
    only_strong = rtx or major_minor >= (11, 0)
    strong = only_strong if options.strongly_typed is None else options.strongly_typed
    if only_strong and not strong:
        raise ValueError(f"{lib} builds only strongly typed networks; remove strongly_typed: false")
    if strong:
        type_flags = [p for p in options.precisions if p in TYPE_FLAGS]
        if type_flags:
            raise ValueError(
                f"{lib} builds strongly typed networks: precision comes from the ONNX graph (FP16 tensors, "
                f"Q/DQ nodes), so precisions {type_flags} cannot be used; convert the model instead"
            )
        if options.layer_precisions or options.precision_constraints != "none":
            raise ValueError(
                f"{lib} builds strongly typed networks: layer_precisions/precision_constraints cannot be used"
            )
    else:
        if "fp8" in options.precisions and major_minor < (8, 6):
            raise ValueError(f"precisions: fp8 needs TensorRT >= 8.6 (installed: {version})")
        if "bf16" in options.precisions and major_minor < (9, 0):
            raise ValueError(f"precisions: bf16 needs TensorRT >= 9.0 (installed: {version})")
    return strong


def default_profile(
    Profile: Any, declared: Sequence[TensorMeta], feeds: Sequence[Feed], where: str
) -> list[Any] | None:
    """One Polygraphy Profile spanning the shapes of `feeds` for the dynamic inputs; None when
    there are none (Polygraphy's default profile then sets dynamic dimensions to 1)."""
    dynamic = [m.name for m in declared if m.shape is None or any(not isinstance(d, int) or d < 0 for d in m.shape)]
    usable = [f for f in feeds if all(n in f for n in dynamic)]
    if not dynamic or not usable:
        return None
    p = Profile()
    for name in dynamic:
        shapes = [tuple(np.shape(f[name])) for f in usable]
        ranks = {len(s) for s in shapes}
        if len(ranks) != 1:
            raise UsageError(f"input '{name}': samples have different ranks {sorted(ranks)}; give {where}.profiles")
        opt = Counter(shapes).most_common(1)[0][0]
        p.add(name, min=tuple(map(min, zip(*shapes))), opt=opt, max=tuple(map(max, zip(*shapes))))
    return [p]


def calibration_feeds(
    feeds: Sequence[Feed], limit: int | None, profiles: Sequence[Any] | None
) -> tuple[list[Feed], str | None]:
    """The samples INT8 calibration uses (float inputs as float32), and a warning when some are left out:
    TensorRT calibrates at the opt shapes of the last profile only."""
    chosen = list(feeds[:limit] if limit else feeds)
    note = None
    if profiles:
        opt = {n: tuple(s.opt) for n, s in profiles[-1].items()}
        usable = [f for f in chosen if all(tuple(np.shape(f[n])) == shp for n, shp in opt.items() if n in f)]
        if len(usable) < len(chosen):
            note = (
                f"INT8 calibration uses the {len(usable)} of {len(chosen)} samples whose shapes equal the "
                f"calibration profile's opt shapes {opt} (TensorRT calibrates at opt shapes only)"
            )
        chosen = usable
    as32 = [
        {k: np.asarray(v, np.float32) if np.asarray(v).dtype.kind == "f" else np.asarray(v) for k, v in f.items()}
        for f in chosen
    ]
    return as32, note


@contextlib.contextmanager
def captured_log(G: Any, verbosity: str) -> Iterator[list[str]]:
    """Route Polygraphy's G_LOGGER (and so TensorRT's messages) into a list, not stdout.

    Uses the documented switch `G_LOGGER.use_python_logging_system` (messages go to the
    Python logger "Polygraphy") and `G_LOGGER.verbosity(...)`. TensorRT warnings are logged
    once per process by Polygraphy; the once-set is emptied for the capture so every build
    log is complete.
    """
    lines: list[str] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    py_logger = logging.getLogger("Polygraphy")
    handler = _Collect(level=1)
    saved = (G.use_python_logging_system, G.colors, G.once_logged, py_logger.level, py_logger.propagate)
    G.use_python_logging_system = True
    G.colors = False
    G.once_logged = set()
    py_logger.setLevel(1)
    py_logger.propagate = False
    py_logger.addHandler(handler)
    try:
        with G.verbosity(getattr(G, SEVERITY[verbosity])):
            yield lines
    finally:
        py_logger.removeHandler(handler)
        G.use_python_logging_system, G.colors = saved[0], saved[1]
        G.once_logged = saved[2] | G.once_logged
        py_logger.setLevel(saved[3])
        py_logger.propagate = saved[4]


def failure(
    backend: str, rtx: bool, version: str | None, model: Path, what: str, exc: BaseException, lines: Sequence[str]
) -> BackendError:
    """The error a failed parse, build or run turns into, with the log lines that say why."""
    errors = error_lines(lines)
    detail = "\n  ".join(errors[-8:]) if errors else f"{type(exc).__name__}: {exc}"
    text = " ".join(errors) + f" {exc}"
    if "cannot run on this GPU" in text or ("compute capabilit" in text and "upported" in text):
        where = (
            "TensorRT-RTX runs on Ampere, Ada and Blackwell GPUs, not on Hopper (H100/H200): run there, "
            "or use the tensorrt backend on this GPU"
            if rtx
            else "see the TensorRT support matrix for the GPUs this version runs on"
        )
        return BackendError(
            f"{'TensorRT-RTX' if rtx else 'TensorRT'} {version} cannot run engines on this GPU "
            f"({model.name}): building works, but the runtime does not support this GPU's compute "
            f"capability. {where}.\n  {detail}"
        )
    return BackendError(f"{backend}: {what} failed for {model.name}:\n  {detail}")


def engine_io(engine: Any, trt: Any) -> tuple[list[TensorMeta], list[TensorMeta]]:
    """Inputs and outputs of a deserialized engine (dtype names as NumPy spells them where it can)."""
    from polygraphy.datatype import DataType

    ins, outs = [], []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        pg_dtype = DataType.from_dtype(engine.get_tensor_dtype(name))
        try:
            dtype = str(np.dtype(DataType.to_dtype(pg_dtype, "numpy")))
        except Exception:  # no NumPy type (bfloat16, fp8, ...)
            dtype = str(pg_dtype.name).lower()
        meta = TensorMeta(name, dtype, tuple(d if d >= 0 else None for d in engine.get_tensor_shape(name)))
        (ins if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT else outs).append(meta)
    return ins, outs


# calibration_algorithm -> the TensorRT calibrator class Polygraphy's Calibrator derives from (its `BaseClass`)
CALIBRATORS = {
    "entropy2": "IInt8EntropyCalibrator2",
    "entropy": "IInt8EntropyCalibrator",
    "minmax": "IInt8MinMaxCalibrator",
    "legacy": "IInt8LegacyCalibrator",
}


def calibrator_options(trt: Any, options: TensorRTOptions) -> dict[str, Any]:
    """Keyword arguments of Polygraphy's `Calibrator` for the suite's calibration algorithm (none: its default,
    IInt8EntropyCalibrator2)."""
    if options.calibration_algorithm is None:
        return {}
    out: dict[str, Any] = {"BaseClass": getattr(trt, CALIBRATORS[options.calibration_algorithm])}
    if options.calibration_quantile is not None:
        out["quantile"] = options.calibration_quantile
    if options.calibration_regression_cutoff is not None:
        out["regression_cutoff"] = options.calibration_regression_cutoff
    return out
