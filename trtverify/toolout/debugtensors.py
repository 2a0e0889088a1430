"""trtexec's debug tensors, read back: what `trtexec --markDebug=T,... / --markUnfusedTensorsAsDebugTensors` with
`--saveAllDebugTensors=numpy|raw|summary` (and `--saveDebugTensors=T:FILE`) writes, in the folder trtexec ran in.

The layouts follow TensorRT's samples/common/debugTensorWriter.cpp (TensorRT 10.12 to 10.13 and later, unchanged
since), class `DebugTensorWriter`:

- `processDebugTensor`: each debug tensor of each enqueue gets the prefix `NNNN_` (`mTensorIndex`, 4 digits, counted
  across enqueues: trtexec's warm-up and timing runs write the tensors again with the next indices), then
  `NNNN_NAME.raw` (format `raw`: the tensor's bytes in its TensorRT type, no header) and, for `--saveDebugTensors`,
  the bytes alone in the file named (no prefix); names pass through `genFilenameSafeString` (samples/common/common.h:
  every character but letters, digits and `._-,` becomes `_`; a name over 150 characters keeps its first and last 73
  around `...`);
- `writeNumpy` / `writeNumpyFile`: `NNNN_NAME.npy`, an npy 1.0 file of the TensorRT type (`<f4`, `<f2`, `<i1`,
  `<i4`, `<i8`, `|u1`, `|b1`); BF16 and FP8 (FP4) are converted to float32 and named `NNNN_NAME_to_float.npy`, INT4
  to int8 `NNNN_NAME_to_int8.npy`;
- `writeSummary` / `processTensorSummary`: `tensor_summary.json`, `{"metadata": {"title": "Tensor Summary Report",
  ...}, "tensors": [{"name", "shape", "type" (FLOAT, HALF, BF16, INT8, ...), "statistics": {"min", "max", "avg",
  "elements": "first 5, ..., last 5"}, "files": {"assigned", "numpy", "string", "raw"}}]}` in enqueue order; a
  float tensor's min and max skip NaN (`std::min`), its avg is the sum over every element / volume, a non-finite value
  is written as a string ("nan", "inf").

A raw file carries no shape or type: they are read from the summary's entry that names the file (`files.raw` /
`files.assigned`); raw files without a summary are refused. A tensor with only its summary entry is compared by its
statistics (min, max, avg and the 10 elements written). Several enqueues: the tensors of the first are read (every
enqueue of trtexec runs the one feed it loaded), and how many were written is said.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.util.errors import UsageError
from trtverify.util.words import count

SUMMARY = "tensor_summary.json"
_FILE = re.compile(r"^(?P<index>\d{4,})_(?P<name>.+?)(?P<conv>_to_float|_to_int8)?\.(?P<ext>npy|raw)$")
# TensorRT DataType names in the summary (getDataTypeString) -> the numpy type of their raw bytes
RAW_TYPES: dict[str, str] = {
    "FLOAT": "<f4", "HALF": "<f2", "BF16": "bfloat16", "FP8": "float8_e4m3fn", "INT8": "<i1", "UINT8": "|u1",
    "INT32": "<i4", "INT64": "<i8", "BOOL": "|b1",
}  # fmt: skip
_SAFE_MAX, _SAFE_HALF = 150, (150 - 3) // 2


def safe_name(name: str) -> str:
    """A tensor name as trtexec writes it into a file name (`genFilenameSafeString`, samples/common/common.h)."""

    def keep(s: str) -> str:
        return "".join(c if (c.isascii() and c.isalnum()) or c in "._-," else "_" for c in s)

    if len(name) <= _SAFE_MAX:
        return keep(name)
    return keep(name[:_SAFE_HALF]) + "..." + keep(name[-_SAFE_HALF:])


@dataclass(frozen=True)
class TensorStats:
    """One tensor's statistics as `processTensorSummary` writes them."""

    shape: tuple[int, ...]
    type: str
    min: float
    max: float
    avg: float
    first: tuple[float, ...]  # the first elements written (up to 5)
    last: tuple[float, ...]  # the last elements written (up to 5, none where the tensor has <= 5)


def stats_of(arr: np.ndarray) -> tuple[float, float, float, tuple[float, ...], tuple[float, ...]]:
    """(min, max, avg, first, last) of `arr` computed the way `processTensorSummary` computes them: min and max skip
    NaN (an all-NaN tensor keeps FLT_MAX / -FLT_MAX), avg is the float64 sum over every element / volume."""
    flat = np.asarray(arr).reshape(-1)
    if flat.dtype.kind == "b":
        flat = flat.astype(np.int64)
    f = flat.astype(np.float64)
    fin = f[~np.isnan(f)]
    big = float(np.finfo(np.float32).max)
    lo = float(fin.min()) if fin.size else big
    hi = float(fin.max()) if fin.size else -big
    avg = float(f.sum() / f.size) if f.size else float("nan")
    n = f.size
    first = tuple(float(v) for v in f[: min(5, n)])
    last = tuple(float(v) for v in f[n - (5 if n > 10 else max(0, n - 5)) :]) if n > 5 else ()
    return lo, hi, avg, first, last


def is_debug_folder(folder: Path) -> bool:
    """Whether a folder holds trtexec debug tensors (its summary, or `NNNN_NAME.npy|raw` files only)."""
    if (folder / SUMMARY).is_file():
        return True
    files = [f for f in folder.iterdir() if f.suffix in (".npy", ".raw")]
    return bool(files) and all(_FILE.match(f.name) for f in files)


def is_summary(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("tensors"), list) and isinstance(doc.get("metadata"), dict)


def _number(path: Path, where: str, v: Any) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise UsageError(f"{path}: {where}: {v!r} is not a number")
    try:
        return float(v)  # the writer quotes non-finite floats: "nan", "-nan", "inf", "-inf"
    except ValueError:
        raise UsageError(f"{path}: {where}: {v!r} is not a number") from None


def _elements(path: Path, where: str, text: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if text is None:
        return (), ()
    if not isinstance(text, str):
        raise UsageError(f"{path}: {where}: 'elements' is not a string like \"1, 2, ..., 9\"")
    head, _, tail = text.partition("...")
    parts = [[p.strip() for p in s.split(",") if p.strip()] for s in (head, tail)]
    first, last = ([_number(path, f"{where}: elements", p) for p in ps] for ps in parts)
    if not tail and len(first) > 5:  # 6 to 10 elements: no ellipsis, the first 5 then the rest
        first, last = first[:5], first[5:]
    return tuple(first), tuple(last)


@dataclass
class Entry:
    """One summary entry: a tensor of one enqueue."""

    name: str
    stats: TensorStats | None
    files: dict[str, str]


def read_summary(path: Path, doc: dict[str, Any]) -> list[Entry]:
    out = []
    for k, t in enumerate(doc["tensors"]):
        where = f"tensors[{k}]"
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise UsageError(f"{path}: {where}: expected {{'name', 'shape', 'type', 'statistics', 'files'}}")
        where = f"tensor '{t['name']}' ({where})"
        shape, ttype, st = t.get("shape"), t.get("type"), t.get("statistics")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):  # fmt: skip
            raise UsageError(f"{path}: {where}: 'shape' {shape!r} is not a list of sizes")
        if not isinstance(ttype, str):
            raise UsageError(f"{path}: {where}: no 'type' (FLOAT, HALF, ...)")
        files = t.get("files", {})
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            raise UsageError(f"{path}: {where}: 'files' is not a mapping of file names")
        stats = None
        if isinstance(st, dict) and all(k in st for k in ("min", "max", "avg")):
            first, last = _elements(path, where, st.get("elements"))
            stats = TensorStats(tuple(shape), ttype, *(_number(path, f"{where}: {k}", st[k])
                                                       for k in ("min", "max", "avg")), first, last)  # fmt: skip
        elif st is not None and st != {}:
            raise UsageError(f"{path}: {where}: 'statistics' without min, max and avg")
        out.append(Entry(t["name"], stats, dict(files)))
    return out


def _raw(f: Path, ttype: str, shape: tuple[int, ...]) -> np.ndarray:
    dtype = RAW_TYPES.get(ttype)
    if dtype is None:
        raise UsageError(f"{f}: type {ttype} is not read (raw files of {', '.join(RAW_TYPES)} are)")
    if dtype in ("bfloat16", "float8_e4m3fn"):
        import ml_dtypes  # shipped with onnx

        np_dtype = np.dtype(getattr(ml_dtypes, dtype))
    else:
        np_dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * np_dtype.itemsize if shape else np_dtype.itemsize
    got = f.stat().st_size
    if got != size:
        raise UsageError(f"{f}: {count(got, 'byte')}, but {ttype} {list(shape)} takes {size}: truncated, or not this "
                         "tensor's file")  # fmt: skip
    arr = (
        np.memmap(f, dtype=np_dtype, mode="r", shape=shape or (1,)).reshape(shape)
        if size
        else np.zeros(shape, np_dtype)
    )
    return arr.astype(np.float32) if dtype in ("bfloat16", "float8_e4m3fn") else arr


def read_debug_folder(
    folder: Path, summary: Path | None, known: Iterable[str], load_npy: Callable[[Path], np.ndarray], read_json: Any
) -> tuple[dict[str, Callable[[], np.ndarray]], dict[str, tuple[int, ...]], dict[str, TensorStats], str]:
    """(array getters, their shapes, statistics-only tensors, a note) of the first enqueue's debug tensors in
    `folder`. `known`: the model's tensor names, to give file names their tensor's name back (`safe_name`)."""
    by_safe: dict[str, str] = {}
    for n in known:
        by_safe.setdefault(safe_name(n), n)
    summary = summary or (folder / SUMMARY if (folder / SUMMARY).is_file() else None)
    files: dict[int, tuple[str, Path]] = {}  # index -> (safe name, file): numpy wins over raw
    for f in sorted(folder.iterdir()):
        m = _FILE.match(f.name)
        if m is None:
            continue
        idx = int(m.group("index"))
        if m.group("ext") == "npy" or idx not in files:
            files[idx] = (m.group("name"), f)
    tensors: dict[str, Callable[[], np.ndarray]] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    stats: dict[str, TensorStats] = {}
    seen: dict[str, int] = {}  # name -> times written (once per enqueue)
    if summary is not None:
        doc = read_json(summary)
        if not is_summary(doc):
            raise UsageError(f"{summary}: not a trtexec tensor summary ({{'metadata': ..., 'tensors': [...]}})")
        entries = read_summary(summary, doc)
        if not entries:
            raise UsageError(f"{summary}: lists no tensors")
        for idx, e in enumerate(entries):
            seen[e.name] = seen.get(e.name, 0) + 1
            if seen[e.name] > 1 or max(seen.values()) > 1:  # a later enqueue's
                continue
            _take(folder, summary, idx, e, files, tensors, shapes, stats, load_npy)
    else:
        raws = [f for _, f in files.values() if f.suffix == ".raw"]
        if raws:
            raise UsageError(f"{raws[0]}: a raw debug tensor has no shape or type; trtexec writes them into {SUMMARY}: "
                             "save with --saveAllDebugTensors=raw,summary (or numpy)")  # fmt: skip
        for idx in sorted(files):
            stem, f = files[idx]
            name = by_safe.get(stem, stem)
            seen[name] = seen.get(name, 0) + 1
            if max(seen.values()) > 1:  # a later enqueue's
                continue
            arr = load_npy(f)
            tensors[name] = lambda f=f: load_npy(f)
            shapes[name] = arr.shape
    if not tensors and not stats:
        raise UsageError(f"{folder}: no debug tensors (NNNN_NAME.npy, or {SUMMARY} with raw files or statistics)")
    enqueues = max(seen.values(), default=1)
    note = f"{count(enqueues, 'enqueue')} written, the first read" if enqueues > 1 else ""
    return tensors, shapes, stats, note


def _take(
    folder: Path,
    summary: Path,
    idx: int,
    e: Entry,
    files: dict[int, tuple[str, Path]],
    tensors: dict[str, Callable[[], np.ndarray]],
    shapes: dict[str, tuple[int, ...]],
    stats: dict[str, TensorStats],
    load_npy: Callable[[Path], np.ndarray],
) -> None:
    """The tensor of summary entry `idx`: from its numpy file, else its raw or assigned file, else its statistics."""
    named = {k: folder / v for k, v in e.files.items() if k in ("numpy", "raw", "assigned")}
    npy = named.get("numpy") or (files[idx][1] if idx in files and files[idx][1].suffix == ".npy" else None)
    raw = named.get("raw") or named.get("assigned")
    if raw is None and idx in files and files[idx][1].suffix == ".raw":
        raw = files[idx][1]
    shape = e.stats.shape if e.stats else None
    if npy is not None and npy.is_file():
        arr = load_npy(npy)
        if shape is not None and tuple(arr.shape) != shape:
            raise UsageError(f"{npy}: shape {list(arr.shape)}, but {summary} says {list(shape)} for '{e.name}'")
        tensors[e.name] = lambda f=npy: load_npy(f)
        shapes[e.name] = arr.shape
    elif raw is not None and raw.is_file():
        if e.stats is None:
            raise UsageError(f"{summary}: tensor '{e.name}' has no statistics, so no shape for its raw file {raw}")
        _raw(raw, e.stats.type, e.stats.shape)  # size checked now
        tensors[e.name] = lambda f=raw, s=e.stats: _raw(f, s.type, s.shape)
        shapes[e.name] = e.stats.shape
    elif npy is not None or raw is not None:
        missing = npy if npy is not None else raw
        raise UsageError(f"{summary}: tensor '{e.name}': its file {missing} is missing (copy the whole folder trtexec "
                         "wrote)")  # fmt: skip
    elif e.stats is not None:
        stats[e.name] = e.stats
    else:
        raise UsageError(f"{summary}: tensor '{e.name}' has neither statistics nor a file")


__all__ = ["SUMMARY", "TensorStats", "is_debug_folder", "is_summary", "read_debug_folder", "safe_name", "stats_of"]
