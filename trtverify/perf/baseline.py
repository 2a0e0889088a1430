"""Performance baselines: `reference_outputs/<suite>/perf/baseline.json`, one entry per measured row, each with
the fingerprint of the environment it was measured in (GPU, driver, TensorRT, CPU). A stored entry is compared
only with a row measured in the same environment; otherwise the row says why it is not comparable, which is
never a failure. Only `trtverify run --update-baseline` writes the file (atomically)."""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any

from trtverify.util.environment import environment
from trtverify.util.errors import UsageError
from trtverify.util.fsutil import FileTooLarge, atomic_write_json, read_capped

FORMAT = 1
FILE = "baseline.json"
FINGERPRINT_KEYS = ("gpu", "driver", "tensorrt", "cpu", "cpu_count")
MAX_BYTES = 16 << 20

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
    return Path(root) / suite / "perf" / FILE


def load(path: Path) -> dict[str, Any] | None:
    """The stored baseline's entries (row key -> entry), None when there is none; a damaged file is an error
    naming it."""
    if not path.exists():
        return None
    try:
        data = json.loads(read_capped(path, MAX_BYTES).decode("utf-8"))
    except FileTooLarge:
        raise UsageError(f"{path}: larger than {MAX_BYTES >> 20} MB: not a trtverify baseline; remove it or rewrite "
                         "it with trtverify run --update-baseline") from None  # fmt: skip
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        why = f"{path}: unreadable baseline ({exc}); rewrite it with trtverify run --update-baseline"
        raise UsageError(why) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("rows"), dict):
        raise UsageError(f"{path}: not a trtverify performance baseline (format {FORMAT}); rewrite it with "
                         "trtverify run --update-baseline")  # fmt: skip
    return data["rows"]


def save(path: Path, suite: str, rows: dict[str, dict[str, Any]]) -> None:
    atomic_write_json(
        path,
        {
            "format": FORMAT,
            "suite": suite,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "rows": dict(sorted(rows.items())),
        },
    )
