"""The layerwise defaults per precision, as the docs state them, are the code's (`PRECISION_CHECKS`): the table
of docs/stages/layerwise.md and every sentence of README.md, docs/ and the suite schema's descriptions that gives
a precision's default numbers. docs/stages/layerwise.md said BF16's default was 0.04 while the code used 0.1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT
from trtverify.config.stages import PRECISION_CHECKS, LayerwiseStage

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PREC = r"(?:FP32|TF32|FP16|BF16|INT8|FP8|INT4)"
PRECS = rf"(?P<precs>{PREC}(?:(?:/|, | and ){PREC})*)"
NUM = r"\d+(?:\.\d+)?"
# `INT8: 0.25, 0.97`, `FP16 and BF16 rel_l2 <= 0.1 and cosine >= 0.999` (code spans and line breaks taken out)
STATED = (
    re.compile(rf"\b{PRECS}:? (?:rel_l2 ?<= ?)?(?P<rel>{NUM}),? (?:and )?(?:cosine ?>= ?)?(?P<cos>0\.9\d*)\b"),
    # `0.25 and 0.97 for INT8/FP8`, `rel_l2 <= 0.01 and cosine >= 0.999 for FP32/TF32`
    re.compile(rf"(?:rel_l2 ?<= ?)?\b(?P<rel>{NUM}) and (?:cosine ?>= ?)?(?P<cos>0\.9\d*) for {PRECS}\b"),
)
DEFAULT = re.compile(rf"\b{PRECS}(?:'s)? defaults? (?:(?:is|of) )?(?:rel_l2 ?(?:<=)? ?)?(?P<rel>{NUM})\b")


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("`", ""))


def _precisions(precs: str) -> list[str]:
    return [p.lower() for p in re.split(r"/|, | and ", precs)]


def statements(text: str) -> list[tuple[str, float, float | None]]:
    """(precision, rel_l2, cosine or None) for each default the text states."""
    flat = _flat(text)
    out: list[tuple[str, float, float | None]] = []
    for rx in STATED:
        for m in rx.finditer(flat):
            out += [(p, float(m["rel"]), float(m["cos"])) for p in _precisions(m["precs"])]
    for m in DEFAULT.finditer(flat):
        out += [(p, float(m["rel"]), None) for p in _precisions(m["precs"])]
    return out


def _wrong(found: list[tuple[str, float, float | None]]) -> list[str]:
    bad = []
    for precision, rel, cos in found:
        (want_rel, want_cos), _ = PRECISION_CHECKS[precision]
        if rel != want_rel or (cos is not None and cos != want_cos):
            bad.append(f"{precision}: rel_l2 {rel}, cosine {cos}; the code: {want_rel}, {want_cos}")
    return bad


def test_the_layerwise_table_is_the_codes():
    text = (ROOT / "docs" / "stages" / "layerwise.md").read_text(encoding="utf-8")
    table = re.search(r"^\| precision \| rel_l2 <= \| cosine >= \|.*?\n((?:\|.*\n)+)", text, re.M)
    assert table, "docs/stages/layerwise.md: the defaults table is gone"
    rows: dict[str, tuple[float, float]] = {}
    for line in table.group(1).splitlines()[1:]:  # after the |---| line
        cells = [c.strip() for c in line.strip("|").split("|")]
        for precision in cells[0].split(", "):
            rows[precision] = (float(cells[1]), float(cells[2]))
    assert rows == {p: limits for p, (limits, _) in PRECISION_CHECKS.items()}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_defaults_stated_in_the_docs_are_the_codes(page: Path):
    assert not _wrong(statements(page.read_text(encoding="utf-8"))), page.name


def test_the_suite_schema_states_the_codes_defaults():
    description = LayerwiseStage.model_fields["checks"].description or ""
    found = statements(description)
    assert {p for p, _, _ in found} == set(PRECISION_CHECKS), description
    assert not _wrong(found)


def test_statements_are_found():
    """The patterns find what the docs write, and a wrong number fails."""
    assert statements("inside BF16's default 0.04.") == [("bf16", 0.04, None)]
    assert _wrong(statements("inside BF16's default 0.04.")) and not _wrong(statements("BF16's default 0.1"))
    assert statements("(FP16: `rel_l2<=0.1`, `cosine>=0.999`; INT8: `0.25`, `0.97`;") == [
        ("fp16", 0.1, 0.999),
        ("int8", 0.25, 0.97),
    ]
    assert statements("FP16 and BF16\n`rel_l2 <= 0.1` and `cosine >= 0.999`, INT8/FP8/INT4 0.25 and 0.97;") == [
        ("fp16", 0.1, 0.999),
        ("bf16", 0.1, 0.999),
        ("int8", 0.25, 0.97),
        ("fp8", 0.25, 0.97),
        ("int4", 0.25, 0.97),
    ]
    assert statements("0.1 and 0.999 for FP16/BF16") == [("fp16", 0.1, 0.999), ("bf16", 0.1, 0.999)]
    assert statements("rel_l2 <= 0.01 and cosine >= 0.999 for FP32/TF32") == [
        ("fp32", 0.01, 0.999),
        ("tf32", 0.01, 0.999),
    ]


def test_the_detection_defaults_table_is_the_codes():
    """docs/stages/layerwise.md#detection-defaults-per-precision and the suite schema's description state the
    detection checks' defaults the code uses (`DETECTION_CHECKS`)."""
    from trtverify.config.layerwise import DETECTION_CHECKS, LayerwiseDetections

    text = (ROOT / "docs" / "stages" / "layerwise.md").read_text(encoding="utf-8")
    table = re.search(r"^\| precision \| matched_by_score >= \|.*?\n((?:\|.*\n)+)", text, re.M)
    assert table, "docs/stages/layerwise.md: the detection defaults table is gone"
    rows: dict[str, tuple[float, ...]] = {}
    for line in table.group(1).splitlines()[1:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        for precision in cells[0].split(", "):
            rows[precision] = tuple(float(c) for c in cells[1:4])
    assert rows == DETECTION_CHECKS
    description = _flat(LayerwiseDetections.model_fields["checks"].description or "")
    found = {}
    for m in re.finditer(
        rf"(?:matched_by_score >= )?(?P<a>{NUM}),? (?:mean_iou_by_score >= )?(?P<b>{NUM}),? and "
        rf"(?:max_score_change <= )?(?P<c>{NUM}) for {PRECS}",
        description,
    ):
        for p in _precisions(m["precs"]):
            found[p] = (float(m["a"]), float(m["b"]), float(m["c"]))
    assert found == DETECTION_CHECKS, description
