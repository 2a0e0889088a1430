"""An ONNX Runtime session made first in a child process, for the sessions that are timed (stage perf, repair's
latency): ONNX Runtime can crash (SIGSEGV) while optimising a graph at ORT_ENABLE_ALL, e.g. some FP16
transformer encoders in ONNX Runtime 1.32. A child that dies tells which lower optimisation levels load, so the
error names a workaround that was tried. A session proven loadable is not probed again in this process.

The child runs `python -m trtverify.backends.ortprobe`: it reads one JSON line (the model file or its bytes'
length, the level, providers, the folder of its external weights), then the model's bytes when they are not in a
file, creates the session and exits 0.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from trtverify.graph.lightmodel import EXTERNAL_FOLDER, GraphBytes
from trtverify.util import native
from trtverify.util.deps import require

LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
LOWER = {"all": ["extended", "basic", "disable"], "extended": ["basic", "disable"], "basic": ["disable"]}
PROBE_TIMEOUT_S = 600.0

_PROVEN: set[tuple[str, str, tuple[str, ...]]] = set()


def _key(model: Path | GraphBytes, level: str, providers: Sequence[str]) -> tuple[str, str, tuple[str, ...]]:
    import hashlib

    if isinstance(model, GraphBytes):
        name = f"{model.name}#{hashlib.sha1(model.data).hexdigest()}@{model.folder}"
    else:
        name = str(Path(model).absolute())
    return name, level, tuple(providers)


def _probe(model: Path | GraphBytes, level: str, providers: Sequence[str]) -> int | None:
    """None if a fresh process creates the session; else the signal it died of (or -1: it failed otherwise)."""
    if isinstance(model, GraphBytes):
        head = {"bytes": len(model.data), "folder": str(model.folder)}
        body = model.data
    else:
        head = {"path": str(model), "folder": str(Path(model).parent)}
        body = b""
    head.update(level=level, providers=list(providers))
    request = json.dumps(head).encode("utf-8") + b"\n" + body
    try:
        p = subprocess.run(
            [sys.executable, "-m", "trtverify.backends.ortprobe"],
            input=request,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return None  # not a crash: the session is made in this process, as without a probe
    if p.returncode < 0:
        return -p.returncode
    return None if p.returncode == 0 else -1


def ensure_loadable(model: Path | GraphBytes, level: str, providers: Sequence[str], what: str) -> None:
    """Create the session in a child process first; NativeCrash naming the signal and the levels that load if the
    child crashes. A session that fails without crashing is left to the caller to make (and report)."""
    key = _key(model, level, providers)
    if key in _PROVEN:
        return
    signum = _probe(model, level, providers)
    if signum is None or signum == -1:
        _PROVEN.add(key)
        return
    loads = [lower for lower in LOWER.get(level, []) if _probe(model, lower, providers) is None]
    ort = require("onnxruntime", "the onnxruntime backend")

    hint = (
        f"it loads at graph_optimization_level {', '.join(loads)} (tried): set backends.onnxruntime."
        f"graph_optimization_level: {loads[0]} in the suite"
        if loads
        else "it crashes at every graph_optimization_level; report it to ONNX Runtime with the model"
    )
    name = native.signal_name(signum)
    raise native.NativeCrash(
        f"native crash: ONNX Runtime {ort.__version__} dies of {name} ({native.SIGNALS.get(name, 'a crash')}) "
        f"creating a session for {what} at graph_optimization_level {level} (tried in a separate process first, "
        f"which alone died). Workaround: {hint}"
    )


def _child() -> int:
    import onnxruntime as ort

    stream = sys.stdin.buffer
    head = json.loads(stream.readline())
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[head["level"]])
    so.log_severity_level = 4
    so.add_session_config_entry(EXTERNAL_FOLDER, head["folder"])
    model = head["path"] if "path" in head else stream.read(head["bytes"])
    try:
        ort.InferenceSession(model, sess_options=so, providers=head["providers"])
    except Exception:  # noqa: BLE001 - failing without a crash is the parent's to report, with its own session
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(_child())
