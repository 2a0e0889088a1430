"""A converted model written only once it is proven to load: `convert -o` and the suite's recipes.

The model is written to a temporary file in the destination folder, checked there (onnx.checker with
full_check, which runs shape inference through every subgraph, and an ONNX Runtime CPU session, made inside a
native.Operation as every session is, so a crash is contained like any other), and only then renamed over the
destination. On any failure nothing is at the destination: an old file there is left untouched.

A check the converted model fails is first tried on the model it was made from:
- ONNX Runtime cannot load the reference either: a UsageError (exit 2) naming the reference and ONNX Runtime's
  message: there is nothing a conversion can be checked against; except where the reference has plugin nodes
  (ops outside the ONNX domains, which TensorRT runs and ONNX Runtime has no kernels for): written, checked with
  onnx.checker only, with a warning;
- onnx.checker rejects the reference too (an input declared without a shape below IR version 4, say): written,
  with a warning (exporters write such files, and ONNX Runtime and TensorRT take them);
- the converted model passes onnx.checker's full check but ONNX Runtime will not load it (while it loads the
  reference): written, with a warning naming ONNX Runtime's version and message (ONNX Runtime 1.30 mistypes the
  casts it inserts around FP16 nodes its CPU lacks; 1.32 loads the same file);
- the reference passes what the converted model fails: the conversion is wrong, a bug here (ConversionBug, exit 4),
  the reason named.
"""

from __future__ import annotations

import glob
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtverify.util import native
from trtverify.util.errors import EXIT_INTERNAL, TrtVerifyError, UsageError
from trtverify.util.fsutil import FILE_MODE, WriteError, pid_alive

STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml"})


class ConversionBug(TrtVerifyError):
    """The converted model fails a check its reference passes: nothing written (exit 4, the reason named)."""

    exit_code = EXIT_INTERNAL


@dataclass(frozen=True)
class Problems:
    checker: str | None = None  # onnx.checker's message
    onnxruntime: str | None = None  # ONNX Runtime's message when it cannot make a CPU session
    crashed: bool = False  # making the session crashed the process (a worker before this one)

    def __bool__(self) -> bool:
        return bool(self.checker or self.onnxruntime)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())[:600]


def problems(path: Path, named: Path | None = None) -> Problems:
    """What stops the ONNX file at `path` from being a model: onnx.checker's and ONNX Runtime's objections.
    `named`: the file it is to become (a temporary file's destination), what the session's crash record names, so
    that a fresh worker knows the operation that crashed the one before."""
    named = Path(path) if named is None else Path(named)
    import onnx

    checker = None
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:  # noqa: BLE001 - ValidationError, InferenceError: the message is the finding
        checker = _first_line(exc)
    import onnxruntime as ort

    try:
        with native.Operation(
            f"creating an ONNX Runtime {ort.__version__} CPU session to check {named.name}",
            key=f"convert-check:{named.absolute()}",
            model=str(named),
        ):
            so = ort.SessionOptions()
            so.log_severity_level = 3  # its warnings (old opsets, unused initializers) are not findings here
            # loading is what is checked: its graph optimisations, which crash on some FP16 graphs at ORT_ENABLE_ALL
            # (docs/reliability.md), are another matter, left to the sessions that run the model
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])
    except native.NativeCrash as exc:  # it crashed a worker before this one: not tried again
        return Problems(checker, _first_line(exc), crashed=True)
    except Exception as exc:  # noqa: BLE001 - ORT raises its own types (Fail, InvalidGraph, NotImplemented, ...)
        return Problems(checker, _first_line(exc))
    return Problems(checker, None)


def save_checked(model: Any, path: Path, reference: Path, what: str = "converted") -> list[str]:
    """Write `model` (a ModelProto made from the file `reference`) to `path` once it loads; warnings to show.
    Raises UsageError (the reference cannot load), ConversionBug (the conversion broke it) or WriteError, with
    nothing at `path` changed."""
    import onnx

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_orphans(path)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
        os.close(fd)
    except OSError as exc:
        raise WriteError(f"cannot write {path}: {exc.strerror or exc}") from exc
    tmp = Path(name)
    try:
        try:
            onnx.save(model, str(tmp))
        except OSError as exc:
            kept = "the previous file is unchanged" if path.exists() else "nothing was written"
            raise WriteError(f"cannot write {path}: {exc.strerror or exc} ({kept})") from exc
        found = problems(tmp, path)
        said = {str(tmp): str(path), tmp.name: path.name}  # messages name the file as it will be, not the temporary
        for k, v in said.items():
            found = Problems(*(m.replace(k, v) if m else m for m in (found.checker, found.onnxruntime)), found.crashed)
        warnings = _verdict(found, reference, path, what)
        os.chmod(tmp, FILE_MODE)  # mkstemp makes 0600
        os.replace(tmp, path)
        return warnings
    finally:
        tmp.unlink(missing_ok=True)


def _remove_orphans(path: Path) -> None:
    """Temporary files for `path` left by a process that is gone (a worker that ONNX Runtime crashed while checking
    one): `.NAME.PID.XXXX.tmp` whose PID no longer runs."""
    for tmp in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        pid = tmp.name[len(path.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            tmp.unlink(missing_ok=True)


def _verdict(found: Problems, reference: Path, path: Path, what: str) -> list[str]:
    if not found:
        return []
    kept = "the previous file is unchanged" if path.exists() else "nothing was written"
    if found.crashed:  # ONNX Runtime's crash, not a finding about either model: exit 1, as for any model it crashes on
        raise native.NativeCrash(f"{found.onnxruntime}; {kept} at {path}")
    before = problems(reference)
    plugins = _plugin_ops(reference) if found.onnxruntime and before.onnxruntime else []
    if found.onnxruntime and before.onnxruntime and not plugins:
        raise UsageError(
            f"{reference}: ONNX Runtime cannot load it ({before.onnxruntime}); trtverify converts models ONNX Runtime "
            f"loads (or that it loads but for their plugin nodes), {kept} at {path}"
        )
    if found.onnxruntime and not before.onnxruntime and not found.checker:
        # well-typed by onnx.checker's full check, yet this ONNX Runtime will not load it: its limits (ONNX Runtime
        # 1.30 mistypes the casts it inserts around FP16 nodes its CPU lacks, which 1.32 loads), not a broken file
        import onnxruntime as ort

        return [
            f"ONNX Runtime {ort.__version__} cannot load {path.name} ({found.onnxruntime}), although it passes "
            f"onnx.checker's full check and ONNX Runtime loads {reference.name}: TensorRT builds from the file, but "
            "trtverify cannot run it in this ONNX Runtime (another version may)"
        ]
    if (found.onnxruntime and not before.onnxruntime) or (found.checker and not before.checker):
        why = "; ".join(
            m for m in (found.checker, found.onnxruntime and f"ONNX Runtime cannot load it: {found.onnxruntime}") if m
        )
        raise ConversionBug(
            f"the {what} model made from {reference} is not valid ({why}), while {reference.name} is: a bug in "
            f"trtverify, please report it with the model; {kept} at {path}"
        )
    warnings = []
    if found.checker:
        warnings.append(f"{reference} fails onnx.checker ({before.checker}), and so does {path.name}")
    if found.onnxruntime:
        warnings.append(
            f"ONNX Runtime cannot load {reference.name} (its plugin nodes: {', '.join(plugins)}), nor {path.name}: "
            f"{path.name} is checked with onnx.checker only"
        )
    return warnings


def _plugin_ops(reference: Path) -> list[str]:
    """Op types of the nodes outside the ONNX domains (TensorRT plugins, a training operator), which ONNX Runtime
    has no kernels for; the reason a model it cannot load may still be converted."""
    import onnx

    model = onnx.load(str(reference), load_external_data=False)
    return sorted({n.op_type for n in model.graph.node if n.domain not in STANDARD_DOMAINS})
