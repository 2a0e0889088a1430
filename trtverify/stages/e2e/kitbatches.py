"""A capture kit's validation batches (`trtverify capture REF --suite S`, docs/captured.md): the rows of the suite's
e2e dataset, preprocessed and batched exactly as stage e2e feeds them, written for the target's tools, and read
back to tell which captured iteration is which batch.

Written under KIT/e2e/, streamed batch by batch (nothing holds the whole set): `inputs.json` (Polygraphy
`--load-inputs`, one feed per batch, each an iteration of `polygraphy run`), `trtexec/NAME.K.bin` (batch K's raw
values) with `trtexec.sh` (one trtexec run per batch), `inputs.npz` (the rows, unpadded). The manifest's `e2e`
section lists each batch's dataset positions, the dataset's ids and the sha256 digest of its feed.

Batches: stage e2e's `batch_size`, the last one short; where the model declares a fixed batch size N, batches of N,
the last one padded with copies of its last row (its `pad` rows; their outputs are dropped when read back). An
input declared without a batch axis (torchvision's detectors) is fed one image at a time, as the stage feeds it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

from trtverify.config.loader import LoadedSuite
from trtverify.config.registry import TASKS
from trtverify.data.kit import b64_npy, named_kit, shell_dq
from trtverify.graph.onnxinfo import TensorMeta, graph_io, load_io
from trtverify.tasks.batches import batches, default_workers, make_preprocess
from trtverify.toolout.captures import escape_name
from trtverify.toolout.kit import MANIFEST, feed_digest, feeds_digest
from trtverify.util.errors import UsageError
from trtverify.util.fsutil import atomic_write_json, atomic_write_text
from trtverify.util.words import count

FOLDER = "e2e"


def fixed_batch(meta: TensorMeta, ndim: int) -> int | None:
    """The batch size the model declares for this input (its first dimension, fixed), else None."""
    if meta.shape is None or len(meta.shape) != ndim or not meta.shape:
        return None
    first = meta.shape[0]
    return first if isinstance(first, int) and first > 0 else None


def model_feed(x: np.ndarray, meta: TensorMeta) -> tuple[np.ndarray, int]:
    """A batch of preprocessed rows as the model is fed it, and how many rows were padded: one image without its
    batch axis where the input has none (as stage e2e feeds it); a short batch of a fixed-batch model padded with
    copies of its last row."""
    if meta.shape is not None and len(meta.shape) == x.ndim - 1 and len(x) == 1:
        return x[0], 0
    n = fixed_batch(meta, x.ndim)
    if n is not None and len(x) < n:
        return np.concatenate([x, np.repeat(x[-1:], n - len(x), axis=0)]), n - len(x)
    return x, 0


def input_meta(model: Path, name: str | None) -> TensorMeta:
    inputs, _ = graph_io(load_io(model))
    meta = next((m for m in inputs if m.name == name), None) if name is not None else inputs[0]
    if meta is None:
        raise UsageError(f"stages.e2e.preprocess.input: '{name}' is not an input of {model.name}")
    return meta


def _id(v: Any) -> int | str:
    if isinstance(v, (bool, np.bool_)):
        return str(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    return str(v)


class _NpyStream:
    """One array of `rows` rows written into an open .npz as its batches come (header first, then the bytes)."""

    def __init__(self, zf: zipfile.ZipFile, key: str, rows: int, first: np.ndarray):
        self.row_shape, self.dtype = first.shape[1:], first.dtype
        self.fh: IO[bytes] = zf.open(f"{key}.npy", "w", force_zip64=True)
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                  "shape": (rows, *self.row_shape)}  # fmt: skip
        np.lib.format.write_array_header_2_0(self.fh, header)

    def write(self, x: np.ndarray, where: str) -> None:
        if x.shape[1:] != self.row_shape or x.dtype != self.dtype:
            raise UsageError(f"{where}: rows of shape {list(x.shape[1:])} {x.dtype}, the first batch's are "
                             f"{list(self.row_shape)} {self.dtype}: a kit holds rows of one shape (set "
                             "stages.e2e.preprocess.resize)")  # fmt: skip
        self.fh.write(np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("<")).tobytes())


def write_batches(out: Path, loaded: LoadedSuite, reference: Path) -> dict[str, Any]:
    """Write the suite's validation batches into `out`/e2e (through a partial folder moved in at the end: a failure
    leaves no half kit, and captures already in `out`/e2e stay); returns the manifest's `e2e` section."""
    cfg = loaded.suite.stages.e2e
    if cfg is None:
        raise UsageError(f"{loaded.path}: has no stage e2e: no validation batches to write (--suite is for them)")
    if cfg.batch_sizes is not None:
        raise UsageError(f"{loaded.path}: stages.e2e.batch_sizes (a sweep): a kit holds one batching; give batch_size")
    reader = TASKS.load(cfg.task).open(cfg, loaded.search_path).reader
    meta = input_meta(reference, cfg.preprocess.input)
    name = meta.name
    total = len(reader)
    if not total:
        raise UsageError(f"{loaded.path}: stages.e2e.dataset holds no samples")
    pre = make_preprocess(cfg.preprocess, loaded.search_path)
    first = pre(reader.image(0))[None]
    fixed = fixed_batch(meta, first.ndim)
    size = fixed if fixed is not None else cfg.batch_size
    no_axis = meta.shape is not None and len(meta.shape) == first.ndim - 1
    if no_axis:
        size = 1
    final = out / FOLDER
    part = out / f".{FOLDER}.partial"
    shutil.rmtree(part, ignore_errors=True)
    (part / "trtexec").mkdir(parents=True)
    rows: list[dict[str, Any]] = []
    shapes: list[tuple[int, ...]] = []  # each batch's feed shape
    stem = escape_name(name)
    try:
        with (
            open(part / "inputs.json", "w", encoding="ascii") as pg,
            zipfile.ZipFile(part / "inputs.npz", "w", allowZip64=True) as zf,
        ):
            pg.write("[")
            npy: _NpyStream | None = None
            for k, batch in enumerate(batches(reader, range(total), size, pre, default_workers(cfg.workers))):
                x = batch.inputs
                if npy is None:
                    npy = _NpyStream(zf, name, total, x)
                npy.write(x, f"{loaded.path}: stages.e2e.dataset, batch {k}")
                feed, pad = model_feed(x, meta)
                arr = np.ascontiguousarray(feed, dtype=feed.dtype.newbyteorder("<"))
                pg.write((", " if k else "") + json.dumps({name: {"array": b64_npy(arr), "polygraphy_class":
                                                                 "ndarray"}}))  # fmt: skip
                (part / "trtexec" / f"{stem}.{k}.bin").write_bytes(arr.tobytes())
                shapes.append(tuple(feed.shape))
                rows.append({"rows": list(batch.index), "ids": [_id(reader.ids[i]) for i in batch.index], "pad": pad,
                             "digest": feed_digest({name: feed})})  # fmt: skip
            pg.write("]")
            assert npy is not None
            npy.fh.close()
        script = _trtexec_script(reference, name, stem, shapes)
        atomic_write_text(part / "trtexec.sh", script)
        os.chmod(part / "trtexec.sh", 0o755)
        final.mkdir(exist_ok=True)
        for item in ("inputs.json", "inputs.npz", "trtexec.sh", "trtexec"):  # what else is there (captured/) stays
            if (final / item).is_dir():
                shutil.rmtree(final / item)
            os.replace(part / item, final / item)
    finally:
        shutil.rmtree(part, ignore_errors=True)
    padded = sum(r["pad"] for r in rows)
    short = len(rows[-1]["rows"]) < size
    if no_axis:
        batching = "one image per feed (the input has no batch axis)"
    elif padded:
        batching = (
            f"fixed batch {size} (the model's): the last batch padded with {count(padded, 'copy')} of its last row"
        )
    elif short:
        batching = (
            f"batches of {size} (stages.e2e.batch_size), the last one short ({count(len(rows[-1]['rows']), 'row')})"
        )
    else:
        batching = f"batches of {size}" + (" (the model's fixed batch)" if fixed else "")
    if size != cfg.batch_size:  # stage e2e must batch as the kit does
        batching += f"; stages.e2e.batch_size is {cfg.batch_size}: set it to {size} to compare the capture"
    return {
        "suite": loaded.suite.name,
        "task": cfg.task,
        "dataset": reader.info.get("source"),
        "input": name,
        "batch_size": size,
        "batch_axis": not no_axis,  # the outputs' first axis is the batch's rows where named (not fixed)
        "batching": batching,
        "rows": total,
        "digest": feeds_digest([r["digest"] for r in rows]),
        "files": {
            "polygraphy": f"{FOLDER}/inputs.json",
            "npz": f"{FOLDER}/inputs.npz",
            "trtexec": f"{FOLDER}/trtexec.sh",
        },  # fmt: skip
        "batches": rows,
    }


def _trtexec_script(reference: Path, name: str, stem: str, shapes: Sequence[tuple[int, ...]]) -> str:
    lines = [
        "#!/bin/sh",
        "# One trtexec run per validation batch (trtexec runs one feed). Run it in the kit's folder with the engine",
        f"# built once from {reference.name}, e.g. trtexec --onnx=../{reference.name} --saveEngine=model.engine",
        "# (a dynamic batch axis needs --minShapes/--optShapes/--maxShapes up to the batch size).",
        "set -e",
        'ENGINE="${ENGINE:-model.engine}"',
        "mkdir -p e2e/captured/trtexec",
    ]
    for k, shape in enumerate(shapes):
        load = shell_dq(f"--loadInputs='{name}':e2e/trtexec/{stem}.{k}.bin")
        dims = shell_dq(f"--shapes='{name}':{'x'.join(map(str, shape))}")
        lines.append(f'trtexec --loadEngine="$ENGINE" {load} {dims} --exportOutput=e2e/captured/trtexec/{k}.json')
    return "\n".join(lines) + "\n"


def readme(reference: Path, section: dict[str, Any], meta: TensorMeta) -> str:
    """The README's section on the validation batches."""
    ref = shlex.quote(f"../{reference.name}")
    name, size = section["input"], section["batch_size"]
    dynamic = meta.shape is not None and meta.shape and not isinstance(meta.shape[0], int)
    profile = ""
    if dynamic:
        rest = "" if meta.shape is None else ",".join(str(d) for d in meta.shape[1:])
        lo, hi = f"[1,{rest}]", f"[{size},{rest}]"
        profile = (f" --trt-min-shapes {shlex.quote(f'{name}:{lo}')} --trt-opt-shapes {shlex.quote(f'{name}:{hi}')}"
                   f" --trt-max-shapes {shlex.quote(f'{name}:{hi}')}")  # fmt: skip
    n = len(section["batches"])
    return f"""
## Validation batches (stage e2e of suite {section["suite"]})

{count(section["rows"], "row")} of the e2e dataset in {count(n, "batch")}: {section["batching"]}. Each
batch is one feed of `e2e/inputs.json` (one iteration of `polygraphy run`), one raw file per batch
`e2e/trtexec/{escape_name(name)}.K.bin`, and all rows (unpadded) in `e2e/inputs.npz`; manifest.json lists each
batch's dataset positions and ids, and its digest.

    mkdir -p e2e/captured
    polygraphy run {ref} --trt{profile} --load-inputs e2e/inputs.json --save-outputs e2e/captured/outputs.json

Add `--fp16` (or the precision you deploy) as you build the engine. Then, here, name the file in the suite:
`captured: KIT/e2e/captured/outputs.json` for a candidate of stage e2e. `e2e/trtexec.sh` runs trtexec once per
batch (an engine built beforehand) into `e2e/captured/trtexec/K.json`: name that folder as the capture.
"""


def add_batches(kit: Path, loaded: LoadedSuite, reference: Path) -> dict[str, Any]:
    """Add the suite's validation batches to the kit in `kit` (its manifest gets the `e2e` section, its README the
    commands); returns the section."""
    section = write_batches(kit, loaded, reference)
    text = (kit / "README.md").read_text(encoding="utf-8").replace(", no validation batches for e2e.", ".")
    text = text.replace("\n## Not in this kit yet\n\nNo validation batches for e2e.\n", "")  # the kit's own README
    text += named_kit(readme(reference, section, input_meta(reference, section["input"])), kit)
    manifest = kit / MANIFEST
    doc = json.loads(manifest.read_text(encoding="utf-8"))
    doc["e2e"] = section
    atomic_write_json(manifest, doc)
    atomic_write_text(kit / "README.md", text)
    return section


__all__ = ["FOLDER", "add_batches", "fixed_batch", "input_meta", "model_feed", "readme", "write_batches"]
