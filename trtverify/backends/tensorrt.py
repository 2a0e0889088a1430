"""TensorRT and TensorRT-RTX backends: thin wrappers over Polygraphy's TensorRT loaders and runner.

Nothing heavy is imported at module import time: Polygraphy and TensorRT are imported in
`load()` through `trtverify.util.deps.require`, so a machine without them gets MissingDependency
(exit code 3) with the pip command, and only when one of these backends is used.

What the Polygraphy calls are (all in `polygraphy.backend.trt`, Polygraphy 0.53):
`NetworkFromOnnxPath(strongly_typed=...)` parses the ONNX file; `ModifyNetworkOutputs`
marks network outputs (names escaped: it treats `* ? [ ]` as wildcards); `MarkDebug` marks
debug tensors; `SetLayerPrecisions` pins layer precisions; `CreateConfig` (precision flags,
`Calibrator`, `Profile`s, precision constraints, optimisation level, memory pools, timing
cache); `EngineBytesFromNetwork` builds the serialized engine; `EngineFromBytes` /
`EngineFromPath` deserialize; `TrtRunner` runs. The build log is Polygraphy's `G_LOGGER`
output, which includes every TensorRT message (Polygraphy's TensorRT logger forwards them),
captured through `G_LOGGER.use_python_logging_system`.

How TensorRT tensors pair with the reference: docs/tensorrt.md, "Pairing TensorRT tensors with the reference".
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.backends.base import Backend, Capabilities, Feed, cannot_load, cast_float, check_feed
from trtverify.backends.tensorrt_support import (
    calibration_feeds,
    calibrator_options,
    captured_log,
    default_profile,
    engine_io,
    failure,
    holds_qdq,
    literal,
    python_warnings,
    resolve_strongly_typed,
)
from trtverify.config.backends import Backends, TensorRTOptions
from trtverify.graph.onnxinfo import TensorMeta, graph_io, load_onnx
from trtverify.util import native
from trtverify.util.deps import require
from trtverify.util.errors import BackendError, TrtVerifyError, UsageError

_LAYER_DTYPES = {"fp32": "FLOAT", "fp16": "HALF", "bf16": "BF16", "int8": "INT8", "fp8": "FP8"}
# TensorRT layer types (the ONNX op types of Q/DQ are trtverify.graph.onnxgraph.QDQ_OPS)
_QDQ_LAYER_TYPES = ("QUANTIZE", "DEQUANTIZE", "DYNAMIC_QUANTIZE")
_NOT_MARKABLE_LAYER_TYPES = ("SHAPE", "CONSTANT")  # as in Polygraphy's mark_layerwise
# TensorRT cannot mark tensors inside a loop body as network outputs (layers are in topological
# order: a body starts at its trip-limit / iterator / recurrence layer and ends at LOOP_OUTPUT)
_LOOP_BODY_START = ("TRIP_LIMIT", "ITERATOR", "RECURRENCE")
_LOOP_BODY_END = ("LOOP_OUTPUT",)
_NOT_MARKABLE = set(_NOT_MARKABLE_LAYER_TYPES) | {"SHAPE_TENSOR", "LOOP_BODY"}
ENV_RTX = "POLYGRAPHY_USE_TENSORRT_RTX"
# Polygraphy modules that bind tensorrt or tensorrt_rtx when they are imported
_BOUND_MODULES = ("polygraphy.backend.trt", "polygraphy.datatype.tensorrt")


class TensorRTBackend(Backend):
    """ONNX model -> TensorRT engine (built with Polygraphy) -> outputs and marked intermediates."""

    name = "tensorrt"
    capabilities = Capabilities(exposes_intermediates=True, onnx_graph=False, casts_feeds=True)
    module = "tensorrt"  # the Python module of the TensorRT library
    rtx = False
    config_attr = "tensorrt"  # attribute of the suite's `backends:` section

    def __init__(
        self, model_path: Path, options: TensorRTOptions | None = None, *, calibration_feeds: Sequence[Feed] = ()
    ):
        super().__init__()
        self.model_path = Path(model_path)
        self.options = options or TensorRTOptions()
        self.calibration_feeds = list(calibration_feeds)
        self.build_log = ""  # text of the last build (or engine load)
        self.runtime_log = ""  # text of the last engine deserialisation / runner activation
        self.build_info: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.version: str | None = None
        self.strongly_typed: bool | None = None
        self.marked: list[str] = []  # network outputs (or debug tensors) of the last build
        self._trt: Any = None
        self._pg: Any = None  # polygraphy.backend.trt
        self._G: Any = None  # polygraphy.logger.G_LOGGER
        self._inputs: list[TensorMeta] | None = None
        self._outputs: list[TensorMeta] | None = None
        self._exposed: list[str] = []
        self._tensor_kinds: dict[str, str] | None = None  # tensor -> producing layer type, parsed network
        self._onnx_names: list[str] | None = None
        self._qdq: bool | None = None  # whether the ONNX graph holds Q/DQ nodes (from its one parse)
        self._engine_bytes: bytes | None = None
        self._runner: Any = None
        self._running: native.Operation | None = None

    @classmethod
    def from_config(cls, model_path: Path, backends: Backends, samples: Sequence[Feed] = ()) -> TensorRTBackend:
        """Options from `backends.<config_attr>`; the samples double as calibration feeds."""
        return cls(model_path, getattr(backends, cls.config_attr), calibration_feeds=list(samples))

    # -- loading ---------------------------------------------------------------------------
    def _import(self) -> None:
        if self._pg is not None:
            return
        purpose = f"the {self.name} backend"
        if self.rtx:
            os.environ[ENV_RTX] = "1"  # read by polygraphy.config at its first import
        self._trt = require(self.module, purpose)
        require("polygraphy", purpose)
        from polygraphy import config as pg_config

        if bool(pg_config.USE_TENSORRT_RTX) != self.rtx:
            if any(m in sys.modules for m in _BOUND_MODULES):
                raise UsageError(
                    f"the {self.name} backend cannot run in this process: Polygraphy is already bound to "
                    f"{'tensorrt_rtx' if pg_config.USE_TENSORRT_RTX else 'tensorrt'} (it picks one TensorRT module per "
                    f"process, from {ENV_RTX}); use tensorrt and tensorrt-rtx candidates in separate runs"
                )
            pg_config.USE_TENSORRT_RTX = self.rtx  # what polygraphy.mod.trt_importer reads
        self._pg = require("polygraphy.backend.trt", purpose)
        from polygraphy.logger import G_LOGGER

        self._G = G_LOGGER
        self.version = str(self._trt.__version__)

    def load(self) -> None:
        """Import Polygraphy and TensorRT; read the I/O of the ONNX model (or of the prebuilt engine)."""
        self._import()
        if self.options.engine is not None:
            self._engine_io()
        else:
            self._onnx_io()

    def _onnx_io(self) -> None:
        if self._inputs is None:
            try:
                model = load_onnx(self.model_path, with_weights=False)
            except UsageError as exc:  # unreadable or not ONNX: the model under test is broken
                raise cannot_load(self.name, self.model_path, exc) from exc
            self._inputs, self._outputs = graph_io(model)
            self._onnx_names = [t for n in model.graph.node for t in n.output if t]
            self._qdq = holds_qdq(model)

    def _engine_io(self) -> None:
        self._inputs, self._outputs = engine_io(self._deserialize(), self._trt)

    # -- logging ---------------------------------------------------------------------------
    def _captured_log(self) -> contextlib.AbstractContextManager[list[str]]:
        return captured_log(self._G, self.options.log_verbosity)

    def _fail(self, what: str, exc: BaseException, lines: Sequence[str]) -> BackendError:
        return failure(self.name, self.rtx, self.version, self.model_path, what, exc, lines)

    # -- metadata --------------------------------------------------------------------------
    def _io(self) -> None:
        if self._inputs is None:
            if self.options.engine is not None:
                self.load()
            else:
                self._onnx_io()

    def inputs(self) -> list[TensorMeta]:
        self._io()
        return list(self._inputs or [])

    def outputs(self) -> list[TensorMeta]:
        self._io()
        return list(self._outputs or [])

    # -- network ---------------------------------------------------------------------------
    def _resolve_mode(self) -> bool:
        if self.strongly_typed is None:
            try:
                self.strongly_typed = resolve_strongly_typed(self.options, rtx=self.rtx, version=self.version or "0")
            except ValueError as exc:
                raise UsageError(f"backends.{self.config_attr}: {exc}") from None
        return self.strongly_typed

    def _parse(self) -> Any:
        """The Polygraphy loader that parses the ONNX file (strongly typed when applicable)."""
        strong = self._resolve_mode()
        flag = strong and hasattr(self._trt.NetworkDefinitionCreationFlag, "STRONGLY_TYPED")
        # TensorRT 11 keeps STRONGLY_TYPED only for compatibility (ignored); where a library has
        # dropped the flag its networks are strongly typed anyway.
        return self._pg.NetworkFromOnnxPath(str(self.model_path), strongly_typed=flag)

    def _kinds(self) -> dict[str, str]:
        """Tensor -> producing layer type of every layer output in the parsed network."""
        if self._tensor_kinds is None:
            self._import()
            self._onnx_io()
            with self._captured_log() as lines:
                try:
                    _builder, network, _parser = self._parse()()
                    kinds: dict[str, str] = {}
                    in_loop = False
                    for layer in network:
                        if layer.type.name in _LOOP_BODY_START:
                            in_loop = True
                        elif layer.type.name in _LOOP_BODY_END:
                            in_loop = False
                        for i in range(layer.num_outputs):
                            t = layer.get_output(i)
                            if t is None:
                                continue
                            shape_tensor = False
                            with contextlib.suppress(Exception):
                                shape_tensor = bool(t.is_shape_tensor)
                            kinds[t.name] = (
                                "LOOP_BODY" if in_loop else "SHAPE_TENSOR" if shape_tensor else layer.type.name
                            )
                    inputs = {network.get_input(i).name for i in range(network.num_inputs)}
                except TrtVerifyError:
                    raise
                except Exception as exc:
                    raise self._fail("parsing the ONNX model", exc, lines) from exc
            self._tensor_kinds = {k: v for k, v in kinds.items() if k not in inputs}
        return self._tensor_kinds

    def intermediates(self) -> list[str]:
        """Layer outputs of the parsed network that can be compared with the ONNX reference.

        The rule of Polygraphy's mark-all (no SHAPE or CONSTANT layers, nothing inside loop
        bodies), minus shape tensors, Q/DQ layer outputs and TensorRT-only helper tensors; in
        network order. ONNX names. (Not `ModifyNetworkOutputs(outputs=MARK_ALL)` itself: in
        Polygraphy 0.53.6 it passes TensorRT's generated names through fnmatch, which drops
        `(Unnamed Layer* 3) [Shuffle]_output`-style tensors.)
        A prebuilt engine has none (its outputs are fixed).
        """
        if self.options.engine is not None:
            return []
        kinds = self._kinds()
        onnx_names = set(self._onnx_names or [])
        skip = _NOT_MARKABLE | set(_QDQ_LAYER_TYPES)
        return [t for t, kind in kinds.items() if kind not in skip and t in onnx_names]

    def expose(self, names: Sequence[str]) -> list[str]:
        """Remember `names` to mark for the next build (network outputs, or debug tensors).

        Returns those the parsed network has and that can be marked (not network inputs, not
        outputs of SHAPE/CONSTANT layers, not shape tensors, not inside loop bodies, not
        already model outputs). Any
        engine built before is dropped: the next `infer()` rebuilds.
        """
        if self.options.engine is not None:
            return []
        kinds = self._kinds()
        existing = {m.name for m in self.outputs()}
        chosen = [n for n in dict.fromkeys(names) if n in kinds and kinds[n] not in _NOT_MARKABLE and n not in existing]
        if chosen != self._exposed:
            self._exposed = chosen
            self._drop_engine()
        return list(chosen)

    # -- building --------------------------------------------------------------------------
    def _profiles(self, extra: Sequence[Feed] = ()) -> list[Any] | None:
        """Polygraphy Profiles from the options, or one spanning the known feeds' shapes."""
        Profile = self._pg.Profile
        declared = {m.name: m for m in self.inputs()}
        if self.options.profiles:
            out = []
            for i, prof in enumerate(self.options.profiles):
                unknown = sorted(set(prof) - set(declared))
                if unknown:
                    raise UsageError(
                        f"backends.{self.config_attr}.profiles[{i}]: {', '.join(unknown)} not inputs of "
                        f"{self.model_path.name} (inputs: {', '.join(declared)})"
                    )
                p = Profile()
                for name, r in prof.items():
                    p.add(name, min=tuple(r.min), opt=tuple(r.opt), max=tuple(r.max))
                out.append(p)
            return out
        feeds = list(self.calibration_feeds) + list(extra)
        return default_profile(Profile, list(declared.values()), feeds, f"backends.{self.config_attr}")

    def _has_qdq(self) -> bool:
        if self._qdq is None:  # metadata came from a prebuilt engine: the graph was not parsed yet
            model = load_onnx(self.model_path, with_weights=False)
            self._qdq = holds_qdq(model)
        return self._qdq

    def _config(self, strong: bool, profiles: list[Any] | None) -> Any:
        """Polygraphy CreateConfig from the options (precision flags only when weakly typed)."""
        pg, trt, o = self._pg, self._trt, self.options
        flags = set(o.precisions)
        kwargs: dict[str, Any] = {
            "tf32": "tf32" in flags,
            "profiles": profiles,
            "builder_optimization_level": o.builder_optimization_level,
            "load_timing_cache": str(o.timing_cache) if o.timing_cache else None,
        }
        if o.workspace_mb is not None:
            kwargs["memory_pool_limits"] = {trt.MemoryPoolType.WORKSPACE: o.workspace_mb << 20}
        if not strong:
            kwargs.update(fp16="fp16" in flags, bf16="bf16" in flags, int8="int8" in flags, fp8="fp8" in flags)
            if o.precision_constraints != "none":
                kwargs["precision_constraints"] = o.precision_constraints
            if "int8" in flags:
                feeds, note = calibration_feeds(self.calibration_feeds, o.calibration_samples, profiles)
                self.warnings += [note] if note else []
                cache = str(o.calibration_cache) if o.calibration_cache else None
                if feeds or (o.calibration_cache is not None and o.calibration_cache.is_file()):
                    kwargs["calibrator"] = pg.Calibrator(feeds, cache=cache, **calibrator_options(trt, o))
                elif not self._has_qdq():
                    self.warnings.append(
                        "precisions has int8 but there are no calibration samples, no calibration cache and no Q/DQ "
                        "nodes in the model: TensorRT has no INT8 scales and runs those layers in higher precision"
                    )
        return pg.CreateConfig(**kwargs)

    def _network(self) -> Any:
        pg, o = self._pg, self.options
        net = self._parse()
        if o.layer_precisions:
            trt = self._trt
            net = pg.SetLayerPrecisions(
                net, {k: getattr(trt.DataType, _LAYER_DTYPES[v]) for k, v in o.layer_precisions.items()}
            )
        if self._exposed:
            if o.outputs_mode == "debug_tensors":
                net = pg.MarkDebug(net, mark_debug=list(self._exposed))
            else:
                keep = [m.name for m in self.outputs()]
                net = pg.ModifyNetworkOutputs(net, outputs=[literal(n) for n in keep + self._exposed])
        return net

    def build(self, *, _extra_shapes: Sequence[Feed] = ()) -> bytes:
        """Parse, mark the exposed tensors, configure, build; returns the serialized engine.

        The whole Polygraphy/TensorRT log of the build lands in `self.build_log` (and in
        `options.build_log` if set); facts about the build in `self.build_info`.
        """
        if self.options.engine is not None:
            raise UsageError(f"backends.{self.config_attr}.engine is a prebuilt engine: nothing to build")
        self._import()
        self._onnx_io()
        strong = self._resolve_mode()
        self.warnings = []
        profiles = self._profiles(_extra_shapes)
        lib = "TensorRT-RTX" if self.rtx else "TensorRT"
        header = [
            f"# trtverify {self.name} build of {self.model_path}",
            f"# {lib} {self.version}, strongly typed: {strong}, outputs_mode: {self.options.outputs_mode}, "
            f"tensors marked: {len(self._exposed)}",
        ]
        if self.rtx and self.options.timing_cache is not None:
            self.warnings.append(
                "timing_cache has no effect with TensorRT-RTX (its timing cache operations are no-ops since 1.2)"
            )
        t0 = time.perf_counter()
        with self._captured_log() as lines, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # e.g. TensorRT-RTX's DeprecationWarnings: kept in the log
            try:
                config = self._config(strong, profiles)
                save_cache = str(self.options.timing_cache) if self.options.timing_cache else None
                loader = self._pg.EngineBytesFromNetwork(self._network(), config=config, save_timing_cache=save_cache)
                with native.Operation(
                    f"building a {lib} {self.version} engine from {self.model_path.name}",
                    key=f"tensorrt-build:{self.model_path}",
                    model=str(self.model_path),
                ):
                    serialized = loader()
                engine_bytes = bytes(serialized)
            except TrtVerifyError:
                raise
            except Exception as exc:
                self.build_log = "\n".join(header + python_warnings(caught) + lines) + "\n"
                self._write_log()
                raise self._fail("building the engine", exc, lines) from exc
        seconds = time.perf_counter() - t0
        if self.options.save_engine is not None:
            from polygraphy import util as pg_util

            with self._captured_log() as saving:  # keeps Polygraphy's "Saving engine" line off stdout
                # the serialized bytes, as built: SaveEngine would need a deserialized engine
                pg_util.save_file(engine_bytes, str(self.options.save_engine), description="engine")
            lines += saving
        notes = [f"# warning: {w}" for w in self.warnings] + python_warnings(caught)
        self.build_log = "\n".join(header + notes + lines) + "\n"
        self._write_log()
        self._engine_bytes = engine_bytes
        self.marked = list(self._exposed)
        self.build_info = {
            "library": lib,
            "version": self.version,
            "strongly_typed": strong,
            "outputs_mode": self.options.outputs_mode,
            "marked": len(self.marked),
            "engine_bytes": len(engine_bytes),
            "build_s": round(seconds, 3),
            "log_lines": len(lines),
        }
        return engine_bytes

    def _write_log(self) -> None:
        if self.options.build_log is not None:
            self.options.build_log.parent.mkdir(parents=True, exist_ok=True)
            self.options.build_log.write_text(self.build_log, encoding="utf-8")

    # -- running ---------------------------------------------------------------------------
    def _deserialize(self) -> Any:
        """The ICudaEngine (from the built bytes or the prebuilt file); clear error when the GPU is unsupported."""
        pg = self._pg
        loader = (
            pg.EngineFromPath(str(self.options.engine))
            if self.options.engine is not None
            else pg.EngineFromBytes(self._engine_bytes)
        )
        with self._captured_log() as lines:
            try:
                engine = loader()
            except TrtVerifyError:
                raise
            except Exception as exc:
                self.runtime_log = "\n".join(lines) + "\n"
                raise self._fail("loading the engine", exc, lines) from exc
        self.runtime_log = "\n".join(lines) + "\n"
        return engine

    def _activate(self, feed: Feed) -> None:
        """Build (or load) the engine at the first inference: its optimisation profile then spans the
        shape of that first feed too (an e2e batch may differ from the suite's samples), so `prepare`
        is left a no-op here."""
        if self.options.engine is None and self._engine_bytes is None:
            self.build(_extra_shapes=[feed])
        engine = self._deserialize()
        runner = self._pg.TrtRunner(engine, name=self.name)
        with self._captured_log() as lines:
            try:
                runner.activate()
            except TrtVerifyError:
                raise
            except Exception as exc:
                raise self._fail("creating the execution context", exc, lines) from exc
        self._runner = runner

    def _cast(self, feed: Feed) -> Feed:
        declared = {m.name: m for m in self.inputs()}
        check_feed(feed, declared, self.model_path.name)
        out = {}
        for name, arr in feed.items():
            arr = np.ascontiguousarray(arr)
            cast = cast_float(name, arr, declared[name].dtype, self.casts)
            out[name] = arr if cast is None else cast  # TensorRT reports other type mismatches itself
        return out

    def infer(self, feed: Feed) -> dict[str, np.ndarray]:
        """Outputs and marked intermediates for one feed; builds (or loads the engine) on first use."""
        self._import()
        prepared = self._cast(feed)
        if self._runner is None:
            self._activate(prepared)
        if self._running is None:  # made once: entered around every inference
            model = str(self.model_path)
            self._running = native.Operation(
                f"running {self.model_path.name} in TensorRT", key=f"tensorrt-run:{model}", model=model
            )
        with self._captured_log() as lines, self._running:
            try:
                outputs = self._runner.infer(prepared)
            except TrtVerifyError:
                raise
            except Exception as exc:
                raise self._fail("inference", exc, lines) from exc
        return {k: np.array(v, copy=True) for k, v in outputs.items()}  # the runner reuses its buffers

    def _drop_engine(self) -> None:
        self.close()
        self._engine_bytes = None

    def release(self) -> None:
        """Deactivate the runner; the built engine is kept."""
        if self._runner is not None:
            with contextlib.suppress(Exception):
                self._runner.deactivate()
            self._runner = None

    def close(self) -> None:
        self.release()


class TensorRTRTXBackend(TensorRTBackend):
    """The same over TensorRT-RTX (`tensorrt_rtx`): strongly typed networks, no precision flags.

    Polygraphy drives TensorRT-RTX when POLYGRAPHY_USE_TENSORRT_RTX=1 is set before it is
    imported; `load()` sets it. One process can use Polygraphy with either TensorRT or
    TensorRT-RTX, not both.
    """

    name = "tensorrt-rtx"
    module = "tensorrt_rtx"
    rtx = True
    config_attr = "tensorrt_rtx"
