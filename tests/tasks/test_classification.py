"""ClassificationAccumulator against scikit-learn: same numbers on random and edge cases."""

import json
import math

import numpy as np
import pytest
from sklearn.metrics import (
    accuracy_score,
    confusion_matrix,
    f1_score,
    precision_recall_fscore_support,
    top_k_accuracy_score,
)

from trtverify.tasks.classification import ClassificationAccumulator


def sk_expected(labels: np.ndarray, preds: np.ndarray, c: int) -> dict:
    lab = list(range(c))
    p, r, f, s = precision_recall_fscore_support(labels, preds, labels=lab, zero_division=0)
    return {
        "accuracy": accuracy_score(labels, preds),
        "macro_f1": f1_score(labels, preds, labels=lab, average="macro", zero_division=0),
        "micro_f1": f1_score(labels, preds, labels=lab, average="micro", zero_division=0),
        "weighted_f1": f1_score(labels, preds, labels=lab, average="weighted", zero_division=0),
        "precision": p,
        "recall": r,
        "f1": f,
        "support": s,
        "confusion": confusion_matrix(labels, preds, labels=lab),
    }


def assert_matches_sklearn(m: dict, labels: np.ndarray, preds: np.ndarray, c: int) -> None:
    e = sk_expected(labels, preds, c)
    for k in ("accuracy", "macro_f1", "micro_f1", "weighted_f1"):
        assert m[k] == pytest.approx(e[k], abs=1e-12), k
    assert [row["precision"] for row in m["per_class"]] == pytest.approx(e["precision"].tolist(), abs=1e-12)
    assert [row["recall"] for row in m["per_class"]] == pytest.approx(e["recall"].tolist(), abs=1e-12)
    assert [row["f1"] for row in m["per_class"]] == pytest.approx(e["f1"].tolist(), abs=1e-12)
    assert [row["support"] for row in m["per_class"]] == e["support"].tolist()
    assert m["confusion"] == e["confusion"].tolist()
    assert m["samples"] == len(labels)


def fill(acc: ClassificationAccumulator, labels: np.ndarray, scores: np.ndarray, batch: int = 37) -> None:
    for i in range(0, len(labels), batch):
        acc.update(labels[i : i + batch], scores[i : i + batch])


@pytest.mark.parametrize("seed", range(6))
def test_random_scores_match_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    c = int(rng.integers(2, 12))
    n = int(rng.integers(1, 400))
    labels = rng.integers(0, c, n)
    scores = rng.normal(size=(n, c)).astype(np.float32)
    scores[np.arange(n), labels] += rng.uniform(0, 2)  # better than chance, not perfect
    acc = ClassificationAccumulator(c, top_k=(1, 3, 5))
    fill(acc, labels, scores)
    m = acc.compute().dump()
    preds = scores.argmax(axis=1)
    assert_matches_sklearn(m, labels, preds, c)
    assert m["top1_accuracy"] == m["accuracy"]
    for k in (3, 5):
        if k <= c:
            assert m[f"top{k}_accuracy"] == pytest.approx(
                top_k_accuracy_score(labels, scores, k=k, labels=list(range(c))), abs=1e-12
            )
        else:
            assert f"top{k}_accuracy" not in m
    assert m["invalid"] == 0
    json.dumps(m, allow_nan=False)


def test_class_never_predicted_and_class_without_support() -> None:
    # class 2 is never predicted, class 3 has no support but is predicted, class 4 neither
    labels = np.array([0, 0, 1, 1, 2, 2, 2, 0])
    preds = np.array([0, 3, 1, 0, 1, 3, 0, 0])
    acc = ClassificationAccumulator(5, top_k=(1,))
    acc.update(labels, preds)
    m = acc.compute().dump()
    assert_matches_sklearn(m, labels, preds, 5)
    pc = m["per_class"]
    assert pc[2]["precision"] == 0.0 and pc[2]["recall"] == 0.0 and pc[2]["support"] == 3
    assert pc[3]["precision"] == 0.0 and pc[3]["recall"] == 0.0 and pc[3]["support"] == 0
    assert pc[4] == {"class": 4, "name": "4", "precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
    # macro averages over all five classes, the empty ones included
    assert m["macro_f1"] == pytest.approx(sum(r["f1"] for r in pc) / 5)


def test_all_correct_and_all_wrong() -> None:
    labels = np.array([0, 1, 2, 1])
    acc = ClassificationAccumulator(3, top_k=(1, 2))
    acc.update(labels, np.eye(3)[labels])
    m = acc.compute().dump()
    assert m["accuracy"] == m["macro_f1"] == m["micro_f1"] == m["weighted_f1"] == m["top2_accuracy"] == 1.0
    acc = ClassificationAccumulator(3)
    acc.update(labels, (labels + 1) % 3)
    m = acc.compute().dump()
    assert_matches_sklearn(m, labels, (labels + 1) % 3, 3)
    assert m["accuracy"] == 0.0 and m["macro_f1"] == 0.0 and "top5_accuracy" not in m


def test_topk_ties_break_to_the_lower_index_like_argmax() -> None:
    scores = np.array([[1.0, 1.0, 0.0], [0.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    labels = np.array([1, 2, 2])
    acc = ClassificationAccumulator(3, top_k=(1, 2, 3))
    acc.update(labels, scores)
    m = acc.compute().dump()
    assert acc.per_sample()["predictions"] == [0, 1, 0]
    assert m["top1_accuracy"] == m["accuracy"] == 0.0
    assert m["top2_accuracy"] == pytest.approx(2 / 3)  # rows 0 and 1: the label is second
    assert m["top3_accuracy"] == 1.0


def test_predictions_only_reports_top1_only() -> None:
    rng = np.random.default_rng(3)
    labels, preds = rng.integers(0, 10, 100), rng.integers(0, 10, 100)
    acc = ClassificationAccumulator(10)
    acc.update(labels[:50], preds[:50])
    acc.update(labels[50:], np.eye(10)[preds[50:]])  # a scores batch, but one batch lacks scores
    m = acc.compute().dump()
    assert_matches_sklearn(m, labels, preds, 10)
    assert m["top1_accuracy"] == m["accuracy"] and "top5_accuracy" not in m


def test_nan_scores_have_no_prediction_and_count_wrong() -> None:
    labels = np.array([0, 1, 2, 0])
    scores = np.array([[5.0, 0, 0], [np.nan, 1, 0], [0, 0, 1], [np.nan] * 3])
    acc = ClassificationAccumulator(3, top_k=(1, 2))
    acc.update(labels, scores)
    m = acc.compute().dump()
    preds = np.array([0, -1, 2, -1])
    assert acc.per_sample()["predictions"] == preds.tolist()
    assert m["invalid"] == 2 and m["accuracy"] == 0.5 and m["top2_accuracy"] == 0.5
    # scikit-learn with -1 outside labels=range(3): a miss of the true class, no predicted positive
    assert_matches_sklearn(
        {**m, "confusion": confusion_matrix(labels, preds, labels=[0, 1, 2]).tolist()}, labels, preds, 3
    )
    assert sum(map(sum, m["confusion"])) == 2  # the NaN rows are absent from the matrix


def test_zero_samples_is_an_error() -> None:
    acc = ClassificationAccumulator(4)
    with pytest.raises(ValueError, match="no samples"):
        acc.compute().dump()
    acc.update(np.zeros(0, dtype=np.int64), np.zeros((0, 4)))
    with pytest.raises(ValueError, match="no samples"):
        acc.compute().dump()
    assert acc.per_sample() == {"ids": [], "labels": [], "predictions": [], "correct": []}


def test_per_sample_ids_and_class_names() -> None:
    acc = ClassificationAccumulator(2, top_k=(1,), class_names=["cat", "dog"])
    acc.update(np.array([0, 1]), np.array([[0.9, 0.1], [0.8, 0.2]]), ids=["a.jpg", "b.jpg"])
    acc.update(np.array([1]), np.array([1]), ids=[np.int64(7)])
    ps = acc.per_sample()
    assert ps == {
        "ids": ["a.jpg", "b.jpg", 7],
        "labels": [0, 1, 1],
        "predictions": [0, 0, 1],
        "correct": [True, False, True],
    }
    assert type(ps["ids"][2]) is int
    m = acc.compute().dump()
    assert [r["name"] for r in m["per_class"]] == ["cat", "dog"]
    json.dumps(ps, allow_nan=False)


def test_default_ids_run_across_batches() -> None:
    acc = ClassificationAccumulator(3)
    acc.update(np.array([0, 1]), np.array([0, 1]))
    acc.update(np.array([2]), np.array([2]))
    assert acc.per_sample()["ids"] == [0, 1, 2]


def test_merge_equals_whole() -> None:
    rng = np.random.default_rng(11)
    labels, scores = rng.integers(0, 7, 300), rng.normal(size=(300, 7))
    whole = ClassificationAccumulator(7)
    fill(whole, labels, scores)
    a, b = ClassificationAccumulator(7), ClassificationAccumulator(7)
    fill(a, labels[:120], scores[:120])
    fill(b, labels[120:], scores[120:])
    a.merge(b)
    assert a.compute().dump() == whole.compute().dump()
    with pytest.raises(ValueError, match="classes"):
        a.merge(ClassificationAccumulator(8))


@pytest.mark.parametrize(
    "labels, scores, match",
    [
        (np.array([0, 3]), np.zeros((2, 3)), r"labels must be in \[0, 3\)"),
        (np.array([0, -1]), np.zeros((2, 3)), "labels must be in"),
        (np.array([0, 1]), np.zeros((2, 4)), r"shape \[B, C\] = \[2, 3\]"),
        (np.array([0, 1]), np.zeros((3, 3)), "shape"),
        (np.array([0, 1]), np.array([0, 5]), "predictions must be in"),
        (np.array([0, 1]), np.array([0.0, 1.5]), "whole class indices"),
        (np.array([[0, 1]]), np.zeros((1, 3)), r"labels must have shape \[B\]"),
        (np.array([0.0, 1.0]), np.zeros((2, 3, 1)), "shape"),
    ],
)
def test_bad_input_is_rejected(labels: np.ndarray, scores: np.ndarray, match: str) -> None:
    acc = ClassificationAccumulator(3)
    with pytest.raises(ValueError, match=match):
        acc.update(labels, scores)
    assert acc.samples == 0


def test_constructor_checks() -> None:
    with pytest.raises(ValueError, match="num_classes"):
        ClassificationAccumulator(0)
    with pytest.raises(ValueError, match="top_k"):
        ClassificationAccumulator(3, top_k=(0,))
    with pytest.raises(ValueError, match="class names"):
        ClassificationAccumulator(3, class_names=["a"])


def test_float16_and_integer_scores() -> None:
    labels = np.array([1, 0, 2])
    for scores in (
        np.array([[0, 3, 1], [2, 1, 0], [0, 0, 9]], dtype=np.float16),
        np.array([[0, 3, 1], [2, 1, 0], [0, 0, 9]]),
    ):
        acc = ClassificationAccumulator(3, top_k=(1, 2))
        acc.update(labels, scores)
        m = acc.compute().dump()
        assert m["accuracy"] == 1.0 and not math.isnan(m["macro_f1"])
