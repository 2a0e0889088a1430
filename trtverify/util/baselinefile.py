"""The one store of baselines: `<reference dir>/<suite>/<stage>/baseline.json`, written only by
`trtverify run --update-baseline` (atomically; JSON, never pickle). Each stage that gates on a baseline (perf:
`trtverify/perf/baseline.py`; e2e and layerwise: `trtverify/stages/baseline.py`) keeps what its entries hold; the
file, its format, its size limit and its errors are here, once."""

from __future__ import annotations

import datetime as _dt
import json
from pathlib import Path
from typing import Any

from trtverify.util.errors import UsageError
from trtverify.util.fsutil import FileTooLarge, atomic_write_json, read_capped

FORMAT = 1
FILE = "baseline.json"
FLAG = "trtverify run --update-baseline"
MAX_BYTES = 16 << 20


def path_for(root: Path, suite: str, stage: str) -> Path:
    """Beside the stored references (--reference-dir moves it with them)."""
    return Path(root) / suite / stage / FILE


def now() -> str:
    """This moment, UTC, ISO 8601 to the second: when an entry or a file was written."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def load(path: Path, what: str) -> dict[str, Any] | None:
    """The stored baseline document ({format, suite, rows}), None when there is none; a damaged file is an error
    naming it (`what`: the kind of baseline, in words)."""
    if not path.exists():
        return None
    again = f"remove it or rewrite it with {FLAG}"
    try:
        data = json.loads(read_capped(path, MAX_BYTES).decode("utf-8"))
    except FileTooLarge:
        raise UsageError(f"{path}: larger than {MAX_BYTES >> 20} MB: not a trtverify baseline; {again}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{path}: unreadable baseline ({exc}); {again}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("rows"), dict):
        raise UsageError(f"{path}: not a trtverify {what} baseline (format {FORMAT}); {again}")
    return data


def save(path: Path, suite: str, rows: dict[str, dict[str, Any]], *, keep: bool, created: bool = False) -> None:
    """Write `rows` (key -> entry); `keep`: with the stored rows of other keys (another shape of a sweep) where the
    file is this suite's; `created`: stamped with when it was written."""
    old = load(path, path.parent.name) if keep and path.exists() else None
    merged = dict(old["rows"]) if old is not None and old.get("suite") == suite else {}
    merged.update(rows)
    doc: dict[str, Any] = {"format": FORMAT, "suite": suite}
    if created:
        doc["created"] = now()
    doc["rows"] = dict(sorted(merged.items()))
    atomic_write_json(path, doc)
