"""How long each room of tests/ takes alone (`make room R=NAME`: pytest -n auto --maxprocesses 4, i.e. a worker per
core), room after room, with nothing else running: issue 48's "the fast target runs a room's tests in under a
minute" on CI's two cores. A room is a folder holding test files; the wall time counts pytest's start and
collection, as `make room` does.

    python bench/test_rooms.py [--out bench/results/test_rooms.md] [ROOM ...]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rooms() -> list[str]:
    return sorted({str(p.parent.relative_to(ROOT / "tests")) for p in (ROOT / "tests").rglob("test_*.py")})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rooms", nargs="*")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    rows = []
    for room in args.rooms or rooms():
        t0 = time.perf_counter()
        p = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-n", "auto", "--maxprocesses", "4", "-p", "no:cacheprovider",
             f"tests/{room}"],
            cwd=ROOT, capture_output=True, text=True,
        )  # fmt: skip
        wall = time.perf_counter() - t0
        tail = (p.stdout.strip().splitlines() or ["?"])[-1]
        summary = re.sub(r"\s*in [0-9.]+s.*$", "", tail.strip("= "))
        rows.append((room, wall, p.returncode, summary))
        print(f"{room:<22} {wall:6.1f} s  exit {p.returncode}  {summary}", flush=True)
    cpu = platform.processor() or platform.machine()
    lines = [
        f"# Test rooms, each alone (`make room R=NAME`), {os.cpu_count()} cores ({cpu}), {time.strftime('%Y-%m-%d')}",
        "",
        "| room | wall s | exit | tests |",
        "|---|---|---|---|",
        *[f"| {r} | {w:.1f} | {c} | {s} |" for r, w, c, s in rows],
        "",
        f"Slowest: {max(rows, key=lambda r: r[1])[0]} ({max(r[1] for r in rows):.1f} s); "
        f"all rooms one after another: {sum(r[1] for r in rows):.0f} s.",
    ]
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
