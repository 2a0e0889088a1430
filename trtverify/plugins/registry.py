"""Which reference computes each plugin node: a user's hook, one trtverify ships, or ONNX Runtime itself.

A plugin reference is a callable that receives the node's inputs as numpy arrays (positionally, in the node's input
order; an omitted optional input is None) and the node's attributes as keyword arguments, and returns its output(s)
in the node's output order (one array, or a tuple of arrays). TensorRT's ONNX parser finds a plugin by op_type,
whatever the node's domain, and so does trtverify. What each built-in one computes: docs/plugins.md, "Built-in
references".

Precedence: the suite's `plugins:` (or `--plugin OP=module:callable`), then BUILTIN, then ONNX Runtime (an op that a
library in `backends.onnxruntime.custom_op_libraries` provides). `plugins: {OP: onnxruntime}` hands an op that has a
built-in reference to such a library instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.util.errors import BackendError, UsageError
from trtverify.util.hooks import is_hook_spec, load_hook

# op_type -> 'module:callable' (imported on first use)
BUILTIN: dict[str, str] = {
    "EfficientNMS_TRT": "trtverify.plugins.efficientnms:efficient_nms",
    "BatchedNMS_TRT": "trtverify.plugins.batchednms:batched_nms",
    "BatchedNMSDynamic_TRT": "trtverify.plugins.batchednms:batched_nms_dynamic",
    "TRTBatchedNMS": "trtverify.plugins.trtbatchednms:trt_batched_nms",
    "ROIAlign_TRT": "trtverify.plugins.roialign:roi_align",
}

ONNXRUNTIME = "onnxruntime"  # a `plugins:` value: ONNX Runtime runs the op (a custom-op library provides it)


def check_spec(op_type: str, spec: str) -> str | None:
    """Why `op_type: spec` is not a valid `plugins:` entry (None: it is)."""
    if not op_type or not op_type.replace("_", "a").replace(".", "a").isalnum():
        return f"'{op_type}' is not an op type (the node's op_type, e.g. EfficientNMS_TRT)"
    if spec != ONNXRUNTIME and not is_hook_spec(spec):
        return f"'{spec}' is neither 'module:callable' nor '{ONNXRUNTIME}'"
    return None


def parse_option(value: str) -> tuple[str, str]:
    """`OP=module:callable` from the command line."""
    op, sep, spec = value.partition("=")
    problem = check_spec(op.strip(), spec.strip()) if sep else f"'{value}' is not OP=module:callable"
    if problem:
        raise UsageError(f"--plugin {value}: {problem}")
    return op.strip(), spec.strip()


def attributes(node: Any) -> dict[str, Any]:
    """The node's attributes as Python values (bytes decoded to str, tensors to numpy arrays)."""
    from onnx import helper, numpy_helper

    out: dict[str, Any] = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode("utf-8", "replace")
        elif isinstance(v, list) and v and isinstance(v[0], bytes):
            v = [x.decode("utf-8", "replace") for x in v]
        elif hasattr(v, "dims") and hasattr(v, "data_type"):
            v = numpy_helper.to_array(v)
        out[a.name] = v
    return out


@dataclass
class Plugins:
    """The plugin references of one run: the suite's hooks over the built-in ones."""

    hooks: Mapping[str, str] = field(default_factory=dict)
    search_path: Sequence[Path] = ()
    _loaded: dict[str, Callable[..., Any]] = field(default_factory=dict)

    def spec(self, op_type: str) -> str | None:
        """'module:callable', ONNXRUNTIME, or None (no reference)."""
        return self.hooks.get(op_type) or BUILTIN.get(op_type)

    def describe(self, op_type: str) -> str:
        if op_type in self.hooks:
            return f"hook {self.hooks[op_type]}"
        return "built-in reference" if op_type in BUILTIN else "no reference"

    def computed_by(self, op_type: str, libraries: bool = False) -> str:
        """How a node of `op_type` is computed here, in words (`libraries`: custom-op libraries are registered)."""
        spec = self.spec(op_type)
        if spec == ONNXRUNTIME or (spec is None and libraries):
            return "ONNX Runtime, from a library in backends.onnxruntime.custom_op_libraries"
        if op_type in self.hooks:
            return f"the user's reference {spec} (the suite's plugins: or --plugin)"
        if spec is not None:
            return f"trtverify's built-in numpy reference {spec} (docs/plugins.md)"
        return "nothing: no reference, so it and what follows it are not compared (give one: docs/plugins.md)"

    def reference(self, op_type: str) -> Callable[..., Any]:
        if op_type not in self._loaded:
            spec = self.spec(op_type)
            assert spec and spec != ONNXRUNTIME
            path = self.search_path if op_type in self.hooks else ()
            self._loaded[op_type] = load_hook(spec, path, what=f"plugin {op_type}")
        return self._loaded[op_type]

    def run(self, node: Any, label: str, inputs: Sequence[np.ndarray | None]) -> list[np.ndarray]:
        """The node's outputs computed by its reference, checked: as many arrays as the node has outputs."""
        fn = self.reference(node.op_type)
        where = f"plugin {node.op_type} (node {label}, {self.describe(node.op_type)})"
        args = list(inputs)
        while args and args[-1] is None:  # trailing optional inputs left out, as the node leaves them out
            args.pop()
        try:
            result = fn(*args, **attributes(node))
        except UsageError:
            raise
        except Exception as exc:  # noqa: BLE001 - a user's reference failing is that model's error, named
            raise BackendError(f"{where} failed: {type(exc).__name__}: {exc}") from exc
        values = list(result) if isinstance(result, (tuple, list)) else [result]
        wanted = len(node.output)
        if len(values) != wanted or any(not isinstance(v, (np.ndarray, np.generic)) for v in values):
            got = ", ".join(type(v).__name__ for v in values)
            raise BackendError(
                f"{where} returned {len(values)} value(s) ({got}); the node has {wanted} output(s): return a numpy "
                "array per output, in the node's output order"
            )
        return [np.asarray(v) for v in values[:wanted]]
