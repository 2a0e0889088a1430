"""Helpers every task shares (trtverify.tasks.base)."""

import math

from trtverify.tasks.base import largest_drops


def test_largest_drops_skips_undefined_and_unchanged_and_breaks_ties_by_position():
    reference = {"a": 0.75, "b": 0.5, "c": math.nan, "d": 0.75, "e": 0.5, "f": 0.875}
    candidate = {"a": 0.5, "b": 0.625, "c": 0.125, "d": math.nan, "e": 0.25, "f": 0.875}  # "g" only here
    position = {"a": 5, "b": 4, "c": 3, "d": 2, "e": 1, "f": 0}
    rows = largest_drops(reference, candidate | {"g": 0.0}, position.__getitem__)
    assert [k for _, k in rows] == ["e", "a"]  # equal drops (0.25): the earlier sample first
    assert [d for d, _ in rows] == [0.25, 0.25]
    assert largest_drops({"x": 1.0}, {}, lambda k: 0) == []  # a sample the candidate lacks is not a drop


def test_confused_pairs_lists_the_cells_that_grew_most_off_the_diagonal():
    from trtverify.tasks.base import confused_pairs

    reference = [[5, 1, 0], [0, 4, 2], [1, 0, 3]]
    candidate = [[2, 3, 1], [0, 9, 0], [3, 0, 1]]  # 0 -> 1 grew by 2, 2 -> 0 by 2, 0 -> 2 by 1; the diagonal never
    pairs = confused_pairs(reference, candidate, ["cat", "dog", "fox"], 5)
    assert [(p.label, p.predicted, p.reference, p.candidate) for p in pairs] == [
        (0, 1, 1, 3),
        (2, 0, 1, 3),
        (0, 2, 0, 1),
    ]
    assert (pairs[0].label_name, pairs[0].predicted_name) == ("cat", "dog")
    assert len(confused_pairs(reference, candidate, ["cat", "dog", "fox"], 2)) == 2
    assert confused_pairs(reference, reference, ["cat", "dog", "fox"], 5) == []
