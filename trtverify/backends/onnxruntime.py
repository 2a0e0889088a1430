"""ONNX Runtime backend: the FP32 reference, and FP16 / INT8 QDQ / mixed candidates."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.config.models import OnnxRuntimeOptions
from trtverify.deps import require
from trtverify.errors import BackendError
from trtverify.onnxinfo import TensorMeta, graph_io, load_onnx

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
        self._model: Any = None
        self._inputs: list[TensorMeta] = []
        self._outputs: list[TensorMeta] = []
        self._exposed: list[str] = []
        self.casts: dict[str, tuple[str, str]] = {}  # input -> (fed dtype, model dtype), for the record

    # -- loading ---------------------------------------------------------------------------
    def load(self) -> None:
        self._model = load_onnx(self.model_path, with_weights=False)
        self._inputs, self._outputs = graph_io(self._model)
        self._session = self._make_session(str(self.model_path))

    def _make_session(self, model: str | bytes) -> Any:
        ort = require("onnxruntime", "the onnxruntime backend")
        so = ort.SessionOptions()
        so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, _LEVELS[self.options.graph_optimization_level])
        so.intra_op_num_threads = self.options.intra_op_num_threads
        so.inter_op_num_threads = self.options.inter_op_num_threads
        so.log_severity_level = 3
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
        unknown = sorted(set(feed) - set(declared))
        missing = sorted(set(declared) - set(feed))
        if unknown or missing:
            raise BackendError(
                f"{self.model_path.name}: feed does not match the model inputs"
                + (f"; missing: {', '.join(missing)}" if missing else "")
                + (f"; not inputs of the model: {', '.join(unknown)}" if unknown else "")
                + f" (model inputs: {', '.join(declared)})"
            )
        out = {}
        for name, arr in feed.items():
            want = declared[name].dtype
            arr = np.asarray(arr)
            if str(arr.dtype) != want:
                if arr.dtype.kind == "f" and want in ("float16", "float32", "float64"):
                    # FP16 converters may change input types; casting float->float is the documented normalisation
                    self.casts[name] = (str(arr.dtype), want)
                    arr = arr.astype(want)
                else:
                    raise BackendError(f"{self.model_path.name}: input '{name}' is {arr.dtype} but the model expects {want}")
            out[name] = arr
        return out

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._session is None:
            self.load()
        names = [o.name for o in self._session.get_outputs()]
        try:
            values = self._session.run(names, self._prepare(feed))
        except BackendError:
            raise
        except Exception as exc:
            raise BackendError(f"ONNX Runtime failed running {self.model_path.name}: {exc}") from exc
        return dict(zip(names, values))

    # -- intermediates ---------------------------------------------------------------------
    def intermediates(self) -> list[str]:
        """Node outputs whose element type is known after shape inference (shape-only tensors included)."""
        return list(self._typed_values())

    def _typed_values(self) -> dict[str, int]:
        import onnx

        if self._model is None:
            self._model = load_onnx(self.model_path, with_weights=False)
        inferred = onnx.shape_inference.infer_shapes(self._model)
        types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info) + list(inferred.graph.output)}
        out: dict[str, int] = {}
        for node in self._model.graph.node:
            for t in node.output:
                if t and types.get(t):
                    out[t] = types[t]
        return out

    def expose(self, names: Sequence[str]) -> list[str]:
        """Add `names` as graph outputs, declaring only the element type (never a guessed shape)."""
        import onnx

        typed = self._typed_values()
        existing = {o.name for o in self._model.graph.output}
        chosen = [n for n in names if n in typed and n not in existing]
        model = onnx.load(str(self.model_path), load_external_data=True)
        for n in chosen:
            model.graph.output.append(onnx.helper.make_tensor_value_info(n, typed[n], None))
        self._session = self._make_session(model.SerializeToString())
        self._exposed = chosen
        return chosen

    def close(self) -> None:
        self._session = None
