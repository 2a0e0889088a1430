"""The backend protocol every stage talks to."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from trtverify.onnxinfo import TensorMeta

Feed = dict[str, np.ndarray]


@runtime_checkable
class Backend(Protocol):
    """A loaded model that maps a feed dict to named output arrays.

    `expose(names)` asks for intermediate tensors too: later `infer` calls return them
    beside the outputs. It returns the names it could expose; the rest are the caller's
    to report (never silently dropped).
    """

    name: str

    def load(self) -> None: ...

    def inputs(self) -> list[TensorMeta]: ...

    def outputs(self) -> list[TensorMeta]: ...

    def infer(self, feed: Feed) -> dict[str, np.ndarray]: ...

    def intermediates(self) -> list[str]: ...

    def expose(self, names: Sequence[str]) -> list[str]: ...

    def close(self) -> None: ...
