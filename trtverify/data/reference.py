"""The reference store: `reference_outputs/<suite>/<kind>/` with inputs.npz, outputs.npz, manifest.json.

A stored reference is used only when everything it depends on (model files, inputs, the
relevant configuration) hashes the same as now. Otherwise it is reported stale, with the
reason, and not used. Files are written atomically, the manifest last; the manifest records
the sha256 of each npz so a half-finished update is detected as corrupt, never used.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import io
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.util.fsutil import atomic_write, atomic_write_json, sha256_file

FORMAT = 1
Samples = list[dict[str, np.ndarray]]


def hash_samples(samples: Samples) -> str:
    """Content hash of a list of feed dicts (names, dtypes, shapes and bytes, in order)."""
    h = hashlib.sha256()
    for i, feed in enumerate(samples):
        h.update(f"sample {i}\n".encode())
        for name in sorted(feed):
            arr = np.ascontiguousarray(feed[name])
            h.update(f"{name}|{arr.dtype.str}|{arr.shape}\n".encode())
            h.update(arr.tobytes())
    return h.hexdigest()


def _pack(samples: Samples) -> tuple[bytes, list[dict[str, str]]]:
    """npz bytes with keys a0, a1, ... and the index mapping sample/name to key (names may hold any character)."""
    arrays: dict[str, np.ndarray] = {}
    index: list[dict[str, str]] = []
    for feed in samples:
        entry = {}
        for name, arr in feed.items():
            key = f"a{len(arrays)}"
            arrays[key] = np.asarray(arr)
            entry[name] = key
        index.append(entry)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    return buf.getvalue(), index


def _unpack(path: Path, index: list[dict[str, str]]) -> Samples:
    with np.load(path, allow_pickle=False) as npz:
        return [{name: npz[key] for name, key in entry.items()} for entry in index]


@dataclass
class Lookup:
    """Outcome of looking for a stored reference."""

    state: str  # "valid" | "missing" | "stale" | "corrupt"
    folder: Path
    reasons: list[str] = field(default_factory=list)
    inputs: Samples | None = None
    outputs: Samples | None = None
    manifest: dict[str, Any] | None = None


class ReferenceStore:
    def __init__(self, root: Path, suite: str):
        self.root = Path(root)
        self.suite = suite

    def folder(self, kind: str) -> Path:
        return self.root / self.suite / kind

    def lookup(self, kind: str, depends: dict[str, str]) -> Lookup:
        folder = self.folder(kind)
        mpath = folder / "manifest.json"
        if not mpath.exists():
            return Lookup("missing", folder, [f"no stored reference in {folder}"])
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
            if manifest.get("format") != FORMAT:
                return Lookup("stale", folder, [f"store format {manifest.get('format')} != {FORMAT}"])
            for fname, digest in manifest["files"].items():
                fpath = folder / fname
                if not fpath.exists() or sha256_file(fpath) != digest:
                    return Lookup("corrupt", folder, [f"{fpath} does not match its manifest (interrupted update?)"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return Lookup("corrupt", folder, [f"{mpath}: unreadable manifest ({exc})"])
        old = manifest.get("depends", {})
        reasons = []
        for key in sorted(set(old) | set(depends)):
            if old.get(key) != depends.get(key):
                if key not in old:
                    reasons.append(f"{key}: new dependency")
                elif key not in depends:
                    reasons.append(f"{key}: no longer a dependency")
                else:
                    reasons.append(f"{key} changed (stored {str(old[key])[:12]}, now {str(depends[key])[:12]})")
        if reasons:
            return Lookup("stale", folder, reasons, manifest=manifest)
        try:
            inputs = _unpack(folder / "inputs.npz", manifest["inputs"])
            outputs = _unpack(folder / "outputs.npz", manifest["outputs"])
        except Exception as exc:  # damaged arrays (BadZipFile, EOFError, zlib.error, ...): corrupt, never used
            return Lookup("corrupt", folder, [f"{folder}: unreadable arrays ({exc})"])
        return Lookup("valid", folder, [], inputs, outputs, manifest)

    def save(
        self, kind: str, depends: dict[str, str], inputs: Samples, outputs: Samples, versions: dict[str, str]
    ) -> Path:
        folder = self.folder(kind)
        folder.mkdir(parents=True, exist_ok=True)
        files = {}
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "suite": self.suite,
            "kind": kind,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "depends": dict(sorted(depends.items())),
            "versions": versions,
            "samples": len(inputs),
        }
        for fname, samples in (("inputs.npz", inputs), ("outputs.npz", outputs)):
            data, index = _pack(samples)
            atomic_write(folder / fname, lambda fh, d=data: fh.write(d))
            files[fname] = hashlib.sha256(data).hexdigest()
            manifest[fname.split(".")[0]] = index
        manifest["files"] = files
        atomic_write_json(folder / "manifest.json", manifest)  # last: only now is the new reference valid
        return folder
