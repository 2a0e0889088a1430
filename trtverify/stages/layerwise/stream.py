"""The one loop of the layerwise stage: expose a chunk of tensors, infer every sample, yield the outputs.

The reference pass, the candidate's comparison and the isolation runs all go through `stream`;
what differs is how a chunk is opened (`exposing` a backend's intermediates, or building an
isolation model for the chunk).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from trtverify.backends.base import Backend, Feed
from trtverify.util.tensorstore import plan_chunks

Outputs = dict[str, np.ndarray]
# opens a chunk: a context manager yielding `infer(sample index) -> outputs`
ChunkOpener = Callable[[list[str]], contextlib.AbstractContextManager[Callable[[int], Outputs]]]


def stream(
    chunks: Sequence[list[str]], samples: int, open_chunk: ChunkOpener, progress: Callable[[int, int], None]
) -> Iterator[tuple[list[str], int, Outputs]]:
    """(chunk, sample index, outputs) for every chunk and sample, chunk by chunk.

    `progress(done, total)` is called after each step; the outputs of a step are dropped when
    the caller asks for the next one, so at most one step's tensors are held here. Values that are no tensors
    (ONNX Runtime gives a sequence as a list, a map as a dict) are left out: layerwise compares tensors."""
    steps = len(chunks) * samples
    for ci, chunk in enumerate(chunks):
        with open_chunk(chunk) as infer:
            for si in range(samples):
                out = {k: v for k, v in infer(si).items() if isinstance(v, np.ndarray)}
                yield chunk, si, out
                del out
                progress(ci * samples + si + 1, steps)


def exposing(backend: Backend, feeds: Sequence[Feed]) -> ChunkOpener:
    """Open a chunk by exposing its tensors on `backend`; sample i is `feeds[i]`."""

    @contextlib.contextmanager
    def open_chunk(chunk: list[str]) -> Iterator[Callable[[int], Outputs]]:
        backend.expose(chunk)
        yield lambda si: backend.infer(feeds[si])

    return open_chunk


def chunks_for(names: Sequence[str], nbytes: dict[str, int], budget_bytes: int) -> list[list[str]]:
    """`names` in runs that fit a third of the memory budget (the rest holds the other side's tensors)."""
    return plan_chunks(list(names), nbytes, max(budget_bytes // 3, 1))
