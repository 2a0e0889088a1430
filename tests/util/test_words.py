"""Counts and their nouns (`1 tensor`, never `1 tensors`) and messages cut at a word (trtverify/util/words.py),
in the terminal text and the HTML report."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.conftest import ROOT, run_cli
from trtverify.util.words import count, plural, shorten

NOUNS = (
    "tensor|evaluation|sample|row|layer|run|check|shard|shape|line|value|node|stage|finding|group|chunk|"
    "candidate|model|image|class|batch|iteration|problem"
)
# a count printed before a noun in the plural ({n} tensors, {n} worst samples, {{ n }} node(s)): `count`/`plural`
# say it instead, so that 1 reads `1 tensor`
PY_COUNT = re.compile(rf"\{{[^{{}}]+\}} (?:[a-z-]+ )?(?:(?:{NOUNS})(?:e?s)\b|\w+\(s\))")
J2_COUNT = re.compile(rf"\}}\}} (?:[a-z-]+ )?(?:(?:{NOUNS})(?:e?s)\b|\w+\(s\))")
TERMINAL = [*sorted((ROOT / "trtverify" / "cli").glob("*.py")), *sorted((ROOT / "trtverify" / "report").glob("*.py"))]
TEMPLATES = sorted((ROOT / "trtverify" / "report" / "templates").glob("*.j2"))


def test_plural_and_count():
    assert [plural(w, 1) for w in ("tensor", "batch", "entry", "layer group", "is|are")] == [
        "tensor",
        "batch",
        "entry",
        "layer group",
        "is",
    ]
    assert [plural(w, 2) for w in ("tensor", "batch", "entry", "layer group", "is|are", "key")] == [
        "tensors",
        "batches",
        "entries",
        "layer groups",
        "are",
        "keys",
    ]
    assert (count(1, "evaluation"), count(0, "tensor"), count(3, "tensor"), count(None, "run")) == (
        "1 evaluation",
        "0 tensors",
        "3 tensors",
        "? runs",
    )


def test_shorten_cuts_after_a_sentence_or_a_word_and_says_so():
    text = "First sentence here. Second one is a good deal longer than the first, and it goes on and on."
    assert shorten(text, 200) == text
    assert shorten(text, 40) == "First sentence here. ..."
    cut = shorten("word " * 40, 50)
    assert cut.endswith("word ...") and len(cut) <= 50
    assert shorten("x" * 100, 20) == "x" * 16 + " ..."


@pytest.mark.parametrize("path", [*TERMINAL, *TEMPLATES], ids=lambda p: p.name)
def test_terminal_and_report_text_count_through_the_helper(path: Path):
    rx = J2_COUNT if path.suffix == ".j2" else PY_COUNT
    hits = [f"{path.name}:{n}: {m.group(0)}" for n, line in enumerate(path.read_text().splitlines(), 1)
            for m in rx.finditer(line)]  # fmt: skip
    assert not hits, "\n".join(hits)


def test_one_tensor_reads_one_tensor(tmp_path: Path):
    """A one-node model compares one tensor: `1 of 1 reference tensor paired` in the terminal, `1 tensor on 1
    sample` in the report (they said `1 tensors compared` and `1 tensors on 1 sample(s)`)."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(model))
    np.savez(tmp_path / "x.npz", x=np.ones((1, 4), np.float32))
    out = tmp_path / "o"
    r = run_cli("layerwise", str(model), str(model), "--inputs", str(tmp_path / "x.npz"), "--out", str(out))
    assert r.code == 0, r.err
    assert "1 of 1 reference tensor paired and compared" in r.out and "1 tensors" not in r.out, r.out
    assert "on 1 sample..." in r.err, r.err
    html = (out / "report.html").read_text()
    assert "1 tensor on 1 sample," in html and "1 tensors" not in html
