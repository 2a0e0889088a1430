"""TensorRT plugin nodes in ONNX graphs: numpy references for the plugins detectors ship with, and users' own.

A plugin reference is a callable that receives the node's inputs as numpy arrays (positionally, in the node's input
order; an omitted optional input is None) and the node's attributes as keyword arguments, and returns its output(s)
in the node's output order (one array, or a tuple of arrays). Built-in references are listed in BUILTIN by the
node's op_type (TensorRT's ONNX parser finds a plugin by op_type, whatever the node's domain).
"""

from __future__ import annotations

# op_type -> 'module:callable' (imported on first use)
BUILTIN: dict[str, str] = {}
