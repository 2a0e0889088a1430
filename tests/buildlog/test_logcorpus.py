"""The issue-20 corpus (tests/data/logcorpus/): each log against its expected-findings file, written by reading
the log (not by running the parser). Same comparison as test_logs.py: the set of (kind, severity, count, first
line), each finding's layers, the version and dialect where the file states them; and where the file gives a
`detail`, each of its keys must hold that value in the finding's detail (numbers to 1e-6 relative)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from trtverify.buildlog.parser import parse_file

CORPUS = Path(__file__).resolve().parents[1] / "data" / "logcorpus"
EXPECTED = sorted(CORPUS.glob("*/*.expected.json"))


def _holds(want: Any, got: Any) -> bool:
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and _holds(v, got[k]) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(got, (list, tuple)) and len(want) == len(got) and all(map(_holds, want, got))
    if isinstance(want, float) or isinstance(got, float):
        return isinstance(got, (int, float)) and math.isclose(float(want), float(got), rel_tol=1e-6, abs_tol=1e-12)
    return want == got


@pytest.mark.parametrize("expected_path", EXPECTED, ids=lambda p: f"{p.parent.name}/{p.name[:3]}")
def test_log_matches_expected(expected_path: Path) -> None:
    expected = json.loads(expected_path.read_text(encoding="utf-8"))
    log = parse_file(expected_path.with_name(expected_path.name.replace(".expected.json", ".log")))
    # the generic findings (log_error, log_warning, log_event) are compared where the file lists some; every log's
    # floor is checked by tests/buildlog/test_floor.py (no error or warning line reported by nothing)
    floor = {"log_error", "log_warning", "log_event"} - {f["kind"] for f in expected["findings"]}
    got = {(f.kind, f.severity, f.count, f.lines[0]) for f in log.findings if f.kind not in floor}
    want = {(f["kind"], f["severity"], f["count"], f["first_line"]) for f in expected["findings"]}
    assert got == want
    by_key = {f.kind + ":" + str(f.lines[0]): f for f in log.findings}
    for f in expected["findings"]:
        found = by_key[f["kind"] + ":" + str(f["first_line"])]
        if "layers" in f:
            assert list(found.layers) == f["layers"], f["kind"]
        if "detail" in f:
            assert _holds(f["detail"], found.detail), (f["kind"], found.detail)
    for key in ("version", "dialect", "product"):
        if key in expected:
            assert getattr(log, key) == expected[key], key
