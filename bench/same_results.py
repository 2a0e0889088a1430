"""Compare two results.json files apart from timings: the check that a restructuring changed nothing.

    python bench/same_results.py OLD/results.json NEW/results.json [--rel R]

Every field must be equal except the timings (started, duration_s, timings, and
overhead_vs_inference, a ratio of two timings). A schema-1 file (before typed results, 2026-11-23)
is compared with a schema-2 file after mapping what schema 2 added: checks gained stage,
candidate and worst_sample (which schema 1 kept in detail), and the e2e stage gained 'gated'.
Exits 1 and lists the first differences when there are any. With `--rel R`, numbers within a relative R of
each other count as equal (a change in summation order moves metrics in their last digits); how many
differed, and by how much at most, is printed.
"""

from __future__ import annotations

import json
import sys
from typing import Any

TIMING = {"started", "duration_s", "timings", "overhead_vs_inference"}


def _as_schema_1(x: Any) -> Any:
    if isinstance(x, dict):
        x = dict(x)
        if {"name", "metric", "op", "passed", "stage"} <= set(x):  # a schema-2 check
            worst = x.pop("worst_sample", None)
            x.pop("stage")
            x.pop("candidate", None)
            if worst is not None:
                x["detail"] = {**x.get("detail", {}), "worst_sample": worst}
        if x.get("name") == "e2e":
            x.pop("gated", None)
        return {k: _as_schema_1(v) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [_as_schema_1(v) for v in x]
    return x


def _strip(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


REL = 0.0
NEAR: list[float] = []  # relative differences accepted under --rel


def _near(a: Any, b: Any) -> bool:
    if not (isinstance(a, float) and isinstance(b, (int, float)) and REL > 0):
        return False
    scale = max(abs(a), abs(b))
    rel = abs(a - b) / scale if scale else 0.0
    if rel <= REL:
        NEAR.append(rel)
        return True
    return False


def differences(a: Any, b: Any, path: str = "") -> list[str]:
    if _near(a, b) or _near(b, a):
        return []
    if type(a) is not type(b):
        return [f"{path}: {a!r:.80} != {b!r:.80}"]
    if isinstance(a, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in a:
                out.append(f"{path}.{k}: only in the second ({b[k]!r:.60})")
            elif k not in b:
                out.append(f"{path}.{k}: only in the first ({a[k]!r:.60})")
            else:
                out += differences(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list):
        out = [f"{path}: length {len(a)} != {len(b)}"] if len(a) != len(b) else []
        for i, (x, y) in enumerate(zip(a, b)):
            out += differences(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [f"{path}: {a!r:.80} != {b!r:.80}"]


def main(first: str, second: str) -> int:
    docs = [json.load(open(p, encoding="utf-8")) for p in (first, second)]
    norm = [_strip(d) if d.get("schema_version") == 1 else _as_schema_1(d) for d in docs]
    if docs[0].get("schema_version") != docs[1].get("schema_version"):
        for d in norm:
            d.pop("schema_version")
    found = differences(*norm)
    print("\n".join(found[:60]) if found else "identical apart from timings")
    if NEAR:
        moved = [r for r in NEAR if r > 0]
        print(f"{len(moved)} number(s) moved within --rel {REL:g} (largest relative move {max(moved, default=0):.2g})")
    print(f"{len(found)} difference(s)")
    return 1 if found else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--rel" in args:
        i = args.index("--rel")
        REL = float(args[i + 1])
        del args[i : i + 2]
    sys.exit(main(*args[:2]))
