"""Does `parse-log` surface the number or name a reader came for? Measured on tests/data/logcorpus/d/.

The part d/ (2026-11-27) was collected by someone who did not run the parser. For each log they wrote, before any
measurement, the values a person debugging it came for (expected.json): the family, the line, and the exact text
of the value (a build time, a peak memory, an engine path, an op name ...).

A value counts as surfaced when a finding says it: the value's text appears in a finding's message, layers or
detail, or (for a number) a number equal to it appears there. Lines that merely sit in `unknown_lines` do not count.
Reported: values surfaced per family, and logs whose every value is surfaced.

    python bench/logcorpus_values.py [--part d] [--out FILE] [--verbose]
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

from trtverify.buildlog.parser import parse_file

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "logcorpus"
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _said(log) -> str:
    parts = []
    for f in log.findings:
        parts.append(f.message)
        parts.extend(f.layers)
        parts.append(json.dumps(f.detail, default=str, ensure_ascii=False))
    return "\n".join(parts)


def _numbers(text: str) -> list[float]:
    out = []
    for m in _NUMBER.finditer(text):
        try:
            out.append(float(m.group()))
        except ValueError:
            continue
    return out


def surfaced(value: str, said: str, numbers: list[float]) -> bool:
    if value.lower() in said.lower():
        return True
    if _NUMBER.fullmatch(value.strip()):
        want = float(value)
        return any(math.isclose(want, n, rel_tol=1e-6, abs_tol=1e-12) for n in numbers)
    return False


def measure(part: str = "d", verbose: bool = False) -> tuple[str, list[tuple[str, dict, bool]]]:
    folder = CORPUS / part
    expected = json.loads((folder / "expected.json").read_text(encoding="utf-8"))["expected"]
    per_family: dict[str, list[int]] = {}
    full = 0
    rows = []
    misses = []
    for number in sorted(expected):
        (path,) = folder.glob(f"{number}_*.log")
        log = parse_file(path)
        said = _said(log)
        numbers = _numbers(said)
        ok_all = True
        for item in expected[number]:
            ok = surfaced(str(item["value"]), said, numbers)
            rows.append((path.name, item, ok))
            fam = per_family.setdefault(item["family"], [0, 0])
            fam[1] += 1
            fam[0] += ok
            if not ok:
                ok_all = False
                misses.append(f"  {path.name}:{item.get('line')} {item['family']}: {item['what']} = {item['value']!r}")
        full += ok_all
    total = sum(v[1] for v in per_family.values())
    hit = sum(v[0] for v in per_family.values())
    lines = [
        f"part {part}: {len(expected)} logs, {full} with every value surfaced; values {hit} of {total}"
        f" ({100 * hit / max(total, 1):.0f} %)",
        "per family: "
        + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in sorted(per_family.items(), key=lambda kv: (-kv[1][1], kv[0]))),
    ]
    if verbose and misses:
        lines.append("missed:")
        lines.extend(misses)
    return "\n".join(lines), rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", default="d")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--verbose", action="store_true", help="list every value not surfaced")
    args = ap.parse_args()
    text, _ = measure(args.part, args.verbose)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
