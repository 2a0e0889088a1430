"""Does `parse-log` surface the number or name a reader came for? Measured on tests/data/logcorpus/d/.

The part d/ (2026-11-27) was collected by someone who did not run the parser. For each log they wrote, before any
measurement, the values a person debugging it came for (expected.json): the family, the line, and the exact text
of the value (a build time, a peak memory, an engine path, an op name ...).

A value counts as surfaced when a finding or the context block says it: the value's text appears in a finding's
message, layers, detail, evidence lines or entities, or in a context item, or (for a number) a number equal to
it appears there (`--findings-only`: findings' message, layers and detail only, as before issue 47).
`--generic`: the generic layer alone (parse(rules=False): context, evidence, the floor), no tool's or family's rules.
Lines that merely sit in `unknown_lines` do not count.
There is no normalisation: a duration or a count (`00:00:47`, `63 Layer(s)`) counts only where a finding says it as
written, or as an equal number (47 would not do for `00:00:47`); the parser states such values as written beside
their conversion. Reported: values surfaced per family, and logs whose every value is surfaced.

    python bench/logcorpus_values.py [--part d] [--generic] [--findings-only] [--out FILE] [--verbose]
"""

from __future__ import annotations

import argparse
import json
import math
import re
from pathlib import Path

from trtverify.buildlog.parser import parse, read_log_text

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "logcorpus"
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _said(log, findings_only: bool = False) -> str:
    parts = []
    for f in log.findings:
        parts.append(f.message)
        parts.extend(f.layers)
        parts.append(json.dumps(f.detail, default=str, ensure_ascii=False))
        if not findings_only:
            parts.extend(e.text for e in f.evidence)
            parts.append(json.dumps(f.entities, default=str, ensure_ascii=False))
    if not findings_only:
        parts.append(json.dumps(log.context.model_dump(), ensure_ascii=False))
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


def measure(
    part: str = "d", verbose: bool = False, generic: bool = False, findings_only: bool = False
) -> tuple[str, list[tuple[str, dict, bool]]]:
    folder = CORPUS / part
    expected = json.loads((folder / "expected.json").read_text(encoding="utf-8"))["expected"]
    per_family: dict[str, list[int]] = {}
    full = 0
    rows = []
    misses = []
    for number in sorted(expected):
        (path,) = folder.glob(f"{number}_*.log")
        log = parse(read_log_text(path), rules=not generic)
        said = _said(log, findings_only)
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
        f"part {part}{' (generic layer alone)' if generic else ''}"
        f"{' (findings only)' if findings_only else ''}: {len(expected)} logs, {full} with every value surfaced;"
        f" values {hit} of {total}"
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
    ap.add_argument("--generic", action="store_true", help="the generic layer alone: no tool's or family's rules")
    ap.add_argument("--findings-only", action="store_true", help="count findings' message, layers, detail only")
    args = ap.parse_args()
    text, _ = measure(args.part, args.verbose, args.generic, args.findings_only)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
