"""Pair reference and candidate tensors by exact name or an explicit rename, never by position."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from trtverify.util.record import Record


@dataclass(frozen=True)
class Pairing:
    pairs: list[tuple[str, str]]  # (reference name, candidate name)
    reference_only: list[str] = field(default_factory=list)
    candidate_only: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    bad_renames: list[str] = field(default_factory=list)  # rename sources the reference does not have

    def record(self) -> PairingRecord:
        return PairingRecord(
            pairs=[Pair(reference=r, candidate=c) for r, c in self.pairs],
            reference_only=list(self.reference_only),
            candidate_only=list(self.candidate_only),
            ignored=list(self.ignored),
            bad_renames=list(self.bad_renames),
        )


class Pair(Record):
    reference: str
    candidate: str


class PairingRecord(Record):
    """How names paired: the pairs, and what each side alone had."""

    pairs: list[Pair]
    reference_only: list[str]
    candidate_only: list[str]
    ignored: list[str]
    bad_renames: list[str]


def pair_names(
    reference: Iterable[str],
    candidate: Iterable[str],
    rename: Mapping[str, str] | None = None,
    ignore: Iterable[str] = (),
) -> Pairing:
    """Pairs in reference order. `rename` maps a reference name to its candidate name."""
    ref = list(dict.fromkeys(reference))
    cand = list(dict.fromkeys(candidate))
    rename = dict(rename or {})
    ignore_set = set(ignore)
    cand_set = set(cand)
    pairs, ref_only, ignored = [], [], []
    used: set[str] = set()
    for r in ref:
        if r in ignore_set:
            ignored.append(r)
            continue
        c = rename.get(r, r)
        if c in cand_set and c not in used:
            pairs.append((r, c))
            used.add(c)
        else:
            ref_only.append(r)
    cand_only = [c for c in cand if c not in used and c not in ignore_set]
    ignored += [c for c in cand if c in ignore_set and c not in ref]
    bad = [r for r in rename if r not in ref]
    return Pairing(pairs, ref_only, cand_only, ignored, bad)
