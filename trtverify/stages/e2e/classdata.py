"""The per-class data of an e2e result with many classes, in a file beside results.json.

Inline, a 1000-class classifier's per-class rows and 1000 x 1000 confusion matrix per model made results.json
54 MB (3 million lines) for a reference and two candidates on 128 images. Above INLINE_CLASSES classes (or
detection categories), every model's per-class rows and confusion matrix go to one numpy .npz file beside
results.json instead; results.json names it (`class_data`: file name, sha256, the arrays' shapes) and keeps, per
candidate, the WORST_CLASSES classes whose value dropped most and the confusions that grew most: what the report
shows.

The file holds plain arrays, no pickled objects (`np.load(path, allow_pickle=False)` reads it), and its bytes
depend on the arrays alone (fixed member timestamps), so merged shards write the very file the unsharded run
writes. Its arrays, for M models and C classes:

- `models` [M]: the models' names, reference first, in the order of every per-model array's first axis;
- the class key [C] (`class`, detection: `category_id`) and `name` [C];
- every other per-class field [M, C]: `precision`, `recall`, `f1`, `support` (classification), `iou`,
  `accuracy`, `support`, `predicted` (segmentation), `ap`, `ap50`, ... (detection);
- `confusion` [M, C, C] where the task has one (rows: true class, columns: predicted class).
"""

from __future__ import annotations

import hashlib
import io
import math
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import Field

from trtverify.tasks.base import TaskMetrics
from trtverify.util.errors import UsageError
from trtverify.util.record import Record

INLINE_CLASSES = 100  # above this many classes, the per-class data goes to the class-data file
WORST_CLASSES = 20  # classes that dropped most, and confusions that grew most, listed inline per candidate
CLASS_FILE = "e2e-classes.npz"
_MOVED = ("per_class", "confusion")  # the task metrics' fields the file holds instead of results.json


class ClassData(Record):
    """The per-class data of a task with more than INLINE_CLASSES classes, in a numpy .npz beside results.json."""

    path: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*\.npz$", description="the file's name, in the folder of results.json"
    )
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="of the file's bytes")
    classes: int = Field(description="how many classes (detection: categories)")
    models: list[str] = Field(description="the models, in the order of the per-model arrays' first axis")
    arrays: dict[str, list[int]] = Field(description="each array the file holds, and its shape")


def class_count(metrics: TaskMetrics) -> int:
    """How many per-class rows a model's (computed) metrics have."""
    return len(getattr(metrics, "per_class", None) or [])


def inline(metrics: TaskMetrics) -> TaskMetrics:
    """The metrics as results.json holds them when the class-data file has their per-class rows and matrix."""
    return metrics.model_copy(update={k: None for k in _MOVED if k in type(metrics).model_fields})


def _column(values: list[Any]) -> list[Any]:
    return [math.nan if v is None else v for v in values]


def class_arrays(metrics: Mapping[str, TaskMetrics]) -> dict[str, np.ndarray]:
    """The arrays of the class-data file for these models' computed metrics (reference first)."""
    tables = [[row.dump() for row in getattr(m, "per_class", None) or []] for m in metrics.values()]
    first = tables[0]
    if not first:
        raise ValueError("no per-class rows")
    key = next(iter(first[0]))  # the class index field: class, category_id
    out: dict[str, np.ndarray] = {"models": np.array(list(metrics), dtype=str)}
    for name in (key, "name"):
        values = [row[name] for row in first]
        if any([row[name] for row in table] != values for table in tables):
            raise ValueError(f"the models' per-class rows differ in '{name}'")
        out[name] = np.array(values, dtype=np.int64 if name == key else str)
    for name in first[0]:
        if name not in out:
            out[name] = np.array([_column([row[name] for row in table]) for table in tables])
    matrices = [getattr(m, "confusion", None) for m in metrics.values()]
    if all(c is not None for c in matrices):
        out["confusion"] = np.array(matrices, dtype=np.int64)
    for name, arr in out.items():
        if arr.dtype == object:
            raise ValueError(f"per-class field '{name}' is not numbers or text")
    return out


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """An .npz (what np.savez_compressed writes: deflated .npy members) whose bytes depend on the arrays alone."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def pack(metrics: Mapping[str, TaskMetrics], path: str) -> tuple[ClassData, bytes]:
    """The class-data file of these models' computed metrics (reference first): its record and its bytes."""
    arrays = class_arrays(metrics)
    data = npz_bytes(arrays)
    record = ClassData(
        path=path,
        sha256=hashlib.sha256(data).hexdigest(),
        classes=len(arrays["name"]),
        models=list(metrics),
        arrays={k: list(v.shape) for k, v in arrays.items()},
    )
    return record, data


def _drop(row: Record) -> float:
    """The row's delta_<value> (candidate - reference); NaN when undefined."""
    deltas = [v for k, v in row if k.startswith("delta_")]
    assert len(deltas) == 1, f"{type(row).__name__} has one delta_ field"
    return math.nan if deltas[0] is None else float(deltas[0])


def dropped_most(rows: Sequence[Record], n: int) -> list[Record]:
    """The `n` per-class rows whose value dropped most (delta < 0), largest drop first, ties in class order."""
    dropped = [(d, k) for k, d in enumerate(map(_drop, rows)) if d < 0]  # NaN compares False: left out
    return [rows[k] for _, k in sorted(dropped)[:n]]


def read_class_data(results: Path, record: ClassData) -> dict[str, np.ndarray]:
    """The arrays of the class-data file that the results.json at `results` names, checked against its sha256 and
    shapes; a UsageError naming the file when it is missing or not that file."""
    path = Path(results).parent / record.path
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"{path}: missing; {results} keeps its per-class data there (copy both files)") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != record.sha256:
        raise UsageError(
            f"{path}: not the file {results} names (sha256 {digest[:12]}, expected {record.sha256[:12]}); "
            "another run wrote it, or it was changed"
        )
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    shapes = {k: list(v.shape) for k, v in arrays.items()}
    if shapes != record.arrays:
        raise UsageError(f"{path}: holds {shapes}, {results} says {record.arrays}")
    return arrays
