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
from trtverify.util.deps import require
from trtverify.util.errors import UsageError

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


MAX_IMAGE_BYTES = 256 * 1024 * 1024  # a validation image is kilobytes; this refuses a wrong file early
_bomb_filter_installed = False


def _pil(why: str) -> Any:
    """PIL.Image, with its decompression-bomb warning (more than Image.MAX_IMAGE_PIXELS) made an error."""
    global _bomb_filter_installed
    pil = require("PIL.Image", why)
    if not _bomb_filter_installed:
        import warnings

        warnings.filterwarnings("error", category=pil.DecompressionBombWarning)
        _bomb_filter_installed = True
    return pil


def _open_image(path: Path, what: str, read: Callable[[Any], np.ndarray]) -> np.ndarray:
    """`read(image)` of the image file at `path`; a UsageError naming the file for anything it cannot be."""
    pil = _pil(f"reading {what}s (stage e2e)")
    try:
        size = Path(path).stat().st_size
        if size > MAX_IMAGE_BYTES:
            raise UsageError(
                f"{path}: {size:,} bytes, more than the {MAX_IMAGE_BYTES // 2**20} MiB allowed for one {what}"
            )
        # one read of the whole file: PIL's chunked reads from disk cost more than the bytes
        with pil.open(io.BytesIO(Path(path).read_bytes())) as im:
            return read(im)
    except UsageError:
        raise
    except (pil.DecompressionBombError, pil.DecompressionBombWarning) as exc:
        raise UsageError(
            f"{path}: refused as a decompression bomb ({exc}); one {what} of more than "
            f"{pil.MAX_IMAGE_PIXELS:,} pixels is not a validation image"
        ) from None
    except FileNotFoundError:
        raise UsageError(f"{path}: {what} not found") from None
    except Exception as exc:  # PIL's plugins raise OSError, SyntaxError, struct.error... on damaged files
        raise UsageError(f"{path}: cannot read {what} ({type(exc).__name__}: {exc})") from None


def _read_image(path: Path) -> np.ndarray:
    return _open_image(path, "image", lambda im: np.asarray(im if im.mode == "RGB" else im.convert("RGB")))


def npz_array(data: Any, key: str, path: Any) -> np.ndarray:
    """One array of an open .npz, read now (members load lazily); UsageError naming the file and key."""
    try:
        arr = data[key]
    except KeyError:
        raise UsageError(f"{path}: no array '{key}' (it has: {', '.join(data.files)})") from None
    except ValueError as exc:
        why = "cannot be read without pickle" if "allow_pickle" in str(exc) else "is not readable (truncated?)"
        raise UsageError(f"{path}: array '{key}' {why} ({exc})") from None
    except Exception as exc:  # a damaged member: BadZipFile (CRC), EOFError, zlib.error
        raise UsageError(f"{path}: array '{key}' is not readable ({type(exc).__name__}: {exc}); truncated?") from None
    if arr.dtype.kind not in "biuf":
        raise UsageError(f"{path}: array '{key}' has dtype {arr.dtype}; expected bool, integer or float values")
    return arr


def open_npz(path: Any) -> Any:
    """The .npz at `path`, opened without pickle (its arrays load when asked: `npz_array`); UsageError naming the
    file when it is missing, damaged or not a zip archive."""
    try:
        with open(path, "rb") as fh:
            if not fh.read(4).startswith(b"PK"):  # np.load would take it for a pickle
                raise ValueError("it is not a zip archive")
        data = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise UsageError(f"{path}: file not found") from None
    except Exception as exc:  # BadZipFile, EOFError, ValueError, OSError: a damaged or foreign file
        raise UsageError(f"{path}: not a readable .npz file ({type(exc).__name__}: {exc})") from None
    if isinstance(data, np.ndarray):
        raise UsageError(f"{path}: an .npy holds one array; the dataset needs an .npz with images and labels")
    return data


def nhwc(images: np.ndarray, ds: Dataset, shapes: str = "[N,H,W], [N,H,W,C] or [N,C,H,W]") -> tuple[np.ndarray, str]:
    """A dataset's images as [N, H, W, C] and the layout they were stored in (`ds.layout`, else guessed from the
    channel axis); UsageError when they are not images (`shapes`: what the message says they must be)."""
    if images.ndim == 3:
        images = images[..., None]  # N,H,W -> N,H,W,1
    elif images.ndim != 4:
        raise UsageError(f"{ds.npz}: '{ds.images_key}' must be {shapes}, got shape {list(images.shape)}")
    layout = ds.layout or ("NCHW" if images.shape[1] in (1, 3, 4) and images.shape[-1] not in (1, 3, 4) else "NHWC")
    return (images.transpose(0, 2, 3, 1) if layout == "NCHW" else images), layout


def _npz(ds: Dataset, masks: bool, arrays: bool = False) -> Reader:
    key = ds.masks_key if masks else ds.labels_key
    with open_npz(ds.npz) as data:
        images = npz_array(data, ds.images_key, ds.npz)
        labels = npz_array(data, key, ds.npz)
    images, layout = nhwc(images, ds)
    if labels.ndim == 0:
        raise UsageError(f"{ds.npz}: '{key}' is a single value; expected one label per image")
    if len(labels) != len(images):
        raise UsageError(f"{ds.npz}: {len(images)} images but {len(labels)} {'masks' if masks else 'labels'}")
    if arrays:  # per-sample targets of any shape (depth maps, images, values), as stored
        n = len(images) if ds.limit is None else min(ds.limit, len(images))
        info = {"source": str(ds.npz), "layout": layout}
        return Reader(list(range(n)), lambda i: images[i], lambda i: labels[i], ds.class_names, info=info)
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

    def read(im: Any) -> np.ndarray:
        if im.mode not in ("L", "P", "I;16", "I"):
            raise UsageError(f"{path}: a label image must have one channel of class indices, got mode {im.mode}")
        return np.asarray(im)

    return _open_image(path, "label image", read)


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
    for im in images:
        if not isinstance(im.get("file_name"), str) or not im["file_name"]:
            raise UsageError(f"{path}: image {im['id']} has no 'file_name' string, got {im.get('file_name')!r}")
    names = [c["name"] for c in sorted(truth.gt["categories"], key=lambda c: c["id"])]
    return Reader(
        [im["id"] for im in images],
        lambda i: _read_image(root / images[i]["file_name"]),
        lambda i: None,
        names,
        truth=truth,
        info={"source": str(path), "images": str(root)},
    )


def open_dataset(ds: Dataset, masks: bool = False, arrays: bool = False) -> Reader:
    """The validation set `ds` describes; `masks`: its labels are label images (segmentation); `arrays`: its labels
    are per-sample arrays of any shape, as stored (npz only)."""
    if arrays and ds.source != "npz":
        raise UsageError(f"dataset: this task reads npz (images and targets), not {ds.source}")
    if ds.source == "npz":
        reader = _npz(ds, masks, arrays)
    else:
        reader = {"folder": _folder, "csv": _csv, "coco": _coco, "masks": _masks}[ds.source](ds)
    if not len(reader):
        raise UsageError(
            f"{reader.info.get('source')}: the dataset has no samples; evaluating zero samples is never a pass"
        )
    return reader
