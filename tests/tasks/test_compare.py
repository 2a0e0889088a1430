"""Task compare (no labels): per-row rel_l2 and max_abs agree with trtverify's tensor comparison (the house
definition) and NumPy; the distribution's percentiles are NumPy's; the reference's rows are kept for the
candidates that follow it; shards merge."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from trtverify.compare.metrics import compare
from trtverify.config.stages import E2EStage
from trtverify.tasks.compare import CompareAccumulator, CompareTask, percentile, row_errors
from trtverify.util.errors import UsageError


def _outputs(seed: int, n: int = 40) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "logits": rng.normal(0, 3, (n, 10)).astype(np.float32),
        "box": rng.normal(0, 50, (n, 2, 2)).astype(np.float32),
    }


def test_row_errors_are_the_house_rel_l2_and_max_abs():
    ref = _outputs(0)["box"]
    cand = ref + np.random.default_rng(1).normal(0, 0.5, ref.shape).astype(np.float32)
    rel, mx = row_errors(ref, cand)
    for i in range(len(ref)):
        m = compare(ref[i], cand[i]).metrics
        assert rel[i] == pytest.approx(m["rel_l2"], rel=1e-6) and mx[i] == pytest.approx(m["max_abs"], rel=1e-6)
        assert rel[i] == pytest.approx(np.linalg.norm(cand[i] - ref[i]) / np.linalg.norm(ref[i]), rel=1e-6)


def test_row_errors_at_zeros_and_nonfinite_values():
    ref = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 2.0], [1.0, 2.0]])
    cand = np.array([[0.0, 0.0], [0.0, 1e-3], [np.nan, 2.0], [1.0, np.inf]])
    rel, mx = row_errors(ref, cand)
    assert rel.tolist() == [0.0, math.inf, math.inf, math.inf] and mx.tolist()[:2] == [0.0, 1e-3]
    ref = np.array([[np.nan, 3.0, np.inf], [np.nan, 3.0, np.inf]])
    rel, mx = row_errors(ref, np.array([[np.nan, 3.3, np.inf], [1.0, 3.0, np.inf]]))  # the same NaN and inf: 0
    assert rel[0] == pytest.approx(0.1) and mx[0] == pytest.approx(0.3) and rel[1] == math.inf


def test_percentile_is_numpys_and_inf_where_it_reaches_an_inf():
    values = np.random.default_rng(2).exponential(1.0, 137)
    for q in (0, 50, 95, 100):
        assert percentile(values, q) == pytest.approx(np.percentile(values, q), rel=1e-12)
    values[:5] = math.inf  # sorted last (ranks 132-136): p95 of 137 values interpolates ranks 129 and 130, finite
    assert percentile(values, 95) == pytest.approx(np.percentile(values, 95), rel=1e-12)
    values[:20] = math.inf
    assert percentile(values, 95) == math.inf and percentile(values, 50) < math.inf


def _task(tmp_path: Path, images: np.ndarray, **options) -> CompareTask:
    np.savez(tmp_path / "x.npz", images=images)  # no labels
    cfg = E2EStage.model_validate(
        {
            "task": "compare",
            "dataset": {"npz": str(tmp_path / "x.npz")},
            "options": options,
            "gates": [{"metric": "rel_l2_p95", "max_rise": 0.01}],
        }  # fmt: skip
    )
    return CompareTask.open(cfg)


def test_candidates_are_compared_with_the_reference_row_by_row(tmp_path: Path):
    task = _task(tmp_path, np.zeros((40, 8, 8), np.uint8))
    ref, cand = task.accumulator(), task.accumulator()
    out = _outputs(3)
    moved = {k: v.copy() for k, v in out.items()}
    moved["logits"][7] *= 1.5  # rel_l2 0.5 on row 7
    moved["box"][[11, 12]] += 1000.0
    for s in (0, 16, 32):  # the stage's order: the reference's batch, then the candidate's
        rows = list(range(s, min(s + 16, 40)))
        for acc, o in ((ref, out), (cand, moved)):
            task.update(acc, rows, {k: v[rows] for k, v in o.items()}, [None] * len(rows))
    m, r = cand.compute(), ref.compute()
    assert r.rel_l2_max == 0 and r.max_abs == 0 and r.rows == 40
    logits = next(p for p in m.per_output if p.output == "logits")
    assert logits.rel_l2_max == pytest.approx(0.5) and logits.rel_l2_p50 == 0.0
    expected = np.percentile(row_errors(out["box"], moved["box"])[0], 95)
    assert next(p for p in m.per_output if p.output == "box").rel_l2_p95 == pytest.approx(expected)
    assert m.rel_l2_p95 == max(p.rel_l2_p95 for p in m.per_output)
    worst = task.worst(task.per_sample(ref), task.per_sample(cand), 3)
    assert sorted((w.index, w.output) for w in worst[:2]) == [(11, "box"), (12, "box")]
    assert (worst[2].index, worst[2].output) == (7, "logits") and worst[2].rel_l2 == pytest.approx(0.5)
    assert worst[0].rel_l2 >= worst[1].rel_l2 >= worst[2].rel_l2
    assert task.per_class(r, m)[0].output == "box"
    # shards: each keeps its candidate's per-row errors; merged, they are the whole
    state = cand.state()
    halves = [{k: v[..., sl] if k in ("rel", "max_abs", "ids") else v for k, v in state.items()}
              for sl in (slice(0, 13), slice(13, None))]  # fmt: skip
    merged = CompareAccumulator.from_state(halves[0])
    merged.merge(CompareAccumulator.from_state(halves[1]))
    assert merged.compute() == m and CompareAccumulator.from_state(state).compute() == m


def test_a_candidate_row_before_the_reference_and_wrong_outputs_are_refused(tmp_path: Path):
    task = _task(tmp_path, np.zeros((4, 3), np.float32), outputs=["logits"])
    ref, cand = task.accumulator(), task.accumulator()
    out = _outputs(4, n=4)
    with pytest.raises(UsageError, match="before the reference"):
        task.update(cand, [0, 1], {"logits": out["logits"][:2]}, [None, None])
    with pytest.raises(UsageError, match="no output nope"):
        _task(tmp_path, np.zeros((4, 3), np.float32), outputs=["nope"]).postprocess(out, _batch(4), "m")
    assert list(task.postprocess(out, _batch(4), "m")) == ["logits"]
    task.update(ref, [0, 1], {"logits": out["logits"][:2]}, [None, None])
    with pytest.raises(UsageError, match="shape"):
        task.update(cand, [0, 1], {"logits": out["logits"][:2, :5]}, [None, None])


def _batch(n: int):
    from trtverify.tasks.batches import Batch

    return Batch(list(range(n)), np.zeros((n, 3), np.float32), [None] * n, [(3,)] * n)  # type: ignore[list-item]


def test_merge_refuses_overlapping_shards(tmp_path: Path):
    a = CompareAccumulator.from_state(
        {"ids": np.arange(3), "names": np.array(["y"]), "rel": np.zeros((1, 3)), "max_abs": np.zeros((1, 3))}
    )
    with pytest.raises(ValueError, match="overlap"):
        a.merge(CompareAccumulator.from_state(a.state()))
