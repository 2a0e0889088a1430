"""Performance baselines: `reference_outputs/<suite>/perf/baseline.json`, one entry per measured row, each with
the fingerprint of the environment it was measured in (GPU, driver, TensorRT, CPU). A stored entry is compared
only with a row measured in the same environment; otherwise the row says why it is not comparable, which is
never a failure. Only `trtverify run --update-baseline` writes the file (atomically; the file itself:
`trtverify/util/baselinefile.py`, the one baseline store)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from trtverify.util import baselinefile
from trtverify.util.environment import environment

FILE = baselinefile.FILE
FINGERPRINT_KEYS = ("gpu", "driver", "tensorrt", "cpu", "cpu_count")

Fingerprint = dict[str, str | None]


def local_fingerprint() -> Fingerprint:
    """This machine: its GPUs and driver (nvidia-smi), TensorRT's version if installed, the CPU and its cores."""
    env = environment()
    gpus = env.get("gpus") or []
    libs = env.get("libraries") or {}
    trt = libs.get("tensorrt") or libs.get("tensorrt-rtx") or libs.get("tensorrt_rtx")
    return {
        "gpu": "; ".join(g["name"] for g in gpus) or "none",
        "driver": "; ".join(sorted({g["driver"] for g in gpus})) or None,
        "tensorrt": trt,
        "cpu": env.get("cpu"),
        "cpu_count": str(os.cpu_count()),
    }


def differences(stored: Fingerprint, now: Fingerprint) -> list[str]:
    """What differs between two fingerprints ('' for none)."""
    out = []
    for key in FINGERPRINT_KEYS:
        if stored.get(key) != now.get(key):
            out.append(f"{key} {stored.get(key)!r} -> {now.get(key)!r}")
    return out


def path_for(root: Path, suite: str) -> Path:
    return baselinefile.path_for(root, suite, "perf")


def load(path: Path) -> dict[str, Any] | None:
    """The stored baseline's entries (row key -> entry), None when there is none; a damaged file is an error
    naming it."""
    doc = baselinefile.load(path, "performance")
    return None if doc is None else doc["rows"]


def save(path: Path, suite: str, rows: dict[str, dict[str, Any]]) -> None:
    """Write every row measured now, in place of the stored ones (stamped with when)."""
    baselinefile.save(path, suite, rows, keep=False, created=True)
