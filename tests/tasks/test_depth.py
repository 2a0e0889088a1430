"""Depth task: the metrics against the published definitions, masks, scaling, disparity, shards and gates.

The reference implementation below is written from the paper, independently of trtverify.tasks.depth: Eigen,
Puhrsch & Fergus, "Depth Map Prediction from a Single Image using a Multi-Scale Deep Network" (NIPS 2014),
section 4 (abs relative difference, squared relative difference, RMSE linear and log, threshold accuracy
max(y/y*, y*/y) = δ < thr for thr = 1.25, 1.25², 1.25³), averaged per image as monodepth2's evaluate_depth.py
does (compute_errors per image, then the mean), with its median scaling and its clamp of the prediction to
[MIN_DEPTH, MAX_DEPTH]. No depth-metric library is installed here (torchmetrics is not), so the definition is the
cross-check.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.conftest import ROOT
from trtverify.config.stages import E2EStage, Gate, gate_direction
from trtverify.stages.e2e.stage import gate_checks
from trtverify.tasks.depth import DepthAccumulator, DepthMetrics, DepthOptions

DATASET = {"npz": str(ROOT / "demo" / "depth" / "val.npz"), "labels_key": "depth"}
GATES = [{"metric": "delta1", "max_drop": 0.01}]
NAMES = ("abs_rel", "sq_rel", "rmse", "rmse_log", "delta1", "delta2", "delta3")


def eigen_per_image(gt: np.ndarray, pred: np.ndarray, lo: float, hi: float, median: bool) -> list[float]:
    """One image, the published formulas, pixel by pixel (deliberately a plain loop)."""
    ys, ts = [], []
    for t, y in zip(gt.ravel().tolist(), pred.ravel().tolist()):
        if t == t and lo <= t <= hi:  # NaN != NaN
            ts.append(t)
            ys.append(y)
    if median:
        k = float(np.median(ts)) / float(np.median(ys))
        ys = [y * k for y in ys]
    ys = [min(max(y, lo), hi) for y in ys]
    n = len(ts)
    abs_rel = sum(abs(y - t) / t for y, t in zip(ys, ts)) / n
    sq_rel = sum((y - t) ** 2 / t for y, t in zip(ys, ts)) / n
    rmse = math.sqrt(sum((y - t) ** 2 for y, t in zip(ys, ts)) / n)
    rmse_log = math.sqrt(sum((math.log(y) - math.log(t)) ** 2 for y, t in zip(ys, ts)) / n)
    deltas = [sum(max(y / t, t / y) < 1.25**k for y, t in zip(ys, ts)) / n for k in (1, 2, 3)]
    return [abs_rel, sq_rel, rmse, rmse_log, *deltas]


def eigen(gts, preds, lo, hi, median=False) -> dict[str, float]:
    rows = [eigen_per_image(g, p, lo, hi, median) for g, p in zip(gts, preds)]
    return dict(zip(NAMES, np.mean(rows, axis=0).tolist()))


def scenes(seed: int, n: int = 5, shape=(12, 9)) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Depth maps with holes (0), NaN and pixels beyond 10 m; predictions off by noise and a scale."""
    rng = np.random.default_rng(seed)
    gts, preds = [], []
    for _ in range(n):
        gt = rng.uniform(0.5, 12.0, shape)
        gt[rng.random(shape) < 0.1] = 0.0
        gt[rng.random(shape) < 0.05] = np.nan
        pred = np.abs(gt * rng.uniform(0.6, 1.5) + rng.normal(0, 0.8, shape))
        pred = np.nan_to_num(pred, nan=3.0) + 0.01
        gts.append(gt.astype(np.float32))
        preds.append(pred.astype(np.float32))
    return gts, preds


def metrics(gts, preds, **opts) -> DepthMetrics:
    acc = DepthAccumulator(DepthOptions(**opts))
    acc.update(range(len(gts)), gts, preds)
    return acc.compute()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("median", [False, True])
def test_metrics_equal_the_published_definitions(seed: int, median: bool):
    gts, preds = scenes(seed)
    got = metrics(gts, preds, min_depth=1e-3, max_depth=10.0, scale="median" if median else "none")
    want = eigen(gts, preds, 1e-3, 10.0, median)
    for k in NAMES:
        assert getattr(got, k) == pytest.approx(want[k], rel=1e-6), k
    valid = sum(int(((g >= 1e-3) & (g <= 10.0)).sum()) for g in gts)  # NaN compares False: not valid
    assert got.pixels == valid and got.invalid_pixels == sum(g.size for g in gts) - valid and got.samples == 5


def test_a_hand_computed_image():
    # valid truths 1, 2, 4 (0 is a hole); predictions 1, 2.5, 2 (5 falls on the hole)
    got = metrics([np.array([[1.0, 2.0], [4.0, 0.0]])], [np.array([[1.0, 2.5], [2.0, 5.0]])])
    assert got.abs_rel == pytest.approx((0 + 0.25 + 0.5) / 3)
    assert got.sq_rel == pytest.approx((0 + 0.25 / 2 + 4 / 4) / 3)
    assert got.rmse == pytest.approx(math.sqrt((0 + 0.25 + 4) / 3))
    assert got.rmse_log == pytest.approx(math.sqrt((math.log(1.25) ** 2 + math.log(0.5) ** 2) / 3))
    # ratios 1, 1.25 (not below 1.25), 2 (not below 1.25^3 = 1.953)
    assert (got.delta1, got.delta2, got.delta3) == pytest.approx((1 / 3, 2 / 3, 2 / 3))
    assert (got.pixels, got.invalid_pixels, got.nan_pixels) == (3, 1, 0)


def test_rmse_is_averaged_per_image_not_pooled():
    gts = [np.full((2, 2), 1.0), np.full((2, 2), 1.0)]
    preds = [np.full((2, 2), 1.0), np.array([[3.0, 1.0], [1.0, 1.0]])]
    assert metrics(gts, preds).rmse == pytest.approx((0 + math.sqrt(4 / 4)) / 2)  # pooled would be sqrt(4 / 8)


def test_predictions_are_clamped_and_nan_predictions_fail_everything():
    gt = np.array([[2.0, 2.0]])
    clamped = metrics([gt], [np.array([[2.0, 1e9]])], max_depth=4.0)  # an overflow reads as max_depth
    assert clamped.abs_rel == pytest.approx((0 + 1.0) / 2)
    nan = metrics([gt], [np.array([[2.0, np.nan]])], max_depth=4.0)
    assert nan.abs_rel == math.inf and nan.rmse == math.inf and nan.delta1 == 0.5 and nan.nan_pixels == 1


def test_an_image_without_valid_depth_counts_for_nothing():
    got = metrics([np.zeros((2, 2)), np.ones((2, 2))], [np.ones((2, 2)), np.ones((2, 2)) * 2])
    assert got.samples == 1 and got.empty_images == 1 and got.abs_rel == pytest.approx(1.0)


def test_merge_of_two_shards_and_state_roundtrip_equal_the_whole():
    gts, preds = scenes(3, n=6)
    opts = DepthOptions(max_depth=10.0)
    whole = DepthAccumulator(opts)
    whole.update(range(6), gts, preds)
    a, b = DepthAccumulator(opts), DepthAccumulator(opts)
    a.update(range(3), gts[:3], preds[:3])
    b.update(range(3, 6), gts[3:], preds[3:])
    a.merge(DepthAccumulator.from_state({k: np.array(v) for k, v in b.state().items()}, opts))
    assert a.compute() == whole.compute()
    assert a.per_image() == whole.per_image()
    with pytest.raises(ValueError, match="overlap"):
        a.merge(b)


def test_a_prediction_of_another_size_is_refused():
    with pytest.raises(ValueError, match=r"prediction of shape \[2, 3\] for a depth map of shape \[2, 2\]"):
        metrics([np.ones((2, 2))], [np.ones((2, 3))])


def test_options_are_checked_where_the_suite_gives_them():
    def stage(options):
        return E2EStage.model_validate({"task": "depth", "dataset": DATASET, "options": options, "gates": GATES})

    with pytest.raises(ValueError, match="max_depth 1 must be above min_depth 2"):
        stage({"min_depth": 2, "max_depth": 1})
    with pytest.raises(ValueError, match="scale"):
        stage({"scale": "mean"})
    assert stage({"output": "disparity"}).task_options().output == "disparity"


def test_error_metrics_are_gated_on_their_rise_and_refuse_drop_limits():
    assert gate_direction(Gate(metric="abs_rel", max_drop=0.01), lower_is_better=True) == (
        "'abs_rel' is lower-is-better: give max_rise, max_rel_rise, max, not max_drop"
    )
    assert gate_direction(Gate(metric="delta1", max_rise=0.01), lower_is_better=False) is not None
    assert gate_direction(Gate(metric="abs_rel", max_rise=0.01, max=0.2), lower_is_better=True) is None
    cfg = E2EStage.model_validate(
        {
            "task": "depth",
            "dataset": DATASET,
            "gates": [{"metric": "abs_rel", "max_rise": 0.01, "max_rel_rise": 0.1, "max": 0.15}],
        }
    )
    ref = metrics([np.ones((2, 2))], [np.full((2, 2), 1.1)])  # abs_rel 0.1
    worse = metrics([np.ones((2, 2))], [np.full((2, 2), 1.2)])  # abs_rel 0.2
    better = metrics([np.ones((2, 2))], [np.full((2, 2), 1.05)])
    assert [c.passed for c in gate_checks(cfg, "c", ref, worse)] == [False, False, False]
    assert [c.passed for c in gate_checks(cfg, "c", ref, better)] == [True, True, True]


def test_depth_ranges_pool_their_pixels_over_the_images():
    gts = [np.array([[1.0, 4.0], [9.0, 10.0]]), np.array([[2.0, 6.0], [0.0, 11.0]])]  # 0 and 11: not valid
    preds = [np.array([[1.0, 4.0], [5.0, 10.0]]), np.array([[3.0, 6.0], [1.0, 1.0]])]
    got = metrics(gts, preds, max_depth=10.0, ranges=[0, 5, 10])
    low, high = got.per_range  # [0, 5): truths 1, 4, 2; [5, 10]: 9, 10 (the last range holds its edge), 6
    assert (low.depth_range, low.pixels, high.depth_range, high.pixels) == ("[0, 5)", 3, "[5, 10]", 3)
    assert low.abs_rel == pytest.approx((0 + 0 + 0.5) / 3) and low.delta1 == pytest.approx(2 / 3)
    assert high.abs_rel == pytest.approx((4 / 9 + 0 + 0) / 3) and high.delta1 == pytest.approx(2 / 3)
    default = metrics(gts, preds, min_depth=1.0, max_depth=10.0).per_range  # three equal ranges
    assert [r.depth_range for r in default] == ["[1, 4)", "[4, 7)", "[7, 10]"]
    assert metrics(gts, preds).per_range == []  # no max_depth, no ranges: nothing to split
    with pytest.raises(ValueError, match="increasing"):
        DepthOptions(ranges=[0, 5, 5])
