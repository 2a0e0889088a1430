"""Reading results.json back into the typed document, with errors that say what is wrong."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trtverify.results.models import SCHEMA_VERSION, Results, document
from trtverify.util.errors import UsageError
from trtverify.util.fsutil import FileTooLarge, read_capped, sha256_file

MAX_RESULTS_BYTES = 512 * 1024 * 1024  # a results.json of a large e2e run is a few MB


def parse_results(data: Any, source: str) -> Results:
    """`data` (parsed JSON) as Results; UsageError naming `source` when it is not one this version reads."""
    if not isinstance(data, dict) or "stages" not in data or "suite" not in data:
        raise UsageError(f"{source}: not a trtverify results.json (no 'suite' and 'stages')")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UsageError(
            f"{source}: results of schema version {version!r}; this trtverify reads version {SCHEMA_VERSION} "
            "(rerun the suite with this trtverify, or use the trtverify that wrote it)"
        )
    try:
        return document().model_validate(data)
    except RecursionError:
        raise UsageError(f"{source}: not a valid results.json (nested too deeply to be one)") from None
    except ValidationError as exc:
        where = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)[:5]
        )
        raise UsageError(f"{source}: not a valid results.json ({exc.error_count()} problem(s): {where})") from None


def load_results(path: Path) -> Results:
    """The results.json at `path`; UsageError naming it when it is missing, huge, not JSON or not results."""
    path = Path(path)
    try:
        raw = read_capped(path, MAX_RESULTS_BYTES)
    except FileNotFoundError:
        raise UsageError(f"{path}: not found") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a folder, expected a results.json") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except FileTooLarge:
        limit = MAX_RESULTS_BYTES // 2**20
        raise UsageError(f"{path}: larger than {limit} MiB; not a results.json trtverify wrote") from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise UsageError(f"{path}: not a results.json (JSON nested too deeply)") from None
    return parse_results(data, str(path))


def foreign_results(folder: Path, suite: Path, sha256: str | None = None) -> str | None:
    """What a run of the suite file `suite` would replace in `folder` that is not its own: the results.json of
    another suite file ("the results of another suite file, PATH"), or one it cannot attribute to a suite file.
    None where the folder holds no results.json, or one written from this suite file: the same file however it
    was named (its path as recorded, relative to the current folder), or the same content (`sha256`, or the
    file's own where it exists), so rerunning a suite, edited or not, replaces its own results."""
    path = Path(folder) / "results.json"
    if not path.is_file():
        return None
    try:
        info = json.loads(read_capped(path, MAX_RESULTS_BYTES).decode("utf-8"))["suite"]
        recorded, digest = Path(info["path"]), str(info["sha256"])
    except (OSError, FileTooLarge, UnicodeDecodeError, ValueError, RecursionError, KeyError, TypeError):
        return f"a results.json that names no suite file ({path})"
    if sha256 is None and Path(suite).is_file():
        sha256 = sha256_file(Path(suite))
    if digest == sha256 or _same_file(recorded, Path(suite)):
        return None
    return f"the results of another suite file, {recorded}"


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them is not there (yet): compare where they point
        return a.resolve() == b.resolve()
