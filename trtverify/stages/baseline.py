"""Accuracy baselines: each candidate's numbers from the last release, so a suite gates on drift against them as
well as on the reference. `<reference dir>/<suite>/e2e/baseline.json` (each candidate's task metrics) and
`<reference dir>/<suite>/layerwise/baseline.json` (each candidate's worst tensor), beside perf's
`perf/baseline.json`. Only `trtverify run --update-baseline` writes them (atomically; JSON, never pickle).

Each entry carries the identity of what it was measured against: the suite's name, the reference model's sha256
and a hash of the data (e2e: the dataset's settings and size; layerwise: the input samples). An entry whose
identity differs from this run's is `not_comparable`, never compared; a missing file or entry is `missing`, and
the vs-baseline gate does not run (a note says how to write one), never a pass over nothing. The file itself is
`trtverify/util/baselinefile.py`'s, the one baseline store (perf's too)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field

from trtverify.compare.checks import CheckResult
from trtverify.stages.base import status_of
from trtverify.util import baselinefile
from trtverify.util.baselinefile import FILE, FLAG, FORMAT, MAX_BYTES, load, now, path_for
from trtverify.util.record import Record, optional

__all__ = ["FILE", "FLAG", "FORMAT", "MAX_BYTES", "load", "now", "path_for"]  # the one store's, used from here

Identity = dict[str, Any]


class VsBaseline(Record):
    """One number of a candidate against the stored baseline's (the last release's)."""

    state: Literal["compared", "missing", "not_comparable", "updated", "sharded"] = Field(
        description="compared: gated against the baseline; missing: no baseline (file or entry), the gate did not "
        "run; not_comparable: the baseline was measured on another suite, reference model or data, not compared; "
        "updated: this run wrote it (--update-baseline); sharded: a shard's metrics cover part of the dataset, "
        "compared when the shards are merged"
    )
    value: float | None = optional("this run's value")
    baseline: float | None = optional("the baseline's value")
    change: float | None = optional("value - baseline")
    tensor: str | None = optional("layerwise: this run's worst tensor")
    baseline_tensor: str | None = optional("layerwise: the baseline's worst tensor")
    written: str | None = optional("when the baseline entry was written (UTC, ISO 8601)")
    why: str | None = optional("why it was not compared")


def day(written: str | None) -> str:
    """'2026-11-20' of an ISO timestamp ('?' when unknown)."""
    return (written or "?")[:10]


def number(value: Any) -> float | None:
    """A stored number (JSON has no NaN or infinity: fsutil writes them as strings), None if not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def save(path: Path, suite: str, entries: dict[str, dict[str, Any]]) -> None:
    """Write `entries` (key -> entry), keeping the stored entries of other keys (another shape of a sweep)."""
    baselinefile.save(path, suite, entries, keep=True)


def differences(stored: Identity, here: Identity) -> list[str]:
    """What differs between a stored entry's identity and this run's ('' for none), in words."""

    def short(v: Any) -> Any:  # a sha256 by its first 12 digits
        return v[:12] if isinstance(v, str) and len(v) == 64 else v

    out = []
    for key in sorted(set(stored) | set(here)):
        a, b = stored.get(key), here.get(key)
        if a != b:
            out.append(f"{key.replace('_', ' ')} {short(a)!r} -> {short(b)!r}")
    return out


def lookup(
    doc: dict[str, Any] | None, suite: str, key: str, identity: Identity, path: Path
) -> tuple[dict[str, Any] | None, VsBaseline | None]:
    """The entry of `key` to compare with, or the state that says why there is none."""
    if doc is None:
        return None, VsBaseline(state="missing", why=f"no baseline yet ({path}): write one with {FLAG}")
    if doc.get("suite") != suite:
        why = f"{path} was written for suite {doc.get('suite')!r}, not {suite!r}; rewrite it with {FLAG}"
        return None, VsBaseline(state="not_comparable", why=why)
    entry = doc["rows"].get(key)
    if not isinstance(entry, dict):
        return None, VsBaseline(state="missing", why=f"{key} has no entry in {path}: write one with {FLAG}")
    diff = differences(entry.get("identity") or {}, identity)
    if diff:
        why = f"measured against other things ({'; '.join(diff)}): not compared; rewrite it with {FLAG}"
        return None, VsBaseline(state="not_comparable", written=entry.get("written"), why=why)
    return entry, None


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


R = TypeVar("R", bound=Record)


def gated(result: R, cands: list[Any], checks: list[CheckResult], notes: list[str], path: Path) -> R:
    """A stage's result once its candidates were gated against the baseline at `path` (e2e and layerwise alike):
    the candidates and checks with the vs-baseline ones added, the status they give, the notes, the file."""
    return result.model_copy(
        update={
            "candidates": cands,
            "checks": checks,
            "status": status_of(checks),
            "notes": notes,
            "baseline_file": str(path),
        }  # fmt: skip
    )
