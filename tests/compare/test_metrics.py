import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from trtverify.compare.metrics import CompareError, compare, topk_agreement
from trtverify.config.checks import METRICS, metric_key


def test_identical_tensors():
    a = np.linspace(-3, 3, 60, dtype=np.float32).reshape(3, 20)
    c = compare(a, a.copy())
    assert c.metrics["max_abs"] == 0 and c.metrics["mean_abs"] == 0 and c.metrics["rel_l2"] == 0
    assert c.metrics["cosine"] == 1.0 and c.metrics["sqnr"] == math.inf and c.metrics["max_rel"] == 0
    assert c.nonfinite_mismatch == 0 and c.numel == 60


def test_known_values():
    a = np.array([1.0, 2.0, -2.0, 4.0])
    b = np.array([1.0, 2.5, -2.0, 3.0])
    c = compare(a, b, {"frac_outside_tol": {"atol": 0.1, "rtol": 0.0}})
    assert c.metrics["max_abs"] == pytest.approx(1.0)
    assert c.metrics["mean_abs"] == pytest.approx(0.375)
    assert c.metrics["max_rel"] == pytest.approx(0.25)
    d = b - a
    assert c.metrics["rel_l2"] == pytest.approx(np.linalg.norm(d) / np.linalg.norm(a))
    assert c.metrics["cosine"] == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    assert c.metrics["sqnr"] == pytest.approx(10 * np.log10((a @ a) / (d @ d)))
    assert c.metrics["frac_outside_tol@atol=0.1,rtol=0"] == pytest.approx(0.5)


def test_scale_error_gives_rel_l2_of_the_scale():
    a = np.random.default_rng(0).normal(size=(64, 10)).astype(np.float32)
    c = compare(a, a * np.float32(1.01))
    assert c.metrics["rel_l2"] == pytest.approx(0.01, rel=1e-4)
    assert c.metrics["cosine"] == pytest.approx(1.0)


def test_float64_accumulation_on_float16():
    # sum of squares of 1e5 float16 values of 200 overflows float16 (max 65504); float64 must not
    a = np.full(100_000, 200, dtype=np.float16)
    b = a.copy()
    b[0] = np.float16(201)
    c = compare(a, b)
    assert math.isfinite(c.metrics["rel_l2"]) and c.metrics["rel_l2"] > 0
    assert c.metrics["cosine"] == pytest.approx(1.0)


def test_nan_in_candidate_where_reference_finite_counts_as_mismatch():
    a = np.ones(10, np.float32)
    b = a.copy()
    b[3] = np.nan
    b[4] = np.inf
    c = compare(a, b, {"frac_outside_tol": {}})
    assert c.cand_nan == 1 and c.cand_inf == 1 and c.ref_nan == 0
    assert c.nonfinite_mismatch == 2
    assert c.metrics["frac_outside_tol@atol=1e-05,rtol=0.001"] == pytest.approx(0.2)


def test_same_nonfinite_values_match_but_different_ones_do_not():
    a = np.array([np.nan, np.inf, -np.inf, 1.0])
    assert compare(a, a.copy()).nonfinite_mismatch == 0
    assert compare(a, np.array([np.inf, np.inf, np.inf, 1.0])).nonfinite_mismatch == 2


def test_all_nonfinite_gives_nan_metrics():
    a = np.array([np.nan, np.nan])
    c = compare(a, a.copy())
    assert all(math.isnan(c.metrics[k]) for k in ("max_abs", "cosine"))


def test_zero_reference():
    z = np.zeros(5)
    assert compare(z, z).metrics["rel_l2"] == 0.0
    c = compare(z, np.full(5, 1e-3))
    assert c.metrics["rel_l2"] == math.inf and c.metrics["max_rel"] == math.inf
    assert c.metrics["cosine"] == 0.0 and c.metrics["sqnr"] == -math.inf


def test_empty_and_mismatched_shapes_are_errors():
    with pytest.raises(CompareError, match="no elements"):
        compare(np.zeros((0, 3)), np.zeros((0, 3)))
    with pytest.raises(CompareError, match="shape mismatch"):
        compare(np.zeros((2, 3)), np.zeros((3, 2)))


def test_topk_agreement():
    a = np.array([[0.1, 0.5, 0.4], [0.9, 0.05, 0.05]])
    b = np.array([[0.1, 0.4, 0.5], [0.9, 0.06, 0.04]])
    assert topk_agreement(a, b, 1) == 0.5
    assert topk_agreement(a, b, 2) == 1.0
    with pytest.raises(CompareError):
        topk_agreement(a, b, 4)


def test_metric_key():
    assert metric_key("cosine", None) == "cosine"
    assert metric_key("topk_agreement", {"k": 5}) == "topk_agreement@k=5"


def test_integer_and_bool_tensors():
    c = compare(np.array([1, 2, 3], np.int64), np.array([1, 2, 4], np.int64))
    assert c.metrics["max_abs"] == 1.0
    assert compare(np.array([True, False]), np.array([True, False])).metrics["max_abs"] == 0


@settings(max_examples=200, deadline=None)
@given(
    hnp.arrays(
        np.float32, hnp.array_shapes(min_dims=1, max_dims=3, max_side=6), elements=st.floats(-1e6, 1e6, width=32)
    ),
    st.floats(-1e3, 1e3),
)
def test_metric_invariants(a, noise):
    b = (a + np.float32(noise)).astype(np.float32)
    c = compare(a, b, {"frac_outside_tol": {}, "topk_agreement": {"k": 1}})
    m = c.metrics
    assert m["max_abs"] >= m["mean_abs"] >= 0
    assert -1.0 <= m["cosine"] <= 1.0
    assert 0.0 <= m["frac_outside_tol@atol=1e-05,rtol=0.001"] <= 1.0
    assert 0.0 <= m["topk_agreement@k=1"] <= 1.0
    assert c.nonfinite_mismatch == 0
    # symmetry of the absolute error
    assert compare(b, a).metrics["max_abs"] == pytest.approx(m["max_abs"])


def test_every_metric_declares_its_direction():
    for spec in METRICS.values():
        assert spec.better in ("lower", "higher")


def test_huge_float32_values_do_not_overflow_the_sums():
    a = np.array([3e19, -2e19, 1e20], np.float32)
    b = (a * np.float32(1.001)).astype(np.float32)
    c = compare(a, b)
    assert c.metrics["rel_l2"] == pytest.approx(1e-3, rel=1e-3)
    assert c.metrics["cosine"] == pytest.approx(1.0) and math.isfinite(c.metrics["sqnr"])


def test_relu_like_zeros_in_the_reference():
    a = np.array([0.0, 0.0, 2.0, 4.0], np.float32)
    assert compare(a, np.array([0.0, 0.0, 2.2, 4.0], np.float32)).metrics["max_rel"] == pytest.approx(0.1)
    assert compare(a, np.array([0.0, 1e-3, 2.0, 4.0], np.float32)).metrics["max_rel"] == math.inf


def test_error_histogram_bins_log10_differences():
    from trtverify.compare.checks import HIST_BINS, HIST_LOG10_LO, HIST_PER_DECADE, error_histogram

    ref = np.zeros(1000, np.float32)
    cand = ref.copy()
    cand[:500] = 1e-3 * 1.5  # log10 = -2.82: the bin starting at -3.0
    cand[500:600] = 20.0  # log10 = 1.30: the bin starting at 1.0
    cand[600] = np.nan
    cand[601] = 1e-20  # below the range: clipped into the first bin
    counts, exact, nonfinite, looked = error_histogram(ref, cand)
    assert counts.shape == (HIST_BINS,) and looked == 1000 and nonfinite == 1 and exact == 398
    assert counts[int((-3 - HIST_LOG10_LO) * HIST_PER_DECADE)] == 500
    assert counts[int((1 - HIST_LOG10_LO) * HIST_PER_DECADE)] == 100
    assert counts[0] == 1 and counts.sum() == 601
    # a large tensor is sampled with a stride, never more than the limit
    big = np.arange(100_000, dtype=np.float32)
    counts, exact, _, looked = error_histogram(big, big, limit=1000)
    assert looked <= 1000 and exact == looked and counts.sum() == 0


def test_a_difference_too_large_to_square_gives_minus_inf_sqnr_not_a_crash():
    """FP32 values whose squared difference overflows (a Conv with weights scaled by 1e38 produced them): the
    metrics stay finite where they can and sqnr is -inf, instead of math.log10(0) raising (exit 4)."""
    a = np.ones(8, np.float64)
    b = np.full(8, 1e200, np.float64)  # finite, but its square is not
    c = compare(a, b)
    assert c.metrics["sqnr"] == -math.inf and c.metrics["max_abs"] == pytest.approx(1e200)


def _whole_tensor(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """The metrics by the whole-tensor path (what the fused, block-by-block one must agree with)."""
    from trtverify.compare.metrics import _core, _working

    return _core(_working(a), _working(b))[0]


@pytest.mark.parametrize("n", [1, 7, 65536, 65536 * 2 + 17])
@pytest.mark.parametrize("ref_type,cand_type", [("float32", "float16"), ("float32", "float32"), ("float16", "float16")])
def test_the_fused_blocks_agree_with_the_whole_tensor_metrics(n, ref_type, cand_type):
    rng = np.random.default_rng(n)
    a = (rng.standard_normal(n) * 3).astype(ref_type)
    b = (a.astype(np.float64) * (1 + rng.standard_normal(n) * 1e-3)).astype(cand_type)
    a[: max(1, n // 10)] = 0  # 0/0 where both are zero, x/0 where only the reference is
    b[1 : max(2, n // 20)] = 0
    from trtverify.compare.metrics import _core_blocks

    assert _core_blocks(a, b) is not None  # finite values: the fused path is the one taken
    fused = compare(a, b).metrics
    whole = _whole_tensor(a, b)
    assert fused.keys() == whole.keys()
    for k in fused:
        assert fused[k] == pytest.approx(whole[k], rel=1e-9, abs=0), k


def test_widening_float16_by_lookup_is_astype_bit_for_bit():
    from trtverify.util.halfcast import widen_by_lookup as widen_f16

    every = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    assert np.array_equal(widen_f16(every).view(np.uint32), every.astype(np.float32).view(np.uint32))
    strided = every[::3]  # not contiguous
    assert np.array_equal(widen_f16(strided).view(np.uint32), strided.astype(np.float32).view(np.uint32))


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e20])
def test_a_value_the_fused_blocks_cannot_sum_takes_the_counting_path(bad):
    # a NaN or inf is counted, not summed; 1e20 squares beyond float32 and is redone in float64
    a = np.ones(200_000, np.float32)
    b = a.copy()
    b[150_000] = bad
    c = compare(a, b)
    if bad == 1e20:
        assert c.cand_inf == 0 and c.metrics["max_abs"] == pytest.approx(1e20) and math.isfinite(c.metrics["rel_l2"])
    else:
        assert c.nonfinite_mismatch == 1 and c.metrics["max_abs"] == 0.0


def test_a_ratio_beyond_float32_is_the_same_finite_number_on_both_paths():
    # 10 / 1e-38 is beyond float32 but not float64: the fused path must not report inf where the whole-tensor
    # path (asked for a parameterised metric) reports 1e39
    a = np.float32([1e-38, 1.0])
    b = np.float32([10.0, 1.0])
    fused = compare(a, b).metrics["max_rel"]
    whole = compare(a, b, {"topk_agreement": {"k": 1}}).metrics["max_rel"]
    assert math.isfinite(fused) and fused == pytest.approx(whole) == pytest.approx(1e39, rel=1e-6)
    # a true x/0 stays inf on both
    assert compare(np.float32([0.0, 1.0]), np.float32([1.0, 1.0])).metrics["max_rel"] == math.inf


@pytest.mark.parametrize("v", [0.5, -0.0, 0.0, math.inf, -math.inf, math.nan, 5e-324])
@pytest.mark.parametrize("better", ["lower", "higher"])
def test_a_one_sample_summary_is_numpys(v, better):
    """The one-sample shortcut of `summarize` gives what numpy's mean, median and percentile give."""
    from trtverify.compare.checks import summarize

    arr = np.array([v])
    finite = arr[np.isfinite(arr)]
    want = {"worst": v, "min": v, "max": v, "mean": None, "median": None, "p95": None}
    if finite.size:
        want |= {
            "mean": float(finite.mean()),
            "median": float(np.median(finite)),
            "p95": float(np.percentile(finite, 95 if better == "lower" else 5)),
        }
    got = summarize([v], better)
    assert {k: repr(getattr(got, k)) for k in want} == {k: repr(x) for k, x in want.items()}


F32_MIN = float(np.finfo(np.float32).min)


def test_a_saturated_mask_fill_is_equal_by_meaning_and_left_out_of_the_metrics():
    """Attention scores plus a mask's fill (tests/stages/layerwise/test_layerwise_masks.py has the real BERT): -inf in a
    TorchScript export, finfo(float32).min in a dynamo one, -65504 (plus a score, rounded: -65472) in FP16."""
    scores = np.array([0.5, -1.25, 2.0, 0.75], np.float32)
    ref = np.concatenate([scores, np.full(4, -np.inf, np.float32)])
    for fill in (np.float16(-65504), np.float16(-65472), np.float16(-np.inf)):
        cand = np.concatenate([scores, np.full(4, fill, np.float32)]).astype(np.float16)
        c = compare(ref, cand)
        assert c.nonfinite_mismatch == 0 and c.ref_inf == 4 and c.compared == 4
        assert c.saturated == (0 if np.isinf(fill) else 4)  # -inf against -inf: the same value, nothing saturated
        assert c.metrics["rel_l2"] == 0.0  # the scores alone: exact in FP16
    # finfo(float32).min against -inf, both ways, and against FP16's -65504: float32's fill is its extreme
    dyn = np.concatenate([scores, np.full(4, F32_MIN, np.float32)])
    half = np.concatenate([scores, np.full(4, -65504.0, np.float32)]).astype(np.float16)  # as a converter clamps
    for a, b in ((ref, dyn), (dyn, ref), (dyn, half)):
        c = compare(a, b)
        assert c.nonfinite_mismatch == 0 and c.saturated == 4 and c.metrics["rel_l2"] == 0.0, c
    assert compare(dyn, half).saturated_values == (F32_MIN, -65504.0)
    # equal fills on both sides are left out of the metrics too: 3.4e38 squared would drown the scores' error
    assert compare(dyn, dyn + np.array([0.1, 0, 0, 0, 0, 0, 0, 0], np.float32)).metrics["rel_l2"] > 0.01


def test_non_finite_divergences_still_fail_and_say_which_side():
    finite = np.array([1.0, 2.0, 1e5, -3.0], np.float32)
    # inf where the reference is finite and far from float32's extreme (an FP16 overflow)
    with np.errstate(over="ignore"):
        c = compare(finite, finite.astype(np.float16))
    assert c.nonfinite_mismatch == c.cand_only_nonfinite == 1 and c.ref_only_nonfinite == 0 and c.saturated == 0
    # the reference's -inf against a finite value that is no type's extreme (-10000, an old fill)
    ref = np.array([1.0, -np.inf], np.float32)
    c = compare(ref, np.array([1.0, -1e4], np.float32))
    assert c.nonfinite_mismatch == c.ref_only_nonfinite == 1 and c.cand_only_nonfinite == 0
    # NaN appearing, and a fill of the other sign: both non-finite or extreme, never equal by meaning
    for other in (np.nan, np.inf, 65504.0):
        c = compare(ref, np.array([1.0, other], np.float32))
        assert c.nonfinite_mismatch == 1 and c.saturated == 0, (other, c)
    c = compare(np.array([1.0, 2.0], np.float32), np.array([np.nan, 2.0], np.float32))
    assert c.cand_only_nonfinite == 1
