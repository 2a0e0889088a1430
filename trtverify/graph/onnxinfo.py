"""Static facts about an ONNX file (inputs, outputs, dtypes) without running it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trtverify.util.errors import UsageError

Dim = int | str | None


@dataclass(frozen=True)
class TensorMeta:
    name: str
    dtype: str  # numpy-style name: float32, float16, int64, ...
    shape: tuple[Dim, ...] | None  # None: rank unknown; str: a named dynamic dimension


def onnx_dtype_name(elem_type: int) -> str:
    import onnx

    try:
        np_dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    except (KeyError, ValueError):
        return onnx.TensorProto.DataType.Name(elem_type).lower()
    name = str(np_dtype)
    return "bfloat16" if elem_type == onnx.TensorProto.BFLOAT16 else name


def _meta(value_info: Any) -> TensorMeta:
    t = value_info.type.tensor_type
    shape: tuple[Dim, ...] | None = None
    if t.HasField("shape"):
        dims: list[Dim] = []
        for d in t.shape.dim:
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                dims.append(d.dim_param)
            else:
                dims.append(None)
        shape = tuple(dims)
    return TensorMeta(value_info.name, onnx_dtype_name(t.elem_type), shape)


def load_onnx(path: Path, with_weights: bool = False) -> Any:
    """onnx.ModelProto of `path`; a clear error instead of a protobuf traceback."""
    import onnx

    try:
        return onnx.load(str(path), load_external_data=with_weights)
    except FileNotFoundError as exc:
        raise UsageError(f"{path}: file not found") from exc
    except Exception as exc:  # protobuf DecodeError and friends: the file is not an ONNX model
        raise UsageError(f"{path}: not a readable ONNX model ({type(exc).__name__}: {exc})") from exc


def load_io(path: Path) -> Any:
    """A ModelProto with only the graph's inputs, outputs and initializer names (no weights read); a UsageError
    where the file is not an ONNX model (`onnx_io`) or its graph cannot run (`check_graph`)."""
    model = onnx_io(path)
    _runnable(path)
    return model


def onnx_io(path: Path) -> Any:
    """What `load_io` returns, from a file proven to be an ONNX model and nothing more: a UsageError naming it
    where it is missing, a folder, empty, cut short, not protobuf, or a protobuf message without a graph, an IR
    version or an opset (what ONNX Runtime refuses to load). The file is walked, not read: its weights, inside it
    or external, are never touched, whatever its size."""
    from trtverify.graph.onnxwire import io_model

    def read(p: Path) -> Any:
        if p.is_file() and p.stat().st_size == 0:
            raise _NotOnnx("the file is empty (0 bytes)")
        model = io_model(p)
        there = {"ir_version": model.HasField("ir_version"), "opset_import": bool(model.opset_import)}
        missing = [k for k, ok in there.items() if not ok]
        if missing:
            raise _NotOnnx(f"no {' and '.join(missing)}: the file is cut short or is not an ONNX model")
        return model

    return _readable(path, read)


def check_graph(path: Path) -> None:
    """A clear UsageError where the graph at `path` cannot run (missing, not ONNX, cyclic, external data missing,
    short or outside its folder), from the file's structure alone."""
    onnx_io(path)
    _runnable(path)


def _runnable(path: Path) -> None:
    from trtverify.graph.onnxwire import graph_problem

    problem = _readable(path, graph_problem)
    if problem:
        raise UsageError(f"{path}: {problem}")


class _NotOnnx(Exception):
    """A file read without error that is still no ONNX model (its message says why)."""


def _readable(path: Path, read: Any) -> Any:
    try:
        return read(Path(path))
    except FileNotFoundError as exc:
        raise UsageError(f"{path}: file not found") from exc
    except IsADirectoryError as exc:
        raise UsageError(f"{path}: is a folder, expected an ONNX model") from exc
    except _NotOnnx as exc:
        raise UsageError(f"{path}: not an ONNX model: {exc}") from exc
    except Exception as exc:  # malformed protobuf (the walker's ValueError says where): the file is not ONNX
        why = str(exc) if type(exc) is ValueError else f"{type(exc).__name__}: {exc}"
        raise UsageError(f"{path}: not a readable ONNX model ({why})") from exc


def graph_io(model: Any) -> tuple[list[TensorMeta], list[TensorMeta]]:
    """Real inputs (initializers excluded) and outputs of an ONNX model."""
    inits = {i.name for i in model.graph.initializer}
    inputs = [_meta(v) for v in model.graph.input if v.name not in inits]
    outputs = [_meta(v) for v in model.graph.output]
    return inputs, outputs


def feed_mismatch(fed: Iterable[str], declared: Iterable[str]) -> str | None:
    """None when a feed names exactly the model's inputs (never matched by position), else what differs."""
    fed, declared = list(fed), list(declared)
    missing = sorted(set(declared) - set(fed))
    unknown = sorted(set(fed) - set(declared))
    if not missing and not unknown:
        return None
    return (
        "does not match the model inputs"
        + (f"; missing: {', '.join(missing)}" if missing else "")
        + (f"; not inputs of the model: {', '.join(unknown)}" if unknown else "")
        + f" (model inputs: {', '.join(declared)})"
    )


def shape_matches(expected: tuple[Dim, ...] | None, actual: tuple[int, ...]) -> str | None:
    """None when `actual` fits the declared shape, else the reason it does not."""
    if expected is None:
        return None
    if len(expected) != len(actual):
        return f"rank {len(actual)} {list(actual)} but the model declares rank {len(expected)} {list(expected)}"
    for i, (e, a) in enumerate(zip(expected, actual)):
        if isinstance(e, int) and e > 0 and e != a:
            return f"dimension {i} is {a} but the model fixes it to {e} (declared {list(expected)})"
    return None
