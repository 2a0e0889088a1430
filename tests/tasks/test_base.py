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
