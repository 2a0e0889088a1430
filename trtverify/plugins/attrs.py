"""Reading a plugin node's attributes and checking its inputs, with errors that name the plugin and what to fix.

Attributes arrive decoded from the ONNX node (int, float, str, lists of those). TensorRT's plugin creators read
booleans as INT32 fields and ignore fields they do not know (`plugin_version`, `plugin_namespace`, ...); the
references do the same.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from trtverify.util.errors import BackendError


class PluginError(BackendError):
    """A plugin node TensorRT would reject or misread: wrong attribute values or input shapes."""


def _scalar(op: str, attrs: Mapping[str, Any], name: str) -> Any:
    value = attrs[name]
    if isinstance(value, list | tuple):
        if len(value) != 1:
            raise PluginError(f"{op}: attribute '{name}' must be one value, got {list(value)!r}")
        value = value[0]
    if isinstance(value, bytes):
        value = value.decode()
    return value


def get_int(op: str, attrs: Mapping[str, Any], name: str, default: int | None = None) -> int:
    """An INT32 attribute; `default` None makes it required."""
    if name not in attrs:
        if default is None:
            raise PluginError(f"{op}: the node has no attribute '{name}', which the plugin needs")
        return default
    value = _scalar(op, attrs, name)
    if isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    raise PluginError(f"{op}: attribute '{name}' must be an integer, got {value!r}")


def get_float(op: str, attrs: Mapping[str, Any], name: str, default: float | None = None) -> float:
    """A FLOAT32 attribute (an integer is accepted); `default` None makes it required."""
    if name not in attrs:
        if default is None:
            raise PluginError(f"{op}: the node has no attribute '{name}', which the plugin needs")
        return default
    value = _scalar(op, attrs, name)
    if isinstance(value, bool | int | float | np.integer | np.floating):
        return float(np.float32(value))
    raise PluginError(f"{op}: attribute '{name}' must be a number, got {value!r}")


def get_bool(op: str, attrs: Mapping[str, Any], name: str, default: bool | None = None) -> bool:
    """A flag stored as INT32 (any non-zero is true, as the plugins read it)."""
    if name not in attrs and default is not None:
        return default
    return get_int(op, attrs, name, None if default is None else int(default)) != 0


def get_choice(op: str, attrs: Mapping[str, Any], name: str, default: int, words: Mapping[str, int]) -> int:
    """An INT32 enum that may also be written as ONNX's string (e.g. RoiAlign's mode 'avg')."""
    if name in attrs and isinstance(_scalar(op, attrs, name), str):
        word = _scalar(op, attrs, name)
        if word not in words:
            known = f"{', '.join(words)} or {sorted(set(words.values()))}"
            raise PluginError(f"{op}: attribute '{name}' is '{word}'; known: {known}")
        return words[word]
    value = get_int(op, attrs, name, default)
    if value not in set(words.values()):
        raise PluginError(f"{op}: attribute '{name}' is {value}; allowed: {sorted(set(words.values()))}")
    return value


def float_input(op: str, name: str, array: Any, ndims: tuple[int, ...]) -> np.ndarray:
    """A float32/float16 input of one of the given ranks (TensorRT's NMS and RoIAlign plugins take no other type)."""
    if array is None:
        raise PluginError(f"{op}: input '{name}' is missing")
    a = np.asarray(array)
    if a.dtype not in (np.float32, np.float16):
        a = a.astype(np.float32)
    if a.ndim not in ndims:
        want = " or ".join(f"{n}-D" for n in ndims)
        raise PluginError(f"{op}: input '{name}' must be {want}, got shape {list(a.shape)}")
    return a
