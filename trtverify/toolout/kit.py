"""A capture kit's manifest (written by `trtverify capture`, read back with each capture made from the kit) and the
digest that ties a capture to the inputs it was made from.

The digest of a feed is the sha256 of, for each input in name order: the name, the dtype, the shape and the C-order
little-endian bytes; the kit's digest is the sha256 of its feeds' digests in order.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.util.errors import UsageError
from trtverify.util.words import count

MANIFEST = "manifest.json"
KIT_FORMAT = 1


def feed_digest(feed: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(feed):
        arr = np.asarray(feed[name])
        h.update(f"{name}\0{arr.dtype.str.lstrip('<>=|')}\0{list(arr.shape)}\0".encode())
        h.update(np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes())
    return h.hexdigest()


def feeds_digest(digests: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(digests).encode()).hexdigest()


@dataclass(frozen=True)
class Kit:
    folder: Path
    reference: str
    digest: str
    sample_digests: list[str]
    inputs: list[dict[str, Any]]  # name, shape (of one feed), dtype
    inputs_file: Path  # the kit's feeds as .npz (rows), for a run without --inputs
    batch_size: int  # rows of inputs_file per feed
    # the consistency feeds after the kit's own (trtverify/data/kitfeeds.py): role, iteration, rows, digest, ...
    consistency: tuple[dict[str, Any], ...] = ()
    not_possible: dict[str, str] = field(default_factory=dict)  # role -> why the kit has no such feed
    capture_digest: str = ""  # of every feed of inputs.json (the kit's and the consistency feeds)
    reference_sha256: str = ""  # of the ONNX file the kit was made from (absent: not checked)

    def iterations(self) -> int:
        """The iterations of a capture of every feed of inputs.json."""
        return len(self.sample_digests) + len(self.consistency)

    def describe(self) -> str:
        shapes = ", ".join(f"{i['name']} {'x'.join(map(str, i['shape']))} {i['dtype']}" for i in self.inputs)
        return f"{count(len(self.sample_digests), 'feed')} of {shapes}, digest {self.digest[:12]}"


def find_kit(capture: Path) -> Path | None:
    """The manifest of the kit a capture was made from: in the capture's folder (a folder capture: in it), or the
    folder above."""
    here = capture if capture.is_dir() else capture.parent
    for folder in (here, here.parent, here.parent.parent):
        if (folder / MANIFEST).is_file():
            return folder / MANIFEST
    return None


def read_kit(manifest: Path) -> Kit:
    try:
        doc = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{manifest}: not a readable kit manifest ({exc})") from None
    try:
        if doc.get("trtverify_kit") != KIT_FORMAT:
            raise KeyError("trtverify_kit")
        kit = Kit(
            folder=manifest.parent,
            reference=str(doc["reference"]),
            digest=str(doc["digest"]),
            sample_digests=[str(d) for d in doc["sample_digests"]],
            inputs=[
                {"name": str(i["name"]), "shape": [int(x) for x in i["shape"]], "dtype": str(i["dtype"])}
                for i in doc["inputs"]
            ],  # fmt: skip
            inputs_file=manifest.parent / str(doc["files"]["npz"]),
            batch_size=int(doc.get("batch_size", 1)),
            consistency=tuple(_consistency(doc.get("consistency", {}).get("feeds", []))),
            not_possible={str(k): str(v) for k, v in doc.get("consistency", {}).get("not_possible", {}).items()},
            capture_digest=str(doc.get("capture_digest", "")),
            reference_sha256=str(doc.get("reference_sha256", "")),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        why = f"not a trtverify kit manifest (format {KIT_FORMAT}): bad or missing {exc}"
        raise UsageError(f"{manifest}: {why}") from None
    if feeds_digest(kit.sample_digests) != kit.digest or (
        kit.consistency
        and feeds_digest(kit.sample_digests + [c["digest"] for c in kit.consistency]) != kit.capture_digest
    ):
        raise UsageError(f"{manifest}: its digest does not match its feeds' digests (the file was edited)")
    return kit


def _consistency(entries: Any) -> list[dict[str, Any]]:
    """The consistency feeds of a manifest, checked: role, iteration, rows, digest (KeyError/TypeError otherwise)."""
    out = []
    for e in entries:
        dup = [int(r) for r in e.get("duplicated_rows", [])]
        entry = {"role": str(e["role"]), "iteration": int(e["iteration"]), "rows": int(e["rows"]),
                 "digest": str(e["digest"]), "duplicated_rows": dup}  # fmt: skip
        if entry["role"] not in ("repeat", "duplicated_row", "repeated_batch"):
            raise ValueError(f"consistency role {entry['role']!r}")
        out.append(entry)
    return out


__all__ = ["KIT_FORMAT", "MANIFEST", "Kit", "feed_digest", "feeds_digest", "find_kit", "read_kit"]
