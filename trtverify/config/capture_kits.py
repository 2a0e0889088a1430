"""Captured candidates checked before anything runs (`validate`, and `run` before any stage): each capture
(`captured:` and `unmarked:`) needs its kit beside it, and the kit must have been made from the suite's reference
(or from the candidate's `path:`).

Reads only the kits' manifests, and the reference's bytes once (hashed in 1 MiB blocks) where a kit records its
digest; no capture file is read.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from trtverify.toolout.kit import MANIFEST, find_kit, read_kit
from trtverify.util.errors import Problem, UsageError

if TYPE_CHECKING:
    from trtverify.config.loader import LoadedSuite


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def kit_problems(loaded: LoadedSuite) -> list[Problem]:
    """A capture without a kit in its folder (or those above), a kit that cannot be read, and a kit made from
    another model than the suite's reference or the candidate's ONNX (`path:`, its engine's: a kit of a model whose
    batch is fixed, for stage e2e)."""
    suite = loaded.suite
    reference = Path(suite.models.reference)
    digest: str | None = None
    problems = []
    for name, cand in suite.models.candidates.items():
        for key in ("captured", "unmarked"):
            capture = getattr(cand, key, None)
            if capture is None:
                continue
            where = ("models", "candidates", name, key)
            manifest = find_kit(Path(capture)) or find_kit(Path(capture).parent)  # e2e/captured/FOLDER: 3 up
            if manifest is None:
                problems.append(loaded.problem(where, (
                    f"{capture}: no capture kit ({MANIFEST}) in its folder or those above: a capture is compared "
                    "only with the feeds it was made from; put it back into the folder of the kit it was made from "
                    "(`trtverify capture` writes the kit)")))  # fmt: skip
                continue
            try:
                kit = read_kit(manifest)
            except UsageError as exc:
                problems.append(loaded.problem(where, str(exc)))
                continue
            if not kit.reference_sha256 or not reference.is_file():
                continue
            digest = digest or _sha256(reference)
            engine = Path(cand.path) if cand.path is not None else reference  # the ONNX its engine was built from
            if kit.reference_sha256 != digest and not (engine.is_file() and kit.reference_sha256 == _sha256(engine)):
                problems.append(loaded.problem(where, (
                    f"{capture}: its kit ({manifest}) was made from {kit.reference} (sha256 "
                    f"{kit.reference_sha256[:12]}), not from the reference {reference.name} (sha256 {digest[:12]}) "
                    "nor the candidate's path: a capture of another model, or the reference changed since; make a "
                    f"kit from this reference (`trtverify capture {reference.name} --out KIT`) and capture again"
                )))  # fmt: skip
    return problems


__all__ = ["kit_problems"]
