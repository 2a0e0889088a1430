"""Nothing makes the parser raise: random text, random bytes, cut/shuffled real logs, damage."""

from __future__ import annotations

import random
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trtverify.buildlog.parser import parse

DATA = Path(__file__).resolve().parents[1] / "data" / "buildlogs"
CORPUS = DATA.parent / "logcorpus"
# the old excerpts, the trtexec logs (performance summaries, profile tables, layer listings: the shared readers),
# and the development part of the issue-20 corpus (the hold-out part is kept out of everything rules are tuned on)
DEV = [
    CORPUS / line.split("\t")[1] for line in (CORPUS / "SPLIT.txt").read_text().splitlines() if line.startswith("dev")
]
PATHS = sorted(DATA.glob("*.log")) + sorted((DATA.parent / "trtexec_logs").glob("*.log")) + DEV
REAL = [p.read_text(encoding="utf-8", errors="replace") for p in PATHS]
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PREFIXES = [
    "[TRT] [W] ",
    "[I] ",
    "WARNING: [TRT]: ",
    "[VERBOSE] ",
    "    ",
    "Layer(",
    "Name: x, LayerType: ",
    "--------------- Timing Runner: ",
    "Tactic: 0x1 Time: ",
    "Weights [name=",
    " - ",
    "...",
    "\x1b[31m",
]


def _check(text: str) -> None:
    log = parse(text)
    d = log.dump()
    assert d["lines"] >= 0 and log.unknown_lines >= 0
    for f in log.findings:
        assert f.count == len(f.lines) >= 1


@FAST
@given(st.text())
def test_random_text(text: str) -> None:
    _check(text)


@FAST
@given(st.binary(max_size=2000))
def test_random_bytes(data: bytes) -> None:
    _check(data.decode("utf-8", errors="replace"))


@FAST
@given(st.lists(st.tuples(st.sampled_from(PREFIXES), st.text(max_size=60)), max_size=40))
def test_prefixed_garbage(parts: list[tuple[str, str]]) -> None:
    _check("\n".join(p + t for p, t in parts))


@FAST
@given(st.integers(0, len(REAL) - 1), st.integers(0, 10**6), st.integers(0, 2**32 - 1))
def test_truncated_shuffled_real_logs(i: int, cut: int, seed: int) -> None:
    text = REAL[i]
    _check(text[: cut % (len(text) + 1)])
    lines = text.split("\n")
    rng = random.Random(seed)
    rng.shuffle(lines)
    _check("\n".join(lines))


@FAST
@given(st.integers(0, len(REAL) - 1), st.integers(0, 2**32 - 1))
def test_paste_damage(i: int, seed: int) -> None:
    rng = random.Random(seed)
    out = []
    for line in REAL[i].split("\n")[:400]:
        r = rng.random()
        if r < 0.1:
            line = f"\x1b[{rng.randint(0, 99)}m" + line + "\x1b[0m"
        elif r < 0.2 and len(line) > 2:
            k = rng.randrange(len(line))
            out.append(line[:k])
            line = line[k:]
        elif r < 0.25:
            line = "..."
        elif r < 0.3:
            line = line + "\r" + " " * rng.randint(0, 5)
        elif r < 0.35:
            line = "> " + line
        out.append(line)
    _check("\n".join(out))
