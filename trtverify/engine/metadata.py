"""The metadata files written beside trtexec exports by TREx's build and profile scripts
(`X.engine.metadata.json`: the device's properties; `X.engine.profile.metadata.json`: trtexec's performance
summary, inference options and device information). They say which GPU measured an engine and how fast it ran.

`performance_summary` lists each quantity as [min, max, mean, median, percentile] (the percentile trtexec printed,
99 % by default), in milliseconds; `Throughput` is in inferences (queries) per second.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trtverify.toolout.perfsummary import PerfSummary

MAX_BYTES = 4 << 20
SUMMARY_KEYS = {
    "Latency": "latency",
    "Enqueue Time": "enqueue",
    "H2D Latency": "h2d",
    "GPU Compute Time": "gpu_compute",
    "D2H Latency": "d2h",
}
ORDER = ("min", "max", "mean", "median", "p99")


def _json(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_BYTES:
            return None
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _files(paths: list[Path], suffix: str) -> list[Path]:
    out = []
    for p in paths:
        if p.is_dir():
            out += sorted(p.glob(f"*{suffix}"))
        elif p.name.endswith(suffix):
            out.append(p)
    return out


def profile_performance(paths: list[Path]) -> tuple[PerfSummary | None, dict[str, Any]]:
    """trtexec's performance summary and inference options from a `*.profile.metadata.json` among `paths`
    (files or folders), or (None, {})."""
    for f in _files(paths, ".profile.metadata.json"):
        data = _json(f)
        summary = data.get("performance_summary") if isinstance(data, dict) else None
        if not isinstance(summary, dict):
            continue
        stats: dict[str, dict[str, float]] = {}
        for key, name in SUMMARY_KEYS.items():
            values = summary.get(key)
            if isinstance(values, list) and len(values) == len(ORDER):
                stats[name] = {k: float(v) for k, v in zip(ORDER, values) if isinstance(v, (int, float))}
        qps = summary.get("Throughput")
        walltime = summary.get("Total Host Walltime")
        perf = PerfSummary(
            throughput_qps=float(qps) if isinstance(qps, (int, float)) else None,
            stats=stats,
            walltime_s=float(walltime) if isinstance(walltime, (int, float)) else None,
            format="trex_metadata",
        )
        options = data.get("inference_options") if isinstance(data.get("inference_options"), dict) else {}
        device = data.get("device_information") if isinstance(data.get("device_information"), dict) else {}
        return perf, {"file": str(f), "inference_options": options, "device": device}
    return None, {}


def device_fingerprint(paths: list[Path]) -> dict[str, str | None]:
    """The GPU an engine was built and measured on, from the exports' metadata (None where not recorded)."""
    gpu = cuda = None
    for f in _files(paths, ".engine.metadata.json"):
        data = _json(f)
        if isinstance(data, list) and data and isinstance(data[0], dict):
            gpu = data[0].get("Name")
            version = data[0].get("CUDA_VERSION")
            cuda = ".".join(str(v) for v in version) if isinstance(version, list) else None
            break
    if gpu is None:
        _, info = profile_performance(paths)
        gpu = (info.get("device") or {}).get("Selected Device")
    return {"gpu": gpu, "driver": None, "tensorrt": None, "cpu": None, "cpu_count": None, "cuda": cuda}


def batch_of(options: dict[str, Any]) -> int | None:
    """The batch of trtexec's 'Input inference shape' (input=32x3x224x224 -> 32), when it names one input."""
    shape = str(options.get("Input inference shape") or "")
    if "=" not in shape or "," in shape:
        return None
    first = shape.split("=", 1)[1].split("x", 1)[0]
    return int(first) if first.isdigit() else None
