"""Backends: one small protocol, a registry of 'module:Class' strings (nothing heavy imported here)."""

from __future__ import annotations

import importlib
from typing import Any

from trtverify.backends.base import Backend
from trtverify.errors import UsageError, unknown

REGISTRY: dict[str, str] = {
    "onnxruntime": "trtverify.backends.onnxruntime:OnnxRuntimeBackend",
    "torch": "trtverify.backends.torch:TorchBackend",
    "tensorrt": "trtverify.backends.tensorrt:TensorRTBackend",
    "tensorrt-rtx": "trtverify.backends.tensorrt:TensorRTRTXBackend",
}

# Backends that can run an ONNX model as a candidate. Each class offers
# from_config(model_path, backends_config, samples) -> a backend ready to load.
CANDIDATE_BACKENDS = ("onnxruntime", "tensorrt", "tensorrt-rtx")


def backend_class(name: str) -> type[Any]:
    """The class registered under `name`; a typo gets a 'did you mean'."""
    try:
        target = REGISTRY[name]
    except KeyError:
        raise UsageError(unknown("backend", name, REGISTRY)) from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


def candidate_backend(name: str, model_path: Any, backends_config: Any, samples: Any = ()) -> Any:
    """A backend instance for a candidate model, configured from the suite's `backends:` section."""
    if name not in CANDIDATE_BACKENDS:
        raise UsageError(
            f"backend '{name}' cannot run candidate ONNX models (use one of: {', '.join(CANDIDATE_BACKENDS)})"
        )
    return backend_class(name).from_config(model_path, backends_config, samples)


__all__ = ["Backend", "CANDIDATE_BACKENDS", "REGISTRY", "backend_class", "candidate_backend"]
