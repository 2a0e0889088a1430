"""The backend protocol every stage talks to."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

from trtverify.onnxinfo import TensorMeta

Feed = dict[str, np.ndarray]


def check_feed(feed: Feed, declared: dict[str, TensorMeta], model: str) -> None:
    """A feed must name exactly the model's inputs (never matched by position)."""
    from trtverify.errors import BackendError

    unknown = sorted(set(feed) - set(declared))
    missing = sorted(set(declared) - set(feed))
    if unknown or missing:
        raise BackendError(
            f"{model}: feed does not match the model inputs"
            + (f"; missing: {', '.join(missing)}" if missing else "")
            + (f"; not inputs of the model: {', '.join(unknown)}" if unknown else "")
            + f" (model inputs: {', '.join(declared)})"
        )


def cast_float(name: str, arr: np.ndarray, want: str, casts: dict[str, tuple[str, str]]) -> np.ndarray | None:
    """float -> float casts to the declared input type (the documented normalisation; FP16
    converters may change input types); recorded in `casts`. None when no float cast applies."""
    if str(arr.dtype) == want:
        return arr
    if arr.dtype.kind == "f" and want in ("float16", "float32", "float64"):
        casts[name] = (str(arr.dtype), want)
        return arr.astype(want)
    return None


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
