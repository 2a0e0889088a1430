"""Validation sets for the e2e stage: samples addressed by position.

Classification: npz arrays (images + labels), an image-folder tree (FOLDER/<class>/<file>)
or a CSV of `file,label`. Detection: COCO instances JSON plus its image folder. Segmentation:
an image folder and a folder of label images paired by file stem, or npz arrays (images + masks).
Images are uint8 HWC arrays until preprocessing (`trtverify.tasks.batches`) turns them into model input.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.config.stages import Dataset
from trtverify.deps import require
from trtverify.errors import UsageError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}


@dataclass
class Reader:
    """Samples addressed by position; `image(i)` is uint8 HWC; `label(i)` a class index (classification),
    a mask [H, W] (segmentation) or None (detection: the ground truth is `truth`)."""

    ids: list[Any]
    image: Callable[[int], np.ndarray]
    label: Callable[[int], Any]
    class_names: list[str] | None = None
    truth: Any = None  # detection ground truth, checked and indexed once (coco.GroundTruth), shared by every model
    info: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.ids)


def _read_image(path: Path) -> np.ndarray:
    pil = require("PIL.Image", "reading image files (stage e2e)")
    try:
        # one read of the whole file: PIL's chunked reads from disk cost more than the bytes
        with pil.open(io.BytesIO(Path(path).read_bytes())) as im:
            return np.asarray(im if im.mode == "RGB" else im.convert("RGB"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read image ({exc})") from exc


def _npz(ds: Dataset, masks: bool) -> Reader:
    key = ds.masks_key if masks else ds.labels_key
    try:
        data = np.load(ds.npz, allow_pickle=False)
        images = data[ds.images_key]
        labels = data[key]
    except KeyError as exc:
        raise UsageError(
            f"{ds.npz}: no array {exc} (it has: {', '.join(np.load(ds.npz, allow_pickle=False).files)})"
        ) from exc
    except ValueError as exc:
        raise UsageError(f"{ds.npz}: cannot read without pickle ({exc})") from exc
    if images.ndim == 3:
        images = images[..., None]  # N,H,W -> N,H,W,1
    elif images.ndim != 4:
        raise UsageError(
            f"{ds.npz}: '{ds.images_key}' must be [N,H,W], [N,H,W,C] or [N,C,H,W], got shape {list(images.shape)}"
        )
    layout = ds.layout or ("NCHW" if images.shape[1] in (1, 3, 4) and images.shape[-1] not in (1, 3, 4) else "NHWC")
    if layout == "NCHW":
        images = images.transpose(0, 2, 3, 1)
    if len(labels) != len(images):
        raise UsageError(f"{ds.npz}: {len(images)} images but {len(labels)} {'masks' if masks else 'labels'}")
    if masks and (labels.ndim != 3 or labels.shape[1:] != images.shape[1:3] or labels.dtype.kind not in "iu"):
        raise UsageError(
            f"{ds.npz}: '{key}' must hold integer masks [N, H, W] of the images' size {list(images.shape[1:3])}, "
            f"got {labels.dtype} {list(labels.shape)}"
        )
    n = len(images) if ds.limit is None else min(ds.limit, len(images))
    label = (lambda i: labels[i]) if masks else (lambda i: int(labels[i]))
    return Reader(
        list(range(n)), lambda i: images[i], label, ds.class_names, info={"source": str(ds.npz), "layout": layout}
    )


def read_mask(path: Path) -> np.ndarray:
    """A label image: one channel of class indices (8 or 16 bit greyscale, or a palette PNG's indices)."""
    pil = require("PIL.Image", "reading label images (stage e2e)")
    try:
        with pil.open(io.BytesIO(Path(path).read_bytes())) as im:
            if im.mode not in ("L", "P", "I;16", "I"):
                raise UsageError(f"{path}: a label image must have one channel of class indices, got mode {im.mode}")
            return np.asarray(im)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{path}: cannot read label image ({exc})") from exc


def _masks(ds: Dataset) -> Reader:
    """Segmentation: `images/<stem>.<ext>` and `masks/<stem>.png`, paired by file stem."""
    images_dir, masks_dir = Path(ds.images), Path(ds.masks)  # type: ignore[arg-type]
    images = sorted(f for f in images_dir.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES)
    masks = {f.stem: f for f in masks_dir.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES}
    missing = [f.name for f in images if f.stem not in masks]
    if missing:
        raise UsageError(
            f"{masks_dir}: no label image for {len(missing)} image(s) of {images_dir}, e.g. {', '.join(missing[:3])}"
        )
    if ds.limit:
        images = images[: ds.limit]

    def mask(i: int) -> np.ndarray:
        m = read_mask(masks[images[i].stem])
        return m

    return Reader(
        [f.name for f in images],
        lambda i: _read_image(images[i]),
        mask,
        ds.class_names,
        info={"source": str(masks_dir), "images": str(images_dir)},
    )


def _folder(ds: Dataset) -> Reader:
    root = Path(ds.folder)  # type: ignore[arg-type]
    classes = ds.class_names or sorted(p.name for p in root.iterdir() if p.is_dir())
    if not classes:
        raise UsageError(f"{root}: no class folders (expected {root}/<class name>/<image>)")
    files: list[tuple[Path, int]] = []
    for ci, name in enumerate(classes):
        folder = root / name
        if not folder.is_dir():
            raise UsageError(f"{folder}: class folder named in class_names does not exist")
        files += [(f, ci) for f in sorted(folder.iterdir()) if f.suffix.lower() in IMAGE_SUFFIXES]
    if ds.limit:
        files = files[: ds.limit]
    return Reader(
        [str(f.relative_to(root)) for f, _ in files],
        lambda i: _read_image(files[i][0]),
        lambda i: files[i][1],
        classes,
        info={"source": str(root)},
    )


def _csv(ds: Dataset) -> Reader:
    path = Path(ds.csv)  # type: ignore[arg-type]
    root = Path(ds.image_root) if ds.image_root else path.parent
    rows: list[tuple[str, str]] = []
    with open(path, newline="", encoding="utf-8") as fh:
        for lineno, row in enumerate(csv.reader(fh), start=1):
            if not row or row[0].startswith("#"):
                continue
            if len(row) < 2:
                raise UsageError(f"{path}:{lineno}: expected 'file,label', got {row!r}")
            if lineno == 1 and row[0].strip().lower() in ("file", "path", "filename", "image"):
                continue  # header
            rows.append((row[0].strip(), row[1].strip()))
    if ds.limit:
        rows = rows[: ds.limit]
    labels = [r[1] for r in rows]
    if all(lab.lstrip("-").isdigit() for lab in labels):
        index = [int(lab) for lab in labels]
        names = ds.class_names
    else:
        names = ds.class_names or sorted(set(labels))
        unknown_labels = sorted(set(labels) - set(names))
        if unknown_labels:
            raise UsageError(f"{path}: labels not in class_names: {', '.join(unknown_labels[:5])}")
        index = [names.index(lab) for lab in labels]
    return Reader(
        [r[0] for r in rows],
        lambda i: _read_image(root / rows[i][0]),
        lambda i: index[i],
        names,
        info={"source": str(path)},
    )


def _coco(ds: Dataset) -> Reader:
    path = Path(ds.coco)  # type: ignore[arg-type]
    from trtverify.tasks.coco import GroundTruth, read_coco

    try:  # checked before any model runs: a broken annotation file fails the stage at once, naming the file
        truth = GroundTruth(read_coco(path), str(path), limit=ds.limit)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    root = Path(ds.images) if ds.images else path.parent / "images"
    images = sorted(truth.gt["images"], key=lambda im: im["id"])
    names = [c["name"] for c in sorted(truth.gt["categories"], key=lambda c: c["id"])]
    return Reader(
        [im["id"] for im in images],
        lambda i: _read_image(root / images[i]["file_name"]),
        lambda i: None,
        names,
        truth=truth,
        info={"source": str(path), "images": str(root)},
    )


def open_dataset(ds: Dataset, masks: bool = False) -> Reader:
    """The validation set `ds` describes; `masks`: its labels are label images (segmentation)."""
    if ds.source == "npz":
        reader = _npz(ds, masks)
    else:
        reader = {"folder": _folder, "csv": _csv, "coco": _coco, "masks": _masks}[ds.source](ds)
    if not len(reader):
        raise UsageError(
            f"{reader.info.get('source')}: the dataset has no samples; evaluating zero samples is never a pass"
        )
    return reader
