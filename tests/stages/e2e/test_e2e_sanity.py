"""Stage e2e's reference sanity (a degenerate reference warns, or fails with reference_sanity: fail) and
its worst list (only samples whose prediction changed), on the real Fashion-MNIST demo in ONNX Runtime."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, run_cli, write_suite
from trtverify.tasks.base import dominant_class, near_chance

DEMO = ROOT / "demo" / "fashion_mnist"

# a post-processing hook that makes every model, the reference included, predict class 3 (Dress)
CONSTANT_HOOK = """\
import numpy as np


def dress(outputs):
    logits = outputs["logits"]
    scores = np.zeros_like(logits)
    scores[:, 3] = 1.0
    return scores
"""


def _suite(tmp_path: Path, extra: str = "", post: str = "") -> Path:
    (tmp_path / "constant_post.py").write_text(CONSTANT_HOOK)
    text = (
        f"name: sanity\npython_path: [.]\nmodels:\n  reference: {DEMO / 'fashion_cnn_fp32.onnx'}\n"
        f"  candidates: {{int8: {DEMO / 'fashion_cnn_int8_qdq.onnx'}}}\n"
        "inputs: {generate: {input: {shape: [1, 1, 28, 28]}}}\n"
        "stages:\n  e2e:\n    task: classification\n"
        f"    dataset: {{npz: {DEMO / 'data' / 'test_subset.npz'}}}\n"
        "    preprocess: {scale: 0.00392156862745098}\n    batch_size: 500\n"
        f"    gates: [{{metric: accuracy, max_drop: 0.01}}]\n{post}{extra}"
    )
    return write_suite(tmp_path, text)


def _stage(out: Path) -> dict:
    return json.loads((out / "results.json").read_text())["stages"][0]


def test_a_reference_that_predicts_one_class_warns_and_every_gate_still_passes(tmp_path: Path):
    post = "    postprocess: {hook: 'constant_post:dress'}\n"
    r = run_cli("run", str(_suite(tmp_path, post=post)), "--out", str(tmp_path / "o"))
    assert r.code == 0, r.out + r.err
    stage = _stage(tmp_path / "o")
    assert stage["reference"]["accuracy"] == pytest.approx(0.1)
    sanity = stage["reference_sanity"]
    assert sanity["mode"] == "warn" and sanity["degenerate"]
    assert sanity["reasons"][0] == "100.0% of the samples predicted as class 3; the labels give it 10.0%"
    assert sanity["reasons"][1].startswith("accuracy 0.1000 is near chance")
    assert (
        "          note: warning: the reference looks degenerate: 100.0% of the samples predicted as class 3" in r.out
    )
    assert "stages.e2e.reference_sanity: fail makes it a failing check" in r.out
    assert not [c for c in stage["checks"] if c["name"].startswith("reference sanity")]  # warn: no check
    # nothing changed between reference and candidate: no "most changed samples" at all
    assert stage["candidates"][0]["worst"] == [] and "most changed samples" not in r.out


def test_reference_sanity_fail_makes_it_a_failing_check(tmp_path: Path):
    post = "    postprocess: {hook: 'constant_post:dress'}\n"
    suite = _suite(tmp_path, extra="    reference_sanity: fail\n", post=post)
    r = run_cli("run", str(suite), "--out", str(tmp_path / "o"))
    assert r.code == 1, r.out + r.err
    check = next(c for c in _stage(tmp_path / "o")["checks"] if not c["passed"])
    assert check["name"] == "reference sanity: not degenerate" and check["metric"] == "reference_degenerate"
    assert len(check["detail"]["reasons"]) == 2
    assert "FAIL reference sanity: not degenerate: 2 (limit <= 0): 100.0% of the samples predicted as class 3" in r.out


def test_a_sound_reference_passes_the_check_and_ignore_records_nothing(tmp_path: Path):
    r = run_cli("run", str(_suite(tmp_path, extra="    reference_sanity: fail\n")), "--out", str(tmp_path / "o"))
    assert r.code == 0, r.out + r.err
    stage = _stage(tmp_path / "o")
    assert stage["reference_sanity"] == {"mode": "fail", "degenerate": False, "reasons": []}
    assert any(c["name"] == "reference sanity: not degenerate" and c["passed"] for c in stage["checks"])
    assert "degenerate" not in r.out
    # the demo's INT8 candidate agrees on almost every sample: only the changed ones are listed
    worst = stage["candidates"][0]["worst"]
    assert 0 < len(worst) < 20 and all(w["reference"] != w["candidate"] and w["flipped"] for w in worst)
    lost = [w["lost"] for w in worst]
    assert lost == sorted(lost, reverse=True)  # those the reference got right first
    r = run_cli("run", str(_suite(tmp_path, extra="    reference_sanity: ignore\n")), "--out", str(tmp_path / "p"))
    assert r.code == 0 and "reference_sanity" not in _stage(tmp_path / "p")


def test_rules_dominant_class_and_near_chance():
    names = [f"class {i}" for i in range(10)]
    assert dominant_class([91, 1, 1, 1, 1, 1, 1, 1, 1, 1], [10] * 10, names) is not None
    assert dominant_class([90, 2, 1, 1, 1, 1, 1, 1, 1, 1], [10] * 10, names) is None  # 90 %: not more than 90 %
    # labels that are themselves 85 % one class (segmentation's background): 95 % predicted is not degenerate
    assert dominant_class([94, 6], [85, 15], ["bg", "fg"], "pixels") is None
    assert dominant_class([96, 4], [85, 15], ["bg", "fg"], "pixels") is not None
    assert near_chance("accuracy", 0.145, [10] * 10) is not None  # 0.1 + 0.05 x 0.9
    assert near_chance("accuracy", 0.146, [10] * 10) is None
    assert near_chance("accuracy", 0.52, [50, 50]) is not None and near_chance("accuracy", 0.53, [50, 50]) is None
    assert near_chance("accuracy", float(np.nan), [10] * 10) is None
