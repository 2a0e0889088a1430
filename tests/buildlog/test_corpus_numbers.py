"""Issue 39's "no log loses a number": in every log of the corpus (tests/data/logcorpus/*/, tests/data/buildlogs/,
tests/data/toolconsoles/), each number that a family names (build times, peak and requested memory, throughput and GPU
compute mean, Torch-TensorRT's engine count and build time) is in some finding's detail. A line of such a family
that no rule reads fails here, with the log, the line and the number."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from trtverify.buildlog.parser import parse

DATA = Path(__file__).resolve().parents[1] / "data"
LOGS = sorted([*DATA.glob("logcorpus/*/*.log"), *DATA.glob("buildlogs/*.log"), *DATA.glob("toolconsoles/*.log")])

_HMS = r"(?P<h>\d+):(?P<m>\d\d):(?P<s>\d\d(?:\.\d+)?)"
# (pattern, how to read the number from the match)
NAMED = [
    (re.compile(r"Total time of building all (?:\d+ )?engines:\s*" + _HMS), "hms"),
    (re.compile(r"Build TRT engine elapsed time:\s*" + _HMS), "hms"),
    (re.compile(r"Engine generation completed in (?P<n>[\d.]+) seconds"), "n"),
    (re.compile(r"Engine built in (?P<n>[\d.]+) sec"), "n"),
    (re.compile(r"Peak memory usage of TRT CPU/GPU memory allocators: CPU [\d.]+ ?MiB, GPU (?P<n>[\d.]+) ?MiB"), "n"),
    (re.compile(r"Build phase peak memory: (?P<n>[\d.]+) ?MB"), "n"),
    (re.compile(r"Requested amount of GPU memory \((?P<n>\d+) bytes\)"), "n"),
    (re.compile(r"insuf+icient memory on requested size of (?P<n>\d+)"), "n"),
    (re.compile(r"Throughput: (?P<n>[\d.]+) qps"), "n"),
    (re.compile(r"GPU Compute Time: min = [\d.]+ ms, max = [\d.]+ ms, mean = (?P<n>[\d.]+) ms"), "n"),
    (re.compile(r"Number of TensorRT-Accelerated Engines Generated: (?P<n>\d+)"), "n"),
]


def _numbers(value: Any) -> list[float]:
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float)):
        return [float(value)]
    if isinstance(value, dict):
        return [x for v in value.values() for x in _numbers(v)]
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _numbers(v)]
    return []


def _expected(text: str) -> list[tuple[int, str, float]]:
    out = []
    for no, line in enumerate(text.split("\n"), start=1):
        for rx, how in NAMED:
            m = rx.search(line)
            if m:
                value = int(m["h"]) * 3600 + int(m["m"]) * 60 + float(m["s"]) if how == "hms" else float(m["n"])
                out.append((no, line.strip()[:160], value))
    return out


@pytest.mark.parametrize("path", LOGS, ids=lambda p: f"{p.parent.name}/{p.name[:40]}")
def test_no_named_number_is_lost(path: Path) -> None:
    text = path.read_bytes().decode("utf-8", errors="replace")
    wanted = _expected(text)
    if not wanted:
        return
    got = [x for f in parse(text).findings for x in _numbers(f.detail)]
    lost = [(no, line, v) for no, line, v in wanted if not any(math.isclose(v, g, rel_tol=1e-6) for g in got)]
    assert not lost, f"{path.name}: numbers in no finding: {lost}"
