"""The record the capture kit's runner script (kit/run_engine.py, written by `trtverify capture`) leaves beside the
`.npy` folders it saves: `run.json`, with where and how the engine ran (TensorRT version, GPU, compute capability,
engine, build flags) and the digest of the inputs it fed, which must be the kit's.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from trtverify.util.errors import UsageError
from trtverify.util.words import count

RUN_FILE = "run.json"
RUNNER_FORMAT = 1
_STRINGS = ("tensorrt", "gpu", "compute_capability", "kit_digest")


@dataclass(frozen=True)
class RunRecord:
    path: Path
    tensorrt: str
    gpu: str
    compute_capability: str
    kit_digest: str
    feeds: int
    engine: str | None = None
    built_from: str | None = None
    flags: list[str] = field(default_factory=list)  # --mark-all, --fp16, ... of a build there
    skipped: dict[str, str] = field(default_factory=dict)  # outputs the engine gave and the script did not save

    def describe(self) -> str:
        """'TensorRT 10.8.0 on NVIDIA Jetson AGX Orin (sm 8.7), built from model.onnx with --mark-all --fp16'."""
        where = f"TensorRT {self.tensorrt} on {self.gpu} (sm {self.compute_capability})"
        if self.built_from:
            how = f", built there from {Path(self.built_from).name}" + (f" with {' '.join(self.flags)}"
                                                                          if self.flags else "")  # fmt: skip
        else:
            how = f", engine {Path(self.engine).name}" if self.engine else ""
        left = f"; {count(len(self.skipped), 'output')} not saved there" if self.skipped else ""
        return where + how + left


def read_run(folder: Path) -> RunRecord | None:
    """The runner script's record in `folder` (None when there is none); a malformed one is a UsageError."""
    path = Path(folder) / RUN_FILE
    if not path.is_file():
        return None
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a readable run record of the kit's runner script ({exc})") from None
    if not isinstance(doc, dict) or doc.get("trtverify_runner") != RUNNER_FORMAT:
        raise UsageError(f"{path}: not a run record of the kit's runner script (expected 'trtverify_runner': "
                         f"{RUNNER_FORMAT}); was it written by run_engine.py?")  # fmt: skip
    bad = [k for k in _STRINGS if not isinstance(doc.get(k), str) or not doc[k]]
    if not isinstance(doc.get("feeds"), int) or isinstance(doc.get("feeds"), bool) or doc["feeds"] < 1:
        bad.append("feeds")
    if bad:
        raise UsageError(f"{path}: missing or malformed {', '.join(bad)}")
    if not re.fullmatch(r"[0-9a-f]{64}", doc["kit_digest"]):
        raise UsageError(f"{path}: kit_digest {doc['kit_digest']!r} is not a sha256 digest")
    build = doc.get("build") if isinstance(doc.get("build"), dict) else {}
    flags = (["--mark-all"] if build.get("marked") else []) + [f"--{p}" for p in build.get("precision_flags") or []]
    if build.get("strongly_typed"):
        flags.append("--strongly-typed")
    skipped = doc.get("skipped") if isinstance(doc.get("skipped"), dict) else {}
    return RunRecord(
        path=path,
        tensorrt=doc["tensorrt"],
        gpu=doc["gpu"],
        compute_capability=doc["compute_capability"],
        kit_digest=doc["kit_digest"],
        feeds=doc["feeds"],
        engine=doc.get("engine") if isinstance(doc.get("engine"), str) else None,
        built_from=doc.get("built_from") if isinstance(doc.get("built_from"), str) else None,
        flags=[str(f) for f in flags],
        skipped={str(k): str(v) for k, v in skipped.items()},
    )


__all__ = ["RUN_FILE", "RunRecord", "read_run"]
