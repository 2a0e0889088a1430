"""Task regression: its metrics agree with scikit-learn's on known cases; rows of features [N, F] are read and fed
as float rows; errors are gated by their rise (`max_rise`)."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from sklearn.metrics import max_error, mean_absolute_error, mean_absolute_percentage_error, mean_squared_error

from trtverify.config.stages import E2EStage, Gate
from trtverify.stages.e2e.stage import gate_checks
from trtverify.tasks.batches import make_preprocess
from trtverify.tasks.regression import RegressionAccumulator, RegressionTask
from trtverify.util.errors import UsageError


def _case(seed: int = 0, n: int = 203, k: int = 3) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    truth = rng.normal(0, 5, (n, k)) * np.array([1.0, 100.0, 0.01])[:k]
    pred = truth + rng.normal(0, 0.5, (n, k)) * np.array([1.0, 30.0, 0.002])[:k]
    return pred, truth


def _acc(pred: np.ndarray, truth: np.ndarray, batch: int = 32, **kw) -> RegressionAccumulator:
    acc = RegressionAccumulator(**kw)
    for s in range(0, len(pred), batch):
        acc.update(list(range(s, min(s + batch, len(pred)))), pred[s : s + batch], truth[s : s + batch])
    return acc


def test_metrics_agree_with_scikit_learn():
    pred, truth = _case()
    m = _acc(pred, truth).compute()
    assert m.mae == pytest.approx(mean_absolute_error(truth, pred), rel=1e-12)
    assert m.rmse == pytest.approx(math.sqrt(mean_squared_error(truth, pred)), rel=1e-12)
    assert m.max_error == pytest.approx(max(max_error(truth[:, j], pred[:, j]) for j in range(3)), rel=1e-12)
    assert m.rel_error == pytest.approx(mean_absolute_percentage_error(truth, pred), rel=1e-12)
    raw = {
        "mae": mean_absolute_error(truth, pred, multioutput="raw_values"),
        "rmse": np.sqrt(mean_squared_error(truth, pred, multioutput="raw_values")),
        "rel_error": mean_absolute_percentage_error(truth, pred, multioutput="raw_values"),
        "max_error": [max_error(truth[:, j], pred[:, j]) for j in range(3)],
    }
    for j, row in enumerate(m.per_output):
        assert row.output == str(j) and row.nonfinite == 0
        for key, values in raw.items():
            assert getattr(row, key) == pytest.approx(values[j], rel=1e-12), (key, j)
    assert m.samples == 203


def test_single_output_and_eps_floor():
    truth = np.array([0.0, 1.0, -2.0, 4.0])
    pred = np.array([0.5, 1.5, -2.0, 3.0])
    m = _acc(pred[:, None], truth, eps=0.1).compute()  # [N, 1] predictions against [N] targets
    assert m.mae == pytest.approx((0.5 + 0.5 + 0 + 1) / 4)
    assert m.rmse == pytest.approx(math.sqrt((0.25 + 0.25 + 0 + 1) / 4))
    assert m.max_error == 1.0
    assert m.rel_error == pytest.approx((0.5 / 0.1 + 0.5 / 1 + 0 + 1 / 4) / 4)  # |t| = 0 floored at eps


def test_a_nonfinite_prediction_counts_as_an_infinite_error():
    pred, truth = _case(k=2)
    pred[[3, 7], 1] = [np.inf, np.nan]
    m = _acc(pred, truth).compute()
    assert m.nonfinite == 2 and m.per_output[1].nonfinite == 2 and m.per_output[0].nonfinite == 0
    assert math.isinf(m.mae) and math.isinf(m.rmse) and math.isinf(m.max_error) and math.isinf(m.rel_error)
    assert m.per_output[0].mae == pytest.approx(mean_absolute_error(truth[:, 0], pred[:, 0]))


def test_shards_merge_to_the_whole_and_survive_their_state():
    pred, truth = _case(seed=3)
    whole = _acc(pred, truth).compute()
    a = RegressionAccumulator()
    a.update(list(range(100)), pred[:100], truth[:100])
    b = RegressionAccumulator()
    b.update(list(range(100, 203)), pred[100:], truth[100:])
    merged = RegressionAccumulator.from_state(a.state(), a.eps, None)
    merged.merge(RegressionAccumulator.from_state(b.state(), b.eps, None))
    assert merged.compute() == whole
    with pytest.raises(ValueError, match="overlap"):
        merged.merge(RegressionAccumulator.from_state(b.state(), b.eps, None))


def test_wrong_shapes_are_refused():
    with pytest.raises(ValueError, match="2 predicted values per row for 3 targets"):
        RegressionAccumulator().update([0], np.zeros((1, 2)), np.zeros((1, 3)))
    with pytest.raises(ValueError, match="not finite"):
        RegressionAccumulator().update([0, 1], np.zeros((2, 1)), np.array([[0.0], [np.nan]]))


def _cfg(npz: Path, **extra) -> E2EStage:
    return E2EStage.model_validate(
        {
            "task": "regression",
            "dataset": {"npz": str(npz), "images_key": "x", "labels_key": "y"},
            "gates": [{"metric": "mae", "max_rise": 0.1}],
            **extra,
        }
    )


def test_rows_of_features_are_fed_as_float_rows(tmp_path: Path):
    x = np.random.default_rng(0).normal(0, 1000, (10, 4)).astype(np.float32)
    np.savez(tmp_path / "d.npz", x=x, y=np.arange(20.0).reshape(10, 2))
    task = RegressionTask.open(_cfg(tmp_path / "d.npz", options={"output_names": ["a", "b"]}))
    assert len(task.reader) == 10 and task.reader.label(3).tolist() == [6.0, 7.0]
    pre = make_preprocess(task.cfg.preprocess, [])
    np.testing.assert_array_equal(pre.finish([pre.per_image(task.reader.image(i)) for i in range(3)]), x[:3])
    scaled = RegressionTask.open(_cfg(tmp_path / "d.npz", preprocess={"mean": [1, 2, 3, 4], "std": [2, 2, 2, 2]}))
    pre = make_preprocess(scaled.cfg.preprocess, [])
    out = pre.finish([pre.per_image(scaled.reader.image(0))])
    np.testing.assert_allclose(out[0], (x[0] - [1, 2, 3, 4]) / 2, rtol=1e-6)


@pytest.mark.parametrize(
    ("arrays", "extra", "message"),
    [
        ({"x": np.zeros((4, 3)), "y": np.zeros(5)}, {}, "4 rows of 'x' but 5 targets"),
        ({"x": np.zeros((4, 3)), "y": np.zeros(4)}, {"preprocess": {"resize": [2, 2]}}, "not images"),
        ({"x": np.zeros((4, 3)), "y": np.zeros(4)}, {"preprocess": {"mean": [0, 0]}}, "one per feature"),
        ({"x": np.zeros((4, 3)), "z": np.zeros(4)}, {}, "no array 'y'"),
        ({"x": np.zeros(4), "y": np.zeros(4)}, {}, "rows of features"),
    ],
)
def test_bad_datasets_name_the_file(tmp_path: Path, arrays, extra, message):
    np.savez(tmp_path / "d.npz", **arrays)
    with pytest.raises(UsageError, match=message) as err:
        RegressionTask.open(_cfg(tmp_path / "d.npz", **extra))
    assert "d.npz" in str(err.value)


def test_max_rise_gates_an_error_that_grew():
    pred, truth = _case(k=2)
    ref = _acc(pred, truth).compute()
    worse = _acc(pred + 2.0, truth).compute()
    cfg = SimpleNamespace(gates=[Gate(metric="mae", max_rise=0.1), Gate(metric="rmse", max_rise=1.0)])  # gates only
    checks = gate_checks(cfg, "cand", ref, worse)  # type: ignore[arg-type]
    assert [c.passed for c in checks] == [False, True]
    assert checks[0].value == pytest.approx(worse.mae - ref.mae) and "mae rise <= 0.1" in checks[0].name
    assert all(c.passed for c in gate_checks(cfg, "same", ref, ref))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_rise"):
        Gate(metric="mae")


def test_worst_rows_are_those_whose_error_rose_most(tmp_path: Path):
    pred, truth = _case(k=2, n=20)
    cand = pred.copy()
    cand[5] += 1000.0
    cand[9] += 300.0
    np.savez(tmp_path / "d.npz", x=np.zeros((20, 2)), y=truth)
    task = RegressionTask.open(_cfg(tmp_path / "d.npz"))
    worst = task.worst(task.per_sample(_acc(pred, truth)), task.per_sample(_acc(cand, truth)), 2)
    assert [w.index for w in worst] == [5, 9]
    assert worst[0].error_rise == pytest.approx(worst[0].candidate_error - worst[0].reference_error)
