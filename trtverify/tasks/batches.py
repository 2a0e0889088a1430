"""Preprocessing, and batches prepared in background threads while the models run."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.config.stages import Preprocess
from trtverify.tasks.datasets import Reader
from trtverify.util.deps import require
from trtverify.util.hooks import load_hook


@dataclass(frozen=True)
class Preprocessor:
    """uint8 HWC image -> one sample of model input (no batch axis), in two parts so that a batch
    can be prepared in parallel: `per_image` (run per image, in the reader threads) and `finish`
    (once per batch, over the per-image results)."""

    per_image: Callable[[np.ndarray], np.ndarray]
    finish: Callable[[Sequence[np.ndarray]], np.ndarray] = np.stack

    def __call__(self, image: np.ndarray) -> np.ndarray:
        return self.finish([self.per_image(image)])[0]


def make_preprocess(cfg: Preprocess, search_path: Sequence[Path]) -> Preprocessor:
    """The suite's preprocessing: its hook, called per image (results stacked), or the built-in."""
    if cfg.hook:
        return Preprocessor(load_hook(cfg.hook, search_path, what="preprocess.hook"))
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

    def finish(shaped: Sequence[np.ndarray]) -> np.ndarray:
        # one pass over the stacked batch: stacking uint8 copies 4x less than stacking float32
        return scale(np.stack(shaped))

    return Preprocessor(shape, finish)


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
    reader: Reader, indices: Sequence[int], batch_size: int, preprocess: Preprocessor, workers: int
) -> Iterator[Batch]:
    """Batches in order; with workers > 0 the next ones are read and preprocessed in background threads.

    Each batch is read in up to `workers` parts at once (image decoding, the expensive step, runs in
    parallel within a batch, so the first batch, which nothing overlaps, is ready sooner); the thread
    that finishes a batch's last part stacks it and runs the batch-wide steps. At most `workers + 1`
    batches are in flight. An error is raised when its batch is reached, for the first failing image
    in order, as when reading serially."""
    per_image, finish = preprocess.per_image, preprocess.finish
    stopping = threading.Event()  # set when the consumer stops (Ctrl-C, an error): readers end between images

    def read(part: Sequence[int]) -> tuple[list[np.ndarray], list[tuple[int, int]], list[Any]]:
        """Each sample's preprocessed image, its size and its label (a segmentation mask is decoded
        here too, in parallel like the images)."""
        out, sizes, labels = [], [], []
        for i in part:
            if stopping.is_set():
                raise CancelledError("the run stopped")
            image = reader.image(i)
            sizes.append(tuple(image.shape[:2]))
            out.append(per_image(image))
            labels.append(reader.label(i))
        return out, sizes, labels

    def assemble(
        chunk: Sequence[int], parts: Sequence[tuple[list[np.ndarray], list[tuple[int, int]], list[Any]]]
    ) -> Batch:
        shaped = [x for p in parts for x in p[0]]
        sizes = [s for p in parts for s in p[1]]
        labels = [lab for p in parts for lab in p[2]]
        return Batch(list(chunk), finish(shaped), labels, sizes)

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
        stopping.set()
        pool.shutdown(wait=True, cancel_futures=True)
