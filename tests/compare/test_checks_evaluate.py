import math

import numpy as np

from trtverify.compare.checks import TensorSeries, evaluate
from trtverify.config.checks import Check


def test_nan_in_candidate_fails_whatever_the_thresholds():
    s = TensorSeries("y", "y")
    ref = np.ones((2, 3), np.float32)
    cand = ref.copy()
    cand[0, 0] = np.nan
    s.add(ref, cand, {})
    results = evaluate(s, [Check(metric="max_abs", max=1e9)], stage="framework")
    by = {r.metric: r for r in results.checks}
    assert by["nonfinite_mismatch"].passed is False and by["nonfinite_mismatch"].value == 1
    assert by["max_abs"].passed  # the finite part is fine; the NaN alone fails the tensor
    assert results.failed == ["nonfinite_mismatch <= 0"]


def test_worst_sample_and_counts():
    s = TensorSeries("y", "y")
    ref = np.ones(10)
    for scale in (1.0, 1.2, 1.05):
        s.add(ref, ref * scale, {})
    results = evaluate(s, [Check(metric="max_abs", max=0.1)], stage="layerwise", candidate="fp16")
    (_, r) = results.checks
    assert math.isclose(r.value, 0.2) and not r.passed
    assert r.worst_sample == 1 and r.detail == {"samples_failed": 1, "samples": 3}
    assert (r.stage, r.candidate, r.tensor, r.op, r.threshold) == ("layerwise", "fp16", "y", "<=", 0.1)
    assert results.failed == ["max_abs <= 0.1"]


def test_shape_mismatch_is_a_failed_check():
    s = TensorSeries("y", "y")
    s.add(np.ones(3), np.ones(4), {})
    results = evaluate(s, [Check(metric="cosine", min=0.5)], stage="framework")
    assert not any(r.passed for r in results.checks if r.metric in ("comparable", "cosine"))
    assert results.failed == ["comparable", "cosine >= 0.5"]
