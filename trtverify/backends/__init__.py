"""Backends: one small protocol, a registry of 'module:Class' strings (nothing heavy imported here)."""

from __future__ import annotations

import importlib
from typing import Any

from trtverify.backends.base import Backend
from trtverify.errors import UsageError, unknown

REGISTRY: dict[str, str] = {
    "onnxruntime": "trtverify.backends.onnxruntime:OnnxRuntimeBackend",
    "torch": "trtverify.backends.torch:TorchBackend",
}


def backend_class(name: str) -> type[Any]:
    """The class registered under `name`; a typo gets a 'did you mean'."""
    try:
        target = REGISTRY[name]
    except KeyError:
        raise UsageError(unknown("backend", name, REGISTRY)) from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)


__all__ = ["Backend", "REGISTRY", "backend_class"]
