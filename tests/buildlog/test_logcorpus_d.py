"""Issue 39's "no log in the corpus loses a number", over the hold-out part d/ (tests/data/logcorpus/d/): every value
its collector wrote in expected.json (before any parser ran: the build time, memory, engine file, op, node, shape,
tolerance ... a reader of that log came for) is said by some finding of `parse-log` - its text in a finding's message,
layers or detail, or, for a number, an equal number there. The same measure as bench/logcorpus_values.py, without
any normalisation. Expectations judged wrong would be listed under expected.json's "settled" key (none are)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from trtverify.buildlog.parser import parse_file

PART = Path(__file__).resolve().parents[1] / "data" / "logcorpus" / "d"
EXPECTED = json.loads((PART / "expected.json").read_text(encoding="utf-8"))
SETTLED = {(s["log"], s["value"]) for s in EXPECTED.get("settled", [])}
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _said(path: Path) -> str:
    parts = []
    for f in parse_file(path).findings:
        parts += [f.message, *f.layers, json.dumps(f.detail, default=str, ensure_ascii=False)]
    return "\n".join(parts)


def _surfaced(value: str, said: str) -> bool:
    if value.lower() in said.lower():
        return True
    if not _NUMBER.fullmatch(value.strip()):
        return False
    want = float(value)
    return any(math.isclose(want, float(m.group()), rel_tol=1e-6, abs_tol=1e-12) for m in _NUMBER.finditer(said))


def test_the_part_is_whole() -> None:
    logs = sorted(PART.glob("*.log"))
    assert len(logs) == 33 and sorted(EXPECTED["expected"]) == [p.name[:3] for p in logs]
    assert sum(len(v) for v in EXPECTED["expected"].values()) == 88


@pytest.mark.parametrize("number", sorted(EXPECTED["expected"]))
def test_every_value_a_reader_came_for_is_surfaced(number: str) -> None:
    (path,) = PART.glob(f"{number}_*.log")
    said = _said(path)
    lost = [
        f"line {item.get('line')} {item['family']}: {item['what']} = {item['value']!r}"
        for item in EXPECTED["expected"][number]
        if (path.name, str(item["value"])) not in SETTLED and not _surfaced(str(item["value"]), said)
    ]
    assert not lost, f"{path.name}: values no finding says: {lost}"
