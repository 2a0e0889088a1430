"""ONNX Runtime backend: the FP32 reference, and FP16 / INT8 QDQ / mixed candidates."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends.base import cast_float, check_feed
from trtverify.config.models import OnnxRuntimeOptions
from trtverify.deps import require
from trtverify.errors import BackendError
from trtverify.onnxinfo import TensorMeta, graph_io, load_io

_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


class OnnxRuntimeBackend:
    name = "onnxruntime"

    def __init__(self, model_path: Path, options: OnnxRuntimeOptions | None = None):
        self.model_path = Path(model_path)
        self.options = options or OnnxRuntimeOptions()
        self._session: Any = None
        self._inputs: list[TensorMeta] = []
        self._outputs: list[TensorMeta] = []
        self._light: Any = None
        self._workdir: Any = None
        self._loaded = False
        self.casts: dict[str, tuple[str, str]] = {}  # input -> (fed dtype, model dtype), for the record

    @classmethod
    def from_config(cls, model_path: Path, backends: Any, samples: Any = ()) -> OnnxRuntimeBackend:
        return cls(model_path, backends.onnxruntime)

    # -- loading ---------------------------------------------------------------------------
    def load(self) -> None:
        """Read the model's inputs and outputs; the session itself is created on first use."""
        self._inputs, self._outputs = graph_io(load_io(self.model_path))
        self._loaded = True

    def _ensure_session(self) -> None:
        if not self._loaded:
            self.load()
        if self._session is None:
            self._session = self._make_session(str(self.model_path))

    def prepare(self) -> None:
        """Create the session now, so that timed inference does not include it."""
        self._ensure_session()

    def release(self) -> None:
        """Free the session (and the weights it holds) but keep what `expose` prepared."""
        self._session = None

    def _make_session(self, model: str | bytes) -> Any:
        ort = require("onnxruntime", "the onnxruntime backend")
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(
            ort.GraphOptimizationLevel, _LEVELS[self.options.graph_optimization_level]
        )
        so.intra_op_num_threads = self.options.intra_op_num_threads
        so.inter_op_num_threads = self.options.inter_op_num_threads
        so.log_severity_level = 3
        if not self.options.allow_spinning:
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        available = ort.get_available_providers()
        missing = [p for p in self.options.providers if p not in available]
        if missing:
            from trtverify.errors import MissingDependency

            raise MissingDependency(
                f"ONNX Runtime provider(s) {', '.join(missing)} not available here (available: {', '.join(available)})",
                "pip install onnxruntime-gpu   (for CUDAExecutionProvider / TensorrtExecutionProvider), or change backends.onnxruntime.providers",
            )
        try:
            return ort.InferenceSession(model, sess_options=so, providers=list(self.options.providers))
        except Exception as exc:  # ORT raises its own exception types (Fail, InvalidGraph, ...)
            raise BackendError(f"ONNX Runtime cannot load {self.model_path}: {exc}") from exc

    # -- metadata --------------------------------------------------------------------------
    def inputs(self) -> list[TensorMeta]:
        return list(self._inputs)

    def outputs(self) -> list[TensorMeta]:
        return list(self._outputs)

    # -- running ---------------------------------------------------------------------------
    def _prepare(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        declared = {m.name: m for m in self._inputs}
        check_feed(feed, declared, self.model_path.name)
        out = {}
        for name, arr in feed.items():
            want = declared[name].dtype
            cast = cast_float(name, np.asarray(arr), want, self.casts)
            if cast is None:
                raise BackendError(
                    f"{self.model_path.name}: input '{name}' is {np.asarray(arr).dtype} but the model expects {want}"
                )
            out[name] = cast
        return out

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._ensure_session()
        names = [o.name for o in self._session.get_outputs()]
        try:
            values = self._session.run(names, self._prepare(feed))
        except BackendError:
            raise
        except Exception as exc:
            raise BackendError(f"ONNX Runtime failed running {self.model_path.name}: {exc}") from exc
        return dict(zip(names, values))

    # -- intermediates ---------------------------------------------------------------------
    @property
    def light(self) -> Any:
        """The model with its weights moved to one external file (made once, on first use)."""
        if self._light is None:
            import tempfile

            from trtverify.graph import LightModel

            self._workdir = tempfile.TemporaryDirectory(prefix="trtverify-ort-")
            self._light = LightModel(self.model_path, Path(self._workdir.name))
        return self._light

    def intermediates(self) -> list[str]:
        """Node outputs that carry values derived from the inputs (shape-only tensors left out)."""
        return self.light.info.value_tensors()

    def expose(self, names: Sequence[str]) -> list[str]:
        """Make `names` graph outputs too. Outputs are declared untyped: ONNX Runtime infers
        their real type, so FP16, INT8 QDQ and mixed graphs never get a wrong declaration."""
        if not self._loaded:
            self.load()
        known = set(self.light.info.producers) | set(self.light.info.inputs)
        chosen = [n for n in dict.fromkeys(names) if n in known]
        path = self.light.with_outputs(chosen)
        self._session = None
        self._session = self._make_session(str(path))
        return chosen

    def close(self) -> None:
        self._session = None
        self._light = None
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None
