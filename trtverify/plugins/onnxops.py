"""Which nodes are plugins: ops ONNX Runtime does not have (what TensorRT's ONNX parser, too, hands to a plugin)."""

from __future__ import annotations

import functools
from typing import Any


@functools.cache
def known_ops() -> frozenset[tuple[str, str]]:
    """(domain, op_type) of every op ONNX Runtime has a schema for ('' for the ONNX domain)."""
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    return frozenset((s.domain, s.name) for s in C.get_all_operator_schema())


def is_plugin(node: Any) -> bool:
    """A node ONNX Runtime has no op for: to TensorRT's parser, a plugin (found by op_type)."""
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    return (domain, node.op_type) not in known_ops()


def plugin_nodes(model: Any) -> list[Any]:
    return [n for n in model.graph.node if is_plugin(n)]


def label(node: Any) -> str:
    return f"{node.op_type} '{node.name}'" if node.name else node.op_type
