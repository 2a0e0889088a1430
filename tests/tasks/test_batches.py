"""`batches` reads each batch in up to `workers` parts at once; whatever the number of workers, the
batches must be the ones serial reading gives, in order, and an error must be the one serial
reading hits first. Real images through PIL (PNG files) and the built-in preprocessing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from trtverify.config.stages import Dataset, Preprocess
from trtverify.tasks import batches as batches_module
from trtverify.tasks.batches import Preprocessor, batches, default_workers, make_preprocess
from trtverify.tasks.datasets import Reader, open_dataset
from trtverify.util.errors import UsageError


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from PIL import Image

    root = tmp_path_factory.mktemp("imgs")
    rng = np.random.default_rng(3)
    for c in ("a", "b"):
        (root / c).mkdir()
        for k in range(13):
            size = (10 + k % 4, 12 + k % 3)  # ragged: the resize makes them one batch
            Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(root / c / f"{k:02d}.png")
    return root


def _collect(reader: Reader, pre, workers: int, batch_size: int = 7) -> list:
    return list(batches(reader, range(len(reader)), batch_size, pre, workers))


@pytest.mark.parametrize("workers", [1, 2, 3, 8])
@pytest.mark.parametrize("batch_size", [1, 5, 7, 26])
def test_parallel_reading_gives_the_serial_batches(folder: Path, workers: int, batch_size: int):
    reader = open_dataset(Dataset(folder=folder))
    pre = make_preprocess(Preprocess(resize=[9, 11], mean=[0.5, 0.4, 0.3], std=[0.2, 0.2, 0.2]), [])
    serial = _collect(reader, pre, 0, batch_size)
    parallel = _collect(reader, pre, workers, batch_size)
    assert (
        [b.index for b in parallel]
        == [b.index for b in serial]
        == [list(range(i, min(i + batch_size, 26))) for i in range(0, 26, batch_size)]
    )
    for p, s in zip(parallel, serial):
        assert p.inputs.dtype == s.inputs.dtype and np.array_equal(p.inputs, s.inputs)
        assert p.labels == s.labels and p.sizes == s.sizes
    assert parallel[0].sizes[0] == (10, 12)  # the original size, before the resize


def test_a_hook_preprocessing_is_called_per_image_and_stacked(folder: Path):
    reader = open_dataset(Dataset(folder=folder))
    seen: list[threading.Thread] = []

    def hook(image: np.ndarray) -> np.ndarray:
        seen.append(threading.current_thread())
        return image[:8, :8].astype(np.float32).mean(axis=-1)

    got = _collect(reader, Preprocessor(hook), 3)
    assert [b.inputs.shape for b in got] == [(7, 8, 8)] * 3 + [(5, 8, 8)]
    assert np.array_equal(got[1].inputs[2], reader.image(9)[:8, :8].astype(np.float32).mean(axis=-1))
    assert len(seen) == 26 and all(t.name.startswith("trtverify-data") for t in seen)


def _reader_failing_at(bad: set[int], n: int = 20, slow: int | None = None) -> Reader:
    def image(i: int) -> np.ndarray:
        if i == slow:
            time.sleep(0.2)  # the earlier failure finishes last: its error must still win
        if i in bad:
            raise UsageError(f"image {i}: broken")
        return np.full((4, 4, 3), i, np.uint8)

    return Reader(list(range(n)), image, lambda i: i % 2)


@pytest.mark.parametrize("workers", [0, 2, 4])
def test_batches_before_a_bad_one_are_delivered_and_its_error_names_the_first_image(workers: int):
    # images 14 and 17 are both bad and, with 2 or 4 workers, fall in different parts of the second
    # batch; image 14 is slow, so its part finishes last: serial reading would still fail on it first
    pre = make_preprocess(Preprocess(), [])
    it = batches(_reader_failing_at({14, 17}, slow=14), range(20), 10, pre, workers)
    assert next(it).index == list(range(10))
    with pytest.raises(UsageError, match="image 14: broken"):
        next(it)


def _counting_reader(n: int, delay: float = 0.0) -> tuple[Reader, dict[int, str]]:
    """A reader that records which thread read each index."""
    seen: dict[int, str] = {}

    def image(i: int) -> np.ndarray:
        time.sleep(delay)
        seen[i] = threading.current_thread().name
        return np.full((4, 4, 3), i % 256, np.uint8)

    return Reader(list(range(n)), image, lambda i: 0), seen


def test_the_threads_share_each_batch():
    reader, seen = _counting_reader(18, delay=0.01)
    got = list(batches(reader, range(18), 9, make_preprocess(Preprocess(), []), 3))
    assert [b.index for b in got] == [list(range(9)), list(range(9, 18))]
    assert len({seen[i] for i in range(9)}) == 3  # the first batch was read in 3 parts at once


def test_read_ahead_is_bounded():
    # a slow consumer: only workers + 1 batches are read ahead, plus the one queued when a batch is taken
    reader, seen = _counting_reader(100)
    it = batches(reader, range(100), 5, make_preprocess(Preprocess(), []), 2)
    next(it)
    deadline = time.monotonic() + 5
    while len(seen) < 20 and time.monotonic() < deadline:  # the in-flight reads finish...
        time.sleep(0.01)
    time.sleep(0.2)  # ...and no more follow
    assert len(seen) == (2 + 1) * 5 + 5
    it.close()


def test_an_abandoned_reader_stops_its_threads():
    reader, seen = _counting_reader(400, delay=0.1)
    before = {t.ident for t in threading.enumerate()}
    it = batches(reader, range(400), 4, make_preprocess(Preprocess(), []), 3)
    next(it)
    it.close()  # as when the stage fails on the first batch: the queued reads are cancelled, the pool joined
    assert not [t for t in threading.enumerate() if t.ident not in before and t.name.startswith("trtverify-data")]
    # 5 batches (20 images) were queued; the cancelled parts were never read (about 4 + 6 were)
    assert len(seen) < 20


@pytest.mark.parametrize(
    ("cpu_max", "expected"),
    [("max 100000\n", 16), ("200000 100000\n", 2), ("50000 100000\n", 1), ("garbage\n", 16), (None, 16)],
)
def test_usable_cores_honour_a_cgroup_quota(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, cpu_max: str | None, expected: int
):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    f = tmp_path / "cpu.max"
    if cpu_max is not None:
        f.write_text(cpu_max)
    monkeypatch.setattr(batches_module, "CPU_MAX", f)
    assert batches_module.usable_cores() == expected


def test_a_hooks_own_attributes_are_not_taken_for_the_built_in_steps(folder: Path):
    class Hook:
        def __call__(self, image: np.ndarray) -> np.ndarray:
            return image[:4, :4, 0].astype(np.float32)

        def finish(self) -> None:  # a hook's own method of that name is left alone
            raise AssertionError("called")

        per_image = batch = finish

    got = _collect(open_dataset(Dataset(folder=folder)), Preprocessor(Hook()), 2)
    assert got[0].inputs.shape == (7, 4, 4)


@pytest.mark.parametrize(("cores", "expected"), [(1, 2), (2, 2), (8, 2), (12, 3), (16, 4), (64, 4)])
def test_default_workers_follow_the_usable_cores(monkeypatch: pytest.MonkeyPatch, cores: int, expected: int):
    monkeypatch.setattr(batches_module, "usable_cores", lambda: cores)
    assert default_workers(None) == expected
    assert default_workers(0) == 0 and default_workers(7) == 7  # a configured number is kept, 0 (inline) too
