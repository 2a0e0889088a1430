from trtverify.compare.pairing import pair_names


def test_exact_names_only_never_position_or_substring():
    p = pair_names(["logits", "feat"], ["logits_1", "feat"])
    assert p.pairs == [("feat", "feat")]
    assert p.reference_only == ["logits"] and p.candidate_only == ["logits_1"]


def test_rename_and_ignore():
    p = pair_names(
        ["out0", "aux", "x"], ["logits", "aux", "extra"], rename={"out0": "logits", "nope": "y"}, ignore=["extra", "x"]
    )
    assert p.pairs == [("out0", "logits"), ("aux", "aux")]
    assert p.ignored == ["x", "extra"]
    assert p.reference_only == [] and p.candidate_only == []
    assert p.bad_renames == ["nope"]


def test_two_references_cannot_claim_one_candidate():
    p = pair_names(["a", "b"], ["a"], rename={"b": "a"})
    assert p.pairs == [("a", "a")] and p.reference_only == ["b"]


def test_nothing_in_common():
    p = pair_names(["a"], ["b"])
    assert p.pairs == [] and p.reference_only == ["a"] and p.candidate_only == ["b"]
