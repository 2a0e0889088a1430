"""The one backend base class every stage talks to.

Lifecycle: `load()` reads what the model declares (inputs, outputs, intermediates) and is
cheap; `prepare()` makes it ready to run (a session, an engine) so that timed inference does
not include that; `infer()` runs it (preparing on first use); `release()` frees what running
needs but keeps what `load()` and `expose()` set up; `close()` frees everything. A backend is a
context manager: `with backend_for(...) as b:` loads it and closes it.

What a backend can do is declared in `capabilities`, never probed by the stages.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from trtverify.config.registry import BACKENDS
from trtverify.graph.onnxinfo import TensorMeta, feed_mismatch
from trtverify.util.errors import BackendError, UsageError

if TYPE_CHECKING:
    from trtverify.config.backends import Backends
    from trtverify.graph.lightmodel import LightModel

Feed = dict[str, np.ndarray]


@dataclass(frozen=True)
class Capabilities:
    """What a backend offers beyond running a model."""

    exposes_intermediates: bool  # expose() makes intermediate tensors come back from infer()
    onnx_graph: bool  # runs the ONNX graph as written: its numbers are the graph's, so the graph can be
    # isolated node by node and linted (ONNX Runtime); TensorRT builds its own engine from the graph
    casts_feeds: bool  # converts float feeds to the declared float input type, recording it in `casts`


class Backend(ABC):
    """A model that maps a feed dict to named output arrays."""

    name: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    unexposed: ClassVar[str] = "not exposed by the candidate (fused or optimised away)"  # why a tensor is not there

    def __init__(self) -> None:
        self.casts: dict[str, tuple[str, str]] = {}  # input -> (fed dtype, model dtype), for the record

    @classmethod
    def from_config(cls, model_path: Path, backends: Backends, samples: Sequence[Feed] = ()) -> Backend:
        """A backend for a candidate ONNX model, configured from the suite's `backends:` section.

        `samples` are the suite's input samples (calibration data for weakly typed INT8 builds)."""
        raise UsageError(f"backend '{cls.name}' cannot run candidate ONNX models")

    # -- lifecycle -------------------------------------------------------------------------
    @abstractmethod
    def load(self) -> None:
        """Read the model's declarations (inputs, outputs); nothing is run."""

    def prepare(self) -> None:  # noqa: B027 - optional: a backend without set-up cost keeps this
        """Get ready to run now (create the session, build or load the engine)."""

    def release(self) -> None:  # noqa: B027 - optional: a backend holding nothing to free keeps this
        """Free what running needs (a session and its weights); keep what `load` and `expose` set up."""

    @abstractmethod
    def close(self) -> None:
        """Free everything."""

    def __enter__(self) -> Backend:
        self.load()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- model -----------------------------------------------------------------------------
    @abstractmethod
    def inputs(self) -> list[TensorMeta]: ...

    @abstractmethod
    def outputs(self) -> list[TensorMeta]: ...

    @abstractmethod
    def infer(self, feed: Feed) -> dict[str, np.ndarray]: ...

    def intermediates(self) -> list[str]:
        """Names of the intermediate tensors `expose` can add (none unless `exposes_intermediates`)."""
        return []

    def uncomputed(self) -> dict[str, str]:
        """Tensors of the model nothing here computes (after a plugin node without a reference), each with why."""
        return {}

    def plugin_notes(self) -> list[str]:
        """Each plugin node of the model and how this backend computes it ('OP 'name' by ...'); none by default."""
        return []

    def expose(self, names: Sequence[str]) -> list[str]:
        """Ask for intermediate tensors too: later `infer` calls return them beside the outputs.

        Returns the names it could expose; the rest are the caller's to report (never silently dropped)."""
        return []

    def graph(self) -> LightModel:
        """The ONNX graph this backend runs as written (only with `capabilities.onnx_graph`)."""
        raise UsageError(f"backend '{self.name}' does not run an ONNX graph as written")


def candidate_backend(
    name: str,
    model_path: Path,
    backends: Backends,
    samples: Sequence[Feed] = (),
    capture: tuple[Path, str | None, int | None, Path | None] | None = None,
) -> Backend:
    """The registered backend `name` for a candidate ONNX model (imported on first use); `capture`: (file, runner,
    iteration, layer information) of a candidate captured elsewhere, whose ONNX model is `model_path`."""
    cls: type[Backend] = BACKENDS.load(name)
    if capture is not None:
        return cls.from_capture(Path(model_path), *capture, samples)  # type: ignore[attr-defined]
    return cls.from_config(Path(model_path), backends, samples)


def check_feed(feed: Feed, declared: dict[str, TensorMeta], model: str) -> None:
    """A feed must name exactly the model's inputs (never matched by position)."""
    why = feed_mismatch(feed, declared)
    if why:
        raise BackendError(f"{model}: feed {why}")


def cannot_load(who: str, path: Path, exc: BaseException) -> BackendError:
    """`WHO cannot load PATH: why`, the path said once: an error whose text starts with the path (a reader's
    `PATH: not a readable ONNX model (...)`) gives only what follows it."""
    why = str(exc)
    for said in dict.fromkeys((str(path), str(Path(path).absolute()), Path(path).name)):
        if why.startswith(f"{said}: "):
            why = why[len(said) + 2 :]
            break
    return BackendError(f"{who} cannot load {path}: {why}")


def cast_float(name: str, arr: np.ndarray, want: str, casts: dict[str, tuple[str, str]]) -> np.ndarray | None:
    """float -> float casts to the declared input type (the documented normalisation; FP16
    converters may change input types); recorded in `casts`. None when no float cast applies."""
    if str(arr.dtype) == want:
        return arr
    if arr.dtype.kind == "f" and want in ("float16", "float32", "float64"):
        casts[name] = (str(arr.dtype), want)
        return arr.astype(want)
    return None


__all__ = ["Backend", "Capabilities", "Feed", "candidate_backend", "cannot_load", "cast_float", "check_feed"]
