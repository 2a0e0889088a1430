"""Validation sets for the e2e stage: reading samples, preprocessing, and batches prepared in
background threads while the models run.

Classification: npz arrays (images + labels), an image-folder tree (FOLDER/<class>/<file>)
or a CSV of `file,label`. Detection: COCO instances JSON plus its image folder.
Images are uint8 HWC arrays until preprocessing turns them into model input.
"""

from __future__ import annotations

import csv
import io
import json
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.config.models import Dataset, Preprocess
from trtverify.deps import require
from trtverify.errors import UsageError

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff"}


@dataclass
class Reader:
    """Samples addressed by position; `image(i)` is uint8 HWC, `label(i)` an int (classification)."""

    ids: list[Any]
    image: Callable[[int], np.ndarray]
    label: Callable[[int], int | None]
    class_names: list[str] | None = None
    truth: Any = None  # detection ground truth, checked and indexed once (detection.GroundTruth), shared by every model
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


def _npz(ds: Dataset) -> Reader:
    try:
        data = np.load(ds.npz, allow_pickle=False)
        images = data[ds.images_key]
        labels = data[ds.labels_key]
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
        raise UsageError(f"{ds.npz}: {len(images)} images but {len(labels)} labels")
    n = len(images) if ds.limit is None else min(ds.limit, len(images))
    return Reader(
        list(range(n)),
        lambda i: images[i],
        lambda i: int(labels[i]),
        ds.class_names,
        info={"source": str(ds.npz), "layout": layout},
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
    try:
        gt = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from exc
    for key in ("images", "annotations", "categories"):
        if key not in gt:
            raise UsageError(f"{path}: not a COCO instances file (no '{key}')")
    root = Path(ds.images) if ds.images else path.parent / "images"
    images = sorted(gt["images"], key=lambda im: im["id"])
    if ds.limit:
        images = images[: ds.limit]
        keep = {im["id"] for im in images}
        gt = {**gt, "images": images, "annotations": [a for a in gt["annotations"] if a["image_id"] in keep]}
    from trtverify.tasks.detection import GroundTruth

    try:  # checked before any model runs: a broken annotation file fails the stage at once, naming the file
        truth = GroundTruth(gt, str(path))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    names = [c["name"] for c in sorted(gt["categories"], key=lambda c: c["id"])]
    return Reader(
        [im["id"] for im in images],
        lambda i: _read_image(root / images[i]["file_name"]),
        lambda i: None,
        names,
        truth=truth,
        info={"source": str(path), "images": str(root)},
    )


def open_dataset(ds: Dataset) -> Reader:
    reader = {"npz": _npz, "folder": _folder, "csv": _csv, "coco": _coco}[
        next(k for k in ("npz", "folder", "csv", "coco") if getattr(ds, k) is not None)
    ](ds)
    if not len(reader):
        raise UsageError(
            f"{reader.info.get('source')}: the dataset has no samples; evaluating zero samples is never a pass"
        )
    return reader


# ----------------------------------------------------------------------------- preprocessing


def make_preprocess(cfg: Preprocess, search_path: Sequence[Path]) -> Callable[[np.ndarray], np.ndarray]:
    """uint8 HWC image -> one sample of model input (no batch axis)."""
    if cfg.hook:
        from trtverify.hooks import load_hook

        return load_hook(cfg.hook, search_path, what="preprocess.hook")
    mean = np.asarray(cfg.mean, np.float32) if cfg.mean is not None else None
    std = np.asarray(cfg.std, np.float32) if cfg.std is not None else None

    def shape(image: np.ndarray) -> np.ndarray:
        """The per-image steps: channels and size, still uint8."""
        img = image
        if cfg.grayscale and img.shape[-1] != 1:
            img = (img[..., :3] @ np.array([0.299, 0.587, 0.114], np.float32))[..., None]
        elif not cfg.grayscale and img.shape[-1] == 1 and (mean is not None and mean.size == 3):
            img = np.repeat(img, 3, axis=-1)
        if cfg.resize is not None and tuple(img.shape[:2]) != tuple(cfg.resize):
            pil = require("PIL.Image", "resizing images (preprocess.resize)")
            squeeze = img.shape[-1] == 1
            im = pil.fromarray(np.asarray(img[..., 0] if squeeze else img).astype(np.uint8))
            img = np.asarray(im.resize((cfg.resize[1], cfg.resize[0]), pil.BILINEAR))
            img = img[..., None] if squeeze else img
        return img

    channels_first = cfg.layout == "NCHW"
    # mean and std along the channel axis of the output layout
    mean_c = mean.reshape(-1, 1, 1) if mean is not None and channels_first else mean
    std_c = std.reshape(-1, 1, 1) if std is not None and channels_first else std

    def scale(x: np.ndarray) -> np.ndarray:
        """The elementwise steps on [..., H, W, C], for one image or a stacked batch.

        The layout moves first, on the (uint8) pixels, and the arithmetic runs in place on one
        float32 copy, with the same float32 operations in the same order, so the same bits
        (with mean and std about 6 times faster than a float copy per step)."""
        if channels_first:
            x = np.ascontiguousarray(np.moveaxis(x, -1, -3))
        y = x.astype(np.float32, order="C")
        y *= np.float32(cfg.scale)
        if mean_c is not None:
            y -= mean_c
        if std_c is not None:
            y /= std_c
        return y.astype(cfg.dtype, copy=False)

    def pre(image: np.ndarray) -> np.ndarray:
        return scale(shape(image))

    def finish(shaped: Sequence[np.ndarray]) -> np.ndarray:
        # one pass over the stacked batch: stacking uint8 copies 4x less than stacking float32
        return scale(np.stack(shaped))

    # for `batches`: the per-image steps run in parallel over parts of a batch, the rest once per
    # batch (a private name, so that a hook's own attributes are never taken for these)
    pre._trtverify_steps = (shape, finish)  # type: ignore[attr-defined]
    return pre


@dataclass
class Batch:
    index: list[int]  # positions in the reader
    inputs: np.ndarray
    labels: list[int | None]
    sizes: list[tuple[int, int]]  # original (height, width) of each image


CPU_MAX = Path("/sys/fs/cgroup/cpu.max")  # cgroup v2: "<quota> <period>" or "max <period>"


def default_workers(workers: int | None) -> int:
    """Reader threads: as configured, or a quarter of the usable cores, at least 2 and at most 4 (measured
    on the detection demo: with 16 cores 4 threads kept the first model waiting about half as long as 2;
    8 were no faster than 4, the decoding's share under the GIL limits them)."""
    if workers is not None:
        return workers
    return min(4, max(2, usable_cores() // 4))


def usable_cores() -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota (a
    container limited to 2 CPUs on a 64-core host has 2)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # no sched_getaffinity on macOS or Windows
        cores = os.cpu_count() or 2
    try:
        quota, period = CPU_MAX.read_text().split()[:2]
        if quota != "max":
            cores = min(cores, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):  # no cgroup v2 file, or not one we can read
        pass
    return cores


def batches(
    reader: Reader,
    indices: Sequence[int],
    batch_size: int,
    preprocess: Callable[[np.ndarray], np.ndarray],
    workers: int,
) -> Iterator[Batch]:
    """Batches in order; with workers > 0 the next ones are read and preprocessed in background threads.

    Each batch is read in up to `workers` parts at once (image decoding, the expensive step, runs in
    parallel within a batch, so the first batch, which nothing overlaps, is ready sooner); the thread
    that finishes a batch's last part stacks it and runs the batch-wide steps. At most `workers + 1`
    batches are in flight. An error is raised when its batch is reached, for the first failing image
    in order, as when reading serially."""
    # the built-in's per-image and batch-wide steps; a hook is called per image and the results stacked
    per_image, finish = getattr(preprocess, "_trtverify_steps", (preprocess, np.stack))

    def read(part: Sequence[int]) -> tuple[list[np.ndarray], list[tuple[int, int]]]:
        out, sizes = [], []
        for i in part:
            image = reader.image(i)
            sizes.append(tuple(image.shape[:2]))
            out.append(per_image(image))
        return out, sizes

    def assemble(chunk: Sequence[int], parts: Sequence[tuple[list[np.ndarray], list[tuple[int, int]]]]) -> Batch:
        shaped = [x for p in parts for x in p[0]]
        sizes = [s for p in parts for s in p[1]]
        return Batch(list(chunk), finish(shaped), [reader.label(i) for i in chunk], sizes)

    chunks = [list(indices[i : i + batch_size]) for i in range(0, len(indices), batch_size)]
    if workers <= 0:
        for c in chunks:
            yield assemble(c, [read(c)])
        return

    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="trtverify-data")

    def submit(chunk: list[int]) -> Future[Batch]:
        n = min(workers, len(chunk))
        bounds = [len(chunk) * k // n for k in range(n + 1)]
        slots: list[Any] = [None] * n
        errors: list[BaseException | None] = [None] * n
        left = [n]
        lock = threading.Lock()
        result: Future[Batch] = Future()

        def part(k: int) -> None:
            try:
                slots[k] = read(chunk[bounds[k] : bounds[k + 1]])
            except BaseException as e:  # noqa: BLE001 - handed to the consumer with its batch
                errors[k] = e
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if not last:
                return
            first = next((e for e in errors if e is not None), None)  # the first failing image in order
            if first is not None:
                result.set_exception(first)
                return
            try:
                result.set_result(assemble(chunk, slots))
            except BaseException as e:  # noqa: BLE001
                result.set_exception(e)

        for k in range(n):
            pool.submit(part, k)
        return result

    try:
        pending: list[Future[Batch]] = []
        ahead = workers + 1
        it = iter(chunks)
        for c in it:
            pending.append(submit(c))
            if len(pending) >= ahead:
                break
        while pending:
            done = pending.pop(0).result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(submit(nxt))
            yield done
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
