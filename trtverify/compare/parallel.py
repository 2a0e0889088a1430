"""Comparisons of one step's tensors side by side: numpy lets go of the GIL on big arrays, so the cores that
inference used stay busy while the step's tensors are compared."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

# each worker holds one comparison's temporaries (a few times the tensor's size): more than a few adds memory for
# little time on the tensors a step holds
MAX_WORKERS = 4


def workers() -> int:
    """The cores this process may use (its CPU affinity, as a container or taskset sets it), at most MAX_WORKERS."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity API (macOS, Windows)
        usable = os.cpu_count() or 1
    return max(1, min(MAX_WORKERS, usable))


@contextmanager
def mapper(single: bool = False) -> Iterator[Callable[[Callable[[T], R], Iterable[T]], list[R]]]:
    """`map(fn, items)` -> results in the items' order, run on `workers()` threads (in this thread with one, or
    `single`); an exception in any item is raised here, and what was still queued is dropped, not run."""
    n = 1 if single else workers()
    if n == 1:
        yield lambda fn, items: [fn(x) for x in items]
        return
    pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="trtverify-compare")
    try:
        yield lambda fn, items: list(pool.map(fn, items))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)  # Ctrl-C or an error: the queued comparisons never start
