"""ONNX Runtime backend: the FP32 reference, and FP16 / INT8 QDQ / mixed candidates."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends.base import Backend, Capabilities, Feed, cast_float, check_feed
from trtverify.config.backends import Backends, OnnxRuntimeOptions
from trtverify.deps import require
from trtverify.errors import BackendError, MissingDependency, UsageError
from trtverify.lightmodel import LightModel
from trtverify.onnxemulate import BF16, FP16, holds, internal, write_emulated
from trtverify.onnxinfo import TensorMeta, graph_io, load_io, load_onnx

CPU = "CPUExecutionProvider"


def _cpu_only(providers: Sequence[str]) -> bool:
    return all(p == CPU for p in providers)


_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    capabilities = Capabilities(exposes_intermediates=True, onnx_graph=True, casts_feeds=True)

    def __init__(self, model_path: Path, options: OnnxRuntimeOptions | None = None):
        super().__init__()
        self.model_path = Path(model_path)
        self.options = options or OnnxRuntimeOptions()
        self._session: Any = None
        self._run_path: Path = self.model_path  # the model a session runs (a variant once tensors are exposed)
        self._inputs: list[TensorMeta] = []
        self._outputs: list[TensorMeta] = []
        self._light: LightModel | None = None
        self._workdir: tempfile.TemporaryDirectory[str] | None = None
        self._loaded = False
        self.source = self.model_path  # the file given; model_path is its FP16/BF16 emulation where one runs
        self.emulated: int | None = None  # narrow tensors rounded by the emulation (None: runs as given)

    @classmethod
    def from_config(cls, model_path: Path, backends: Backends, samples: Sequence[Feed] = ()) -> OnnxRuntimeBackend:
        return cls(model_path, backends.onnxruntime)

    # -- lifecycle -------------------------------------------------------------------------
    def load(self) -> None:
        """Read the model's inputs and outputs; the session itself is created on first use. A BF16 or FP16 graph on
        a CPU-only provider list runs emulated (onnxemulate.py): FP32 compute, every narrow tensor rounded."""
        try:
            io = load_io(self.model_path)
            kinds = self._emulated_kinds()
            if kinds and self.emulated is None and holds(load_onnx(self.model_path), kinds):
                self._workdir = self._workdir or tempfile.TemporaryDirectory(prefix="trtverify-ort-")
                self.source = self.model_path
                self.model_path, self.emulated = write_emulated(self.model_path, Path(self._workdir.name), kinds)
                self._run_path = self.model_path
                io = load_io(self.model_path)
            self._inputs, self._outputs = graph_io(io)
        except UsageError as exc:  # unreadable or not ONNX: the model under test is broken
            raise BackendError(f"ONNX Runtime cannot load {self.model_path}: {exc}") from exc
        self._loaded = True

    def _emulated_kinds(self) -> frozenset[int]:
        """The narrow float types this backend emulates: on the CPU provider alone, BF16 always, FP16 unless
        `fp16_on_cpu: native`."""
        if not _cpu_only(self.options.providers):
            return frozenset()
        return frozenset({BF16, FP16} if self.options.fp16_on_cpu == "emulate" else {BF16})

    def prepare(self) -> None:
        """Create the session now, so that timed inference does not include it."""
        if not self._loaded:
            self.load()
        if self._session is None:
            self._session = self._make_session(str(self._run_path))

    def release(self) -> None:
        self._session = None

    def close(self) -> None:
        self._session = None
        self._light = None
        if self.emulated is not None:  # the emulated twin lives in the workdir removed here
            self.model_path, self.emulated, self._loaded = self.source, None, False
        self._run_path = self.model_path  # an exposed variant lives in the workdir removed here
        if self._workdir is not None:
            self._workdir.cleanup()
            self._workdir = None

    def _make_session(self, model: str) -> Any:
        ort = require("onnxruntime", "the onnxruntime backend")
        so = ort.SessionOptions()
        # an emulated graph runs as written: an optimiser dropping a Cast pair would drop its rounding
        level = "disable" if self.emulated is not None else self.options.graph_optimization_level
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[level])
        so.intra_op_num_threads = self.options.intra_op_num_threads
        so.inter_op_num_threads = self.options.inter_op_num_threads
        so.log_severity_level = 3
        if not self.options.allow_spinning:
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        available = ort.get_available_providers()
        missing = [p for p in self.options.providers if p not in available]
        if missing:
            raise MissingDependency(
                f"ONNX Runtime provider(s) {', '.join(missing)} not available here (available: {', '.join(available)})",
                "pip install onnxruntime-gpu   (for CUDAExecutionProvider / TensorrtExecutionProvider), "
                "or change backends.onnxruntime.providers",
            )
        try:
            return ort.InferenceSession(model, sess_options=so, providers=list(self.options.providers))
        except Exception as exc:  # ORT raises its own exception types (Fail, InvalidGraph, ...)
            raise BackendError(f"ONNX Runtime cannot load {self.model_path}: {exc}") from exc

    # -- model -----------------------------------------------------------------------------
    def inputs(self) -> list[TensorMeta]:
        return list(self._inputs)

    def outputs(self) -> list[TensorMeta]:
        return list(self._outputs)

    def _cast(self, feed: Feed) -> Feed:
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

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        self.prepare()
        names = [o.name for o in self._session.get_outputs()]
        try:
            values = self._session.run(names, self._cast(feed))
        except BackendError:
            raise
        except Exception as exc:
            raise BackendError(f"ONNX Runtime failed running {self.model_path.name}: {exc}") from exc
        return dict(zip(names, values))

    # -- intermediates ---------------------------------------------------------------------
    def graph(self) -> LightModel:
        """The model with its weights moved to one external file (made once, on first use)."""
        if not self._loaded:
            self.load()  # an FP16/BF16 graph is emulated first: the graph is the one that runs
        if self._light is None:
            self._workdir = self._workdir or tempfile.TemporaryDirectory(prefix="trtverify-ort-")
            self._light = LightModel(self.model_path, Path(self._workdir.name))
        return self._light

    def intermediates(self) -> list[str]:
        """Node outputs that carry values derived from the inputs (shape-only tensors, and the tensors an emulation
        added, left out)."""
        return [t for t in self.graph().info.value_tensors() if not internal(t)]

    def expose(self, names: Sequence[str]) -> list[str]:
        """Make `names` graph outputs too. Outputs are declared untyped: ONNX Runtime infers
        their real type, so FP16, INT8 QDQ and mixed graphs never get a wrong declaration."""
        if not self._loaded:
            self.load()
        info = self.graph().info
        known = set(info.producers) | set(info.inputs)
        chosen = [n for n in dict.fromkeys(names) if n in known]
        self._run_path = self.graph().with_outputs(chosen)
        self._session = None
        self._session = self._make_session(str(self._run_path))
        return chosen
