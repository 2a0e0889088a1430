"""Where reference intermediates live while a layerwise comparison runs.

In memory when they fit the budget; otherwise one `.npy` file per tensor and sample on
disk, read back memory-mapped, so only the tensors being compared occupy RAM.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np


class TensorStore:
    def __init__(self, folder: Path | None = None):
        self.folder = folder
        self._mem: dict[tuple[int, str], np.ndarray] = {}
        self._files: dict[tuple[int, str], Path] = {}
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)

    @property
    def on_disk(self) -> bool:
        return self.folder is not None

    def put(self, sample: int, name: str, value: np.ndarray) -> None:
        key = (sample, name)
        if self.folder is None:
            self._mem[key] = value
            return
        path = self.folder / f"s{sample}_{len(self._files)}.npy"
        np.save(path, np.ascontiguousarray(value), allow_pickle=False)
        self._files[key] = path

    def get(self, sample: int, name: str) -> np.ndarray:
        key = (sample, name)
        if self.folder is None:
            return self._mem[key]
        return np.load(self._files[key], mmap_mode="r", allow_pickle=False)

    def clear(self) -> None:
        """Let go of every value (the files on disk go with their folder)."""
        self._mem.clear()
        self._files.clear()

    def __contains__(self, key: tuple[int, str]) -> bool:
        return key in self._mem or key in self._files


def plan_chunks(names: Sequence[str], nbytes: dict[str, int], budget_bytes: int) -> list[list[str]]:
    """Split `names` (in order) into runs whose tensors together fit `budget_bytes`.

    A single tensor larger than the budget still gets a chunk of its own: it cannot be
    compared in less.
    """
    chunks: list[list[str]] = []
    current: list[str] = []
    used = 0
    for n in names:
        size = nbytes.get(n, 0)
        if current and used + size > budget_bytes:
            chunks.append(current)
            current, used = [], 0
        current.append(n)
        used += size
    if current:
        chunks.append(current)
    return chunks
