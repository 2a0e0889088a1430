"""ONNX Runtime backend: the FP32 reference, and FP16 / INT8 QDQ / mixed candidates."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends.base import Backend, Capabilities, Feed, cannot_load, cast_float, check_feed
from trtverify.backends.ortprobe import LEVELS, LOWER, ensure_loadable
from trtverify.backends.pluginrun import SegmentedSession, plan
from trtverify.config.backends import Backends, OnnxRuntimeOptions
from trtverify.graph.lightmodel import EXTERNAL_FOLDER, GraphBytes, LightModel
from trtverify.graph.onnxemulate import BF16, FP16, emulate, holds, internal
from trtverify.graph.onnxinfo import TensorMeta, check_graph, graph_io
from trtverify.plugins.onnxops import label, plugin_nodes
from trtverify.plugins.registry import Plugins
from trtverify.util import native
from trtverify.util.deps import require
from trtverify.util.errors import BackendError, LoadError, MissingDependency, RunError, UsageError

CPU = "CPUExecutionProvider"


def _cpu_only(providers: Sequence[str]) -> bool:
    return all(p == CPU for p in providers)


def _workaround(level: str) -> str:
    if level == "disable":
        return "it crashed with graph optimisation off; report it to ONNX Runtime with the model"
    return (
        f"ONNX Runtime's graph optimiser may be the cause: try backends.onnxruntime.graph_optimization_level: "
        f"{LOWER[level][0]} (or lower) in the suite"
    )


class OnnxRuntimeBackend(Backend):
    name = "onnxruntime"
    capabilities = Capabilities(exposes_intermediates=True, onnx_graph=True, casts_feeds=True)

    def __init__(self, model_path: Path | GraphBytes, options: OnnxRuntimeOptions | None = None):
        super().__init__()
        # a GraphBytes: a graph made in memory over another model's weights (an isolation model), run as given
        self._given = model_path if isinstance(model_path, GraphBytes) else None
        self.model_path = Path(model_path.name) if isinstance(model_path, GraphBytes) else Path(model_path)
        self.options = options or OnnxRuntimeOptions()
        self._session: Any = None
        self._run: GraphBytes | None = None  # what a session runs (a variant once tensors are exposed)
        self._inputs: list[TensorMeta] = []
        self._outputs: list[TensorMeta] = []
        self._light: LightModel | None = None  # the graph that runs (the emulated twin where one runs)
        self.source_graph: LightModel | None = None  # the model as given, weights where they are
        self._loaded = False
        self.source = self.model_path  # the file given
        self.emulated: int | None = None  # narrow tensors rounded by the emulation (None: runs as given)
        self._plugins: Plugins | None = None
        self._uncomputed: dict[str, str] | None = None
        self._has_plugins = False
        self.plugin_labels: list[str] = []  # plugin nodes of the graph (ops ONNX Runtime does not have)
        self._segment_kinds: frozenset[int] = frozenset()  # a graph with plugins: emulated segment by segment
        self.probe_first = False  # a timed session: create it in a child process first (a crash there is an error)
        self._running = native.Operation(  # made once: entered around every inference (about a microsecond)
            f"running {self.model_path.name} in ONNX Runtime",
            key=f"onnxruntime-run:{self.source}",
            model=str(self.source),
        )

    @classmethod
    def from_config(cls, model_path: Path, backends: Backends, samples: Sequence[Feed] = ()) -> OnnxRuntimeBackend:
        return cls(model_path, backends.onnxruntime)

    # -- lifecycle -------------------------------------------------------------------------
    def load(self) -> None:
        """Read the graph once, weights left in their files (lightmodel.py); the session is created on first use.
        A BF16 or FP16 graph on a CPU-only provider list runs emulated (onnxemulate.py): FP32 compute, every
        narrow tensor rounded."""
        import onnx

        if self._given is not None:  # a graph made in memory (a repair candidate, an isolation model)
            given = onnx.ModelProto.FromString(self._given.data)
            light = LightModel(self.model_path, model=given, folder=self._given.folder)
        else:
            try:
                check_graph(self.model_path)  # a clear error for a file that is missing, not ONNX, cyclic or short
                light = LightModel(self.model_path)
            except UsageError as exc:  # unreadable or not ONNX: the model under test is broken
                raise cannot_load("ONNX Runtime", self.model_path, exc) from exc
            except ValueError as exc:  # external data outside the model's folder
                raise cannot_load("ONNX Runtime", self.model_path, exc) from exc
        self.source_graph = light
        self.plugin_labels = [label(n) for n in plugin_nodes(light.model)]
        self._has_plugins = bool(self.plugin_labels)
        kinds = self._emulated_kinds()
        if kinds and holds(light.model, kinds):
            model, self.emulated = emulate(light.model, kinds)
            if self._has_plugins:  # types after a plugin are known once it ran: each segment emulated then
                self._segment_kinds = kinds
            else:
                light = light.derived(model)
        self._light = light
        self._run = self._given if self._given is not None and self.emulated is None else light.runnable()
        self._inputs, self._outputs = graph_io(light.model)
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
            assert self._run is not None
            self._session = self._make_session(self._run)

    def release(self) -> None:
        self._session = None

    def close(self) -> None:
        self._session = None
        self._light = self.source_graph = self._run = None
        self.emulated, self._loaded, self._uncomputed = None, False, None

    @property
    def plugins(self) -> Plugins:
        if self._plugins is None:
            o = self.options
            self._plugins = Plugins(dict(o.plugins), [Path(p) for p in o.plugin_path])
        return self._plugins

    def plugin_notes(self) -> list[str]:
        """Each plugin node and what computes it here (a built-in numpy reference, the user's hook, a library)."""
        if not self._has_plugins:
            return []
        libraries = bool(self.options.custom_op_libraries)
        nodes = plugin_nodes(self.graph().model)
        return [f"{label(n)} by {self.plugins.computed_by(n.op_type, libraries)}" for n in nodes]

    def uncomputed(self) -> dict[str, str]:
        """Tensors nothing computes here (downstream of a plugin node without a reference), each with why."""
        if self._uncomputed is None:
            model = self.graph().model
            libraries = bool(self.options.custom_op_libraries)
            self._uncomputed = plan(model, self.plugins, libraries).uncomputed if self._has_plugins else {}
        return self._uncomputed

    def _make_session(self, model: GraphBytes) -> Any:
        """A session, or for a graph with plugin nodes, segments of it with the plugins computed between them."""
        if self._has_plugins:  # every session of this backend runs its graph, or the graph with outputs added
            libraries = bool(self.options.custom_op_libraries)
            # segments run one after another: a segment's threads spinning after its run take the next one's cores
            segment = functools.partial(self._session_of, spin=False)
            return SegmentedSession(model, self.plugins, segment, libraries, self._segment_kinds)
        return self._session_of(model)

    def _session_of(self, model: GraphBytes, spin: bool = True) -> Any:
        ort = require("onnxruntime", "the onnxruntime backend")
        so = ort.SessionOptions()
        # an emulated graph runs as written: an optimiser dropping a Cast pair would drop its rounding
        level = "disable" if self.emulated is not None else self.options.graph_optimization_level
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, LEVELS[level])
        so.intra_op_num_threads = self.options.intra_op_num_threads
        so.inter_op_num_threads = self.options.inter_op_num_threads
        so.log_severity_level = 3
        for lib in self.options.custom_op_libraries:
            try:
                so.register_custom_ops_library(str(lib))
            except Exception as exc:  # noqa: BLE001 - ORT raises its own types for a library it cannot load
                raise BackendError(f"ONNX Runtime cannot load the custom-op library {lib}: {exc}") from exc
        if not (self.options.allow_spinning and spin):
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        available = ort.get_available_providers()
        missing = [p for p in self.options.providers if p not in available]
        if missing:
            raise MissingDependency(
                f"ONNX Runtime provider(s) {', '.join(missing)} not available here (available: {', '.join(available)})",
                "pip install onnxruntime-gpu   (for CUDAExecutionProvider / TensorrtExecutionProvider), "
                "or change backends.onnxruntime.providers",
            )
        what = self.model_path.name
        if self.probe_first:  # a timed session: made in a child process first (ortprobe.py)
            ensure_loadable(model, level, self.options.providers, what)
        so.add_session_config_entry(EXTERNAL_FOLDER, str(model.folder))  # weights read where they are
        with native.Operation(
            f"creating an ONNX Runtime {ort.__version__} session for {what} at graph_optimization_level {level}",
            key=f"onnxruntime-session:{self.source}:{level}:{','.join(self.options.providers)}",
            hint=_workaround(level),
            model=str(self.source),
        ):
            try:
                return ort.InferenceSession(model.data, sess_options=so, providers=list(self.options.providers))
            except Exception as exc:  # ORT raises its own exception types (Fail, InvalidGraph, ...)
                raise LoadError(f"ONNX Runtime cannot load {self.model_path}: {exc}") from exc

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
        cast = self._cast(feed)
        with self._running:
            try:
                values = self._session.run(names, cast)
            except (UsageError, BackendError):  # a plugin's reference: not found (exit 2), or it failed (named)
                raise
            except Exception as exc:
                raise RunError(f"ONNX Runtime failed running {self.model_path.name}: {exc}") from exc
        return dict(zip(names, values))

    # -- intermediates ---------------------------------------------------------------------
    def graph(self) -> LightModel:
        """The graph that runs (an FP16/BF16 graph's emulated twin), weights left in their files."""
        if not self._loaded:
            self.load()
        assert self._light is not None
        return self._light

    def intermediates(self) -> list[str]:
        """Node outputs that carry values derived from the inputs (shape-only tensors, and the tensors an emulation
        added, left out)."""
        skip = self.uncomputed()
        return [t for t in self.graph().info.value_tensors() if not internal(t) and t not in skip]

    def expose(self, names: Sequence[str]) -> list[str]:
        """Make `names` graph outputs too. Outputs are declared untyped: ONNX Runtime infers
        their real type, so FP16, INT8 QDQ and mixed graphs never get a wrong declaration."""
        if not self._loaded:
            self.load()
        info = self.graph().info
        known = set(info.producers) | set(info.inputs)
        skip = self.uncomputed()
        chosen = [n for n in dict.fromkeys(names) if n in known and n not in skip]
        self._run = self.graph().with_outputs(chosen)
        self._session = None
        self._session = self._make_session(self._run)
        return chosen
