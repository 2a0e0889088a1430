"""Where a run happened: library versions (read from metadata, nothing heavy imported), CPU, GPU."""

from __future__ import annotations

import functools
import importlib.metadata as md
import os
import platform
import shutil
import subprocess
import sys
from typing import Any

import trtverify

LIBRARIES = (
    "numpy",
    "onnx",
    "onnxruntime",
    "onnxruntime-gpu",
    "torch",
    "tensorrt",
    "tensorrt-rtx",
    "tensorrt_rtx",
    "polygraphy",
    "pydantic",
    "pyyaml",
)


@functools.lru_cache(maxsize=1)
def library_versions() -> dict[str, str]:
    out = {}
    for lib in LIBRARIES:
        try:
            out[lib] = md.version(lib)
        except md.PackageNotFoundError:
            continue
    return out


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> list[dict[str, str]]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    try:
        out = subprocess.run(
            [exe, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            gpus.append({"name": parts[0], "driver": parts[1], "memory": parts[2]})
    return gpus


def environment() -> dict[str, Any]:
    return {
        "trtverify": trtverify.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": _cpu(),
        "cpu_count": os.cpu_count(),
        "gpus": _gpus(),
        "libraries": library_versions(),
    }
