"""A ReLU whose reference output is all zeros on some samples: those samples are judged against the tensor's
typical magnitude, not blamed as infinitely wrong (rel_l2 = x/0 = inf however small the candidate's values; seen on
PP-OCRv4's detector under INT8, relu_8.tmp_0 zero in FP32 on 11 of 32 rows). The candidate is the reference with a
+0.01 Conv bias: a hand-made stand-in for INT8 rounding that lifts values just below zero (ONNX Runtime's
quantize_static folds the Relu into the QuantizeLinear's zero point, which clamps those to exact zeros)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.conftest import as_json, write_suite
from trtverify.cli.run import run_and_record
from trtverify.compare.checks import Worst, worst_of
from trtverify.compare.metrics import compare
from trtverify.config.loader import load_suite

CHANNELS = 3


def conv_relu(path: Path, bias: float) -> None:
    """x [1, 2, 4, 4] -> Conv 1x1 (positive weights, bias `bias`) -> Relu -> Mul 2 -> y."""
    w = np.full((CHANNELS, 2, 1, 1), 1.0, np.float32)
    b = np.full(CHANNELS, bias, np.float32)
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["conv"], name="conv"),
            helper.make_node("Relu", ["conv"], ["relu"], name="relu"),
            helper.make_node("Mul", ["relu", "two"], ["y"], name="mul"),
        ],
        "conv_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, CHANNELS, 4, 4])],
        [
            numpy_helper.from_array(w, "w"),
            numpy_helper.from_array(b, "b"),
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def inputs(path: Path, live: list[bool]) -> None:
    """One row per sample: a live row's conv output is about 2 (ReLU passes it); a dead row's is about -2, and just
    below zero at 4 of its 16 positions: ReLU zeroes all of it in the reference, and the candidate's +0.01 bias
    lifts those 4 to tiny positives (as INT8 rounding does to values near zero)."""
    rng = np.random.default_rng(0)
    rows = []
    for on in live:
        row = rng.uniform(0.5, 1.5, (1, 2, 4, 4))
        if not on:
            row = -row
            row[..., :2, :2] = rng.uniform(-0.004, 0.0, (1, 2, 2, 2))
        rows.append(row)
    np.savez(path, x=np.concatenate(rows).astype(np.float32))


def run(tmp_path: Path, live: list[bool]) -> dict:
    conv_relu(tmp_path / "ref.onnx", 0.0)
    conv_relu(tmp_path / "cand.onnx", 0.01)
    inputs(tmp_path / "x.npz", live)
    text = (
        "name: zr\nreference_dir: refs\nmodels:\n  reference: ref.onnx\n  candidates:\n    cand: cand.onnx\n"
        f"inputs:\n  file: x.npz\nstages:\n  layerwise:\n    samples: {len(live)}\n"
        "    checks: [{metric: rel_l2, max: 0.05}, {metric: cosine, min: 0.999}]\n"
    )
    results = run_and_record(load_suite(write_suite(tmp_path, text)), tmp_path / "out")
    return as_json(results)["stages"][0]


def test_relu_zero_on_some_samples_is_judged_against_its_typical_magnitude(tmp_path: Path):
    stage = run(tmp_path, [True, False, True, False])
    rows = {r["tensor"]: r for r in stage["candidates"][0]["rows"]}
    relu = rows["relu"]
    # live rows: |diff| 0.01 against values about 2 (rel_l2 0.005); a dead row's tiny positives (under 0.01,
    # on part of it) against that same typical magnitude: smaller still, and finite
    assert relu["samples"] == 4
    assert isinstance(relu["metrics"]["rel_l2"], float) and 0.0 < relu["metrics"]["rel_l2"] < 0.01, relu
    assert relu["metrics"]["cosine"] > 0.999, relu  # the zero rows carry no direction: they do not decide it
    assert relu["passed"] and rows["y"]["passed"], (relu, rows["y"])
    assert stage["status"] == "passed", [c for c in stage["checks"] if not c["passed"]]


def test_a_tensor_dead_on_every_sample_that_comes_alive_stays_infinitely_wrong(tmp_path: Path):
    stage = run(tmp_path, [False, False])
    relu = {r["tensor"]: r for r in stage["candidates"][0]["rows"]}["relu"]
    assert relu["metrics"]["rel_l2"] == "inf" and not relu["passed"], relu
    assert stage["status"] == "failed"


def test_worst_of_judges_a_zero_reference_sample_against_the_tensors_typical_magnitude():
    rng = np.random.default_rng(1)
    live = rng.uniform(1.0, 3.0, 64).astype(np.float32)
    dead = np.zeros(32, np.float32)  # half the elements: the scale follows the sample's element count
    tiny = np.where(np.arange(32) % 2 == 0, np.float32(1e-3), np.float32(0))
    samples = [compare(live, live * np.float32(1.0001)), compare(dead, tiny), compare(live, live)]
    assert samples[1].metrics["rel_l2"] == math.inf  # alone: x / 0
    worst = worst_of(samples)
    rms = math.sqrt(float(np.mean(live.astype(np.float64) ** 2)))
    expected = math.sqrt(16 * float(np.float32(1e-3)) ** 2) / (rms * math.sqrt(32))
    assert expected > samples[0].metrics["rel_l2"] and math.isclose(worst["rel_l2"], expected, rel_tol=1e-6)
    assert math.isclose(worst["sqnr"], -20 * math.log10(expected), rel_tol=1e-6)  # sqnr follows rel_l2
    assert worst["cosine"] == samples[0].metrics["cosine"] > 0.999  # the zero sample's 0 does not decide it
    assert worst["max_abs"] == samples[1].metrics["max_abs"]  # absolute metrics are its own, as measured
    # zero on every sample, alive in the candidate: nothing to judge against, a real error
    assert worst_of([compare(dead, tiny), compare(dead, dead)])["rel_l2"] == math.inf
    # zero on both sides: identical, not a zero-reference sample
    assert worst_of([compare(dead, dead), compare(live, live)])["rel_l2"] == 0.0


def test_a_zero_reference_sample_streamed_first_waits_for_the_tensors_magnitude():
    """Repair's evaluation streams samples through `Worst`: a zero-reference sample that comes before any
    live one is judged when the others are in, whatever the order."""
    live = np.linspace(1.0, 2.0, 16, dtype=np.float32)
    dead, tiny = np.zeros(16, np.float32), np.full(16, 1e-4, np.float32)
    samples = [compare(dead, tiny), compare(live, live + np.float32(1e-5))]
    w = Worst()
    for c in samples:
        w.add(c)
    assert w.zero_reference == 1 and w.result() == worst_of(samples[::-1])
    assert 0.0 < w.result()["rel_l2"] < 1e-3 and w.result()["cosine"] > 0.999
