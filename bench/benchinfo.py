"""What machine and which commit a bench ran on, for the header of its results file."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

from trtverify.util.environment import environment

REPO = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True).stdout.strip()


def machine(versions: str = "") -> str:
    """`N cores (nproc), CPU model "..."; Python X[, versions]; trtverify at commit `abc1234`` (and whether
    trtverify/ had uncommitted changes)."""
    commit = _git("rev-parse", "--short", "HEAD") or "?"
    commit += " + uncommitted changes under trtverify/" if _git("status", "--porcelain", "--", "trtverify") else ""
    python = f"Python {platform.python_version()}" + (f", {versions}" if versions else "")
    cpu = environment()["cpu"]
    return f'{os.cpu_count()} cores (`nproc`), CPU model "{cpu}"; {python}; trtverify at commit `{commit}`'
