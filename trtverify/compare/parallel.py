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
    return max(1, min(MAX_WORKERS, os.cpu_count() or 1))


@contextmanager
def mapper() -> Iterator[Callable[[Callable[[T], R], Iterable[T]], list[R]]]:
    """`map(fn, items)` -> results in the items' order, run on `workers()` threads (in this thread with one);
    an exception in any item is raised here."""
    n = workers()
    if n == 1:
        yield lambda fn, items: [fn(x) for x in items]
        return
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="trtverify-compare") as pool:
        yield lambda fn, items: list(pool.map(fn, items))
