"""Read and rewrite ONNX files at the protobuf wire level, one field at a time.

`onnx.load` materialises every weight of a model; for a 100 MB ResNet-50 that costs about
200 MB of peak memory just to read four input names. Here the file is memory-mapped and
walked field by field: metadata is parsed from small sub-messages only, and moving
initializers to an external file touches one tensor at a time.

Only the fields named below are interpreted; everything else is copied through unchanged.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

# field numbers from onnx.proto
MODEL_GRAPH = 7
GRAPH_NODE, GRAPH_INITIALIZER, GRAPH_INPUT, GRAPH_OUTPUT = 1, 5, 11, 12
NODE_INPUT, NODE_OUTPUT, NODE_NAME = 1, 2, 3
TENSOR_NAME, TENSOR_EXTERNAL_DATA, TENSOR_DATA_LOCATION = 8, 13, 14
TENSOR_FLOAT_DATA, TENSOR_RAW_DATA, TENSOR_DOUBLE_DATA = 4, 9, 10
TENSOR_EXTERNAL = 1  # onnx.TensorProto.EXTERNAL
# (packed) fields whose bytes are the tensor's little-endian values, as raw_data's are: FLOAT, DOUBLE
_RAW_LAYOUT = {TENSOR_RAW_DATA: None, TENSOR_FLOAT_DATA: 1, TENSOR_DOUBLE_DATA: 11}

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


def _varint(buf: Any, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError(f"a varint at byte {pos} is cut off or too long: the file is truncated or not ONNX")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def fields(buf: Any, start: int = 0, end: int | None = None) -> Iterator[tuple[int, int, int, int, int]]:
    """(field number, wire type, field start, value start, value end) for each field in buf[start:end]."""
    pos = start
    end = len(buf) if end is None else end
    while pos < end:
        fstart = pos
        key, pos = _varint(buf, pos)
        num, wt = key >> 3, key & 7
        if wt == _VARINT:
            _, vend = _varint(buf, pos)
            yield num, wt, fstart, pos, vend
            pos = vend
        elif wt == _I64:
            yield num, wt, fstart, pos, pos + 8
            pos += 8
        elif wt == _LEN:
            length, pos = _varint(buf, pos)
            if pos + length > end:
                raise ValueError(
                    f"field {num} at byte {fstart} runs {pos + length - end} bytes past the end: the file is truncated"
                )
            yield num, wt, fstart, pos, pos + length
            pos += length
        elif wt == _I32:
            yield num, wt, fstart, pos, pos + 4
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wt} at byte {fstart}")


def _len_field(num: int, payload: bytes) -> bytes:
    return _encode_varint((num << 3) | _LEN) + _encode_varint(len(payload)) + payload


class MappedModel:
    """A memory-mapped ONNX file with the byte ranges of its graph's parts."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._fh = open(self.path, "rb")
        size = self.path.stat().st_size
        self.buf: Any = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        self.graph: tuple[int, int] | None = None
        for num, wt, _, vs, ve in fields(self.buf):
            if num == MODEL_GRAPH and wt == _LEN:
                self.graph = (vs, ve)  # a graph field appearing twice would be merged; the last one wins here
        if self.graph is None:
            raise ValueError("no graph in this file")

    def close(self) -> None:
        if isinstance(self.buf, mmap.mmap):
            self.buf.close()
        self._fh.close()

    def __enter__(self) -> MappedModel:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def graph_fields(self, wanted: int) -> Iterator[tuple[int, int]]:
        assert self.graph is not None
        for num, wt, _, vs, ve in fields(self.buf, *self.graph):
            if num == wanted and wt == _LEN:
                yield vs, ve

    def value_infos(self, which: int) -> list[Any]:
        import onnx

        return [onnx.ValueInfoProto.FromString(bytes(self.buf[vs:ve])) for vs, ve in self.graph_fields(which)]

    def initializer_names(self) -> set[str]:
        names = set()
        for vs, ve in self.graph_fields(GRAPH_INITIALIZER):
            for num, wt, _, s, e in fields(self.buf, vs, ve):
                if num == TENSOR_NAME and wt == _LEN:
                    names.add(bytes(self.buf[s:e]).decode("utf-8"))
                    break
        return names

    def nodes(self) -> list[tuple[str, list[str], list[str]]]:
        """(name, inputs, outputs) of each top-level node, without parsing attributes (Constant tensors)."""
        out = []
        for vs, ve in self.graph_fields(GRAPH_NODE):
            name, ins, outs = "", [], []
            for num, wt, _, s, e in fields(self.buf, vs, ve):
                if wt != _LEN:
                    continue
                if num == NODE_INPUT:
                    ins.append(bytes(self.buf[s:e]).decode("utf-8", "replace"))
                elif num == NODE_OUTPUT:
                    outs.append(bytes(self.buf[s:e]).decode("utf-8", "replace"))
                elif num == NODE_NAME:
                    name = bytes(self.buf[s:e]).decode("utf-8", "replace")
            out.append((name, ins, outs))
        return out

    def external_data(self) -> list[tuple[str, dict[str, str]]]:
        """(tensor name, {location, offset, length}) of each initializer stored outside the file."""
        import onnx

        out = []
        for vs, ve in self.graph_fields(GRAPH_INITIALIZER):
            name, entries, external = "", {}, False
            for num, wt, _, s, e in fields(self.buf, vs, ve):
                if num == TENSOR_NAME and wt == _LEN:
                    name = bytes(self.buf[s:e]).decode("utf-8", "replace")
                elif num == TENSOR_EXTERNAL_DATA and wt == _LEN:
                    entry = onnx.StringStringEntryProto.FromString(bytes(self.buf[s:e]))
                    entries[entry.key] = entry.value
                elif num == TENSOR_DATA_LOCATION and wt == _VARINT:
                    external = _varint(self.buf, s)[0] == onnx.TensorProto.EXTERNAL
            if external:
                out.append((name, entries))
        return out


def escaping(path: Path, location: str) -> str | None:
    """Why an external data `location` of the model at `path` may not be read (an absolute path, or one that
    leaves the model's folder through '..' or a symlink), as onnx refuses it; None when it stays inside. Decided
    from the path alone, before any byte of it is read."""
    if not location:
        return None
    if PurePosixPath(location).is_absolute() or PureWindowsPath(location).is_absolute() or location.startswith("\\"):
        return "is an absolute path"
    folder = Path(path).resolve().parent
    if not (folder / location).resolve().is_relative_to(folder):
        return "points outside the model's folder"
    return None


def graph_problem(path: Path) -> str | None:
    """Why the graph at `path` cannot run, where that is visible without its weights: a cycle among its
    nodes, or external data that is missing, outside the model's folder or shorter than a tensor needs; None
    when none of these."""
    with MappedModel(path) as mm:
        nodes = mm.nodes()
        for tensor, entries in mm.external_data():
            location = entries.get("location", "")
            why = escaping(path, location)
            if why:
                where = f"external data location '{location}'"
                return f"tensor '{tensor}': {where} {why}; refused (the data must sit in the model's folder)"
            data = Path(path).parent / location
            if not location or not data.is_file():
                return f"tensor '{tensor}' is stored in external data file '{location}', which is not beside the model"
            try:
                need = int(entries.get("offset", 0)) + int(entries.get("length", 0))
            except ValueError:
                return f"tensor '{tensor}': external data offset/length are not numbers ({entries})"
            if need > data.stat().st_size:
                return f"tensor '{tensor}' needs {need:,} bytes of '{location}', which holds {data.stat().st_size:,}"
    producer = {o: i for i, (_, _, outs) in enumerate(nodes) for o in outs if o}
    waiting = [sum(1 for x in set(ins) if x in producer) for _, ins, _ in nodes]
    users: dict[int, list[int]] = {}
    for i, (_, ins, _) in enumerate(nodes):
        for x in set(ins):
            if x in producer:
                users.setdefault(producer[x], []).append(i)
    ready = [i for i, w in enumerate(waiting) if w == 0]
    done = 0
    while ready:
        i = ready.pop()
        done += 1
        for j in users.get(i, []):
            waiting[j] -= 1
            if waiting[j] == 0:
                ready.append(j)
    if done < len(nodes):
        stuck = [nodes[i][0] or f"#{i}" for i, w in enumerate(waiting) if w > 0]
        return f"the graph has a cycle: {len(stuck)} node(s) on or after it, e.g. {', '.join(stuck[:3])}"
    return None


def io_model(path: Path) -> Any:
    """An onnx.ModelProto holding only the graph's inputs, outputs and initializer *names*.

    Enough for `onnxinfo.graph_io`; costs the size of the metadata, not of the weights.
    """
    import onnx

    with MappedModel(path) as mm:
        model = onnx.ModelProto()
        # copy top-level scalars (ir_version, opset_import, ...) but not the graph
        head = bytearray()
        for num, _, fs, _, ve in fields(mm.buf):
            if num != MODEL_GRAPH:
                head += mm.buf[fs:ve]
        model.ParseFromString(bytes(head))
        model.graph.input.extend(mm.value_infos(GRAPH_INPUT))
        model.graph.output.extend(mm.value_infos(GRAPH_OUTPUT))
        for name in sorted(mm.initializer_names()):
            model.graph.initializer.add(name=name)
    return model


def weightless(path: Path, threshold: int = 1024) -> tuple[Any, Path]:
    """(the model at `path` with no weight bytes in it, the folder its weights resolve in).

    Every initializer of >= `threshold` bytes becomes a reference to where its bytes already are: its own
    external data file, or, for a weight stored inside the .onnx file, the file itself at the byte offset of
    its values (ONNX external data with `location` = the model's file name). ONNX Runtime reads such a model
    from memory with the folder given (`session.model_external_initializers_file_folder_path`), so no weight is
    copied, rewritten or parsed in Python: variants of the graph (exposed outputs, isolation models, emulated
    twins) cost the size of the graph. External data that leaves the folder is refused here, before any byte of
    it is read (ValueError naming the tensor).
    """
    import onnx

    src = Path(path).resolve()  # a symlinked model: its weights are where the file really is
    folder = src.parent
    with MappedModel(src) as mm:
        buf = mm.buf
        gs, ge = mm.graph  # type: ignore[misc]
        graph = bytearray()
        for num, wt, fs, vs, ve in fields(buf, gs, ge):
            if num != GRAPH_INITIALIZER or wt != _LEN:
                graph += buf[fs:ve]
                continue
            head = bytearray()
            data: tuple[int, int] | None = None
            external = False
            for tnum, twt, tfs, tvs, tve in fields(buf, vs, ve):
                if tnum in _RAW_LAYOUT and twt == _LEN and tve - tvs >= threshold and data is None:
                    data = (tvs, tve)
                    continue
                if tnum == TENSOR_DATA_LOCATION and twt == _VARINT:
                    external = _varint(buf, tvs)[0] == TENSOR_EXTERNAL
                head += buf[tfs:tve]
            if data is None or external:
                if external:
                    _check_external(Path(path), buf[vs:ve])
                graph += buf[fs:ve]
                continue
            t = onnx.TensorProto.FromString(bytes(head))  # everything but the values: name, type, dims
            t.data_location = onnx.TensorProto.EXTERNAL
            for k, v in (("location", src.name), ("offset", str(data[0])), ("length", str(data[1] - data[0]))):
                entry = t.external_data.add()
                entry.key, entry.value = k, v
            graph += _len_field(GRAPH_INITIALIZER, t.SerializeToString())
        out = bytearray()
        for num, _, fs, _, ve in fields(buf):
            out += _len_field(MODEL_GRAPH, bytes(graph)) if num == MODEL_GRAPH else buf[fs:ve]
    return onnx.ModelProto.FromString(bytes(out)), folder


def _check_external(path: Path, tensor: Any) -> None:
    import onnx

    t = onnx.TensorProto.FromString(bytes(tensor)) if not isinstance(tensor, onnx.TensorProto) else tensor
    location = next((e.value for e in t.external_data if e.key == "location"), "")
    why = escaping(path, location)
    if why:
        raise ValueError(
            f"tensor '{t.name}': external data location '{location}' {why}; refused (the data must sit in the "
            "model's folder)"
        )


# numpy dtypes whose raw bytes are the values (little-endian), by onnx.TensorProto data type
_PLAIN = {
    1: "<f4",
    2: "u1",
    3: "i1",
    4: "<u2",
    5: "<i2",
    6: "<i4",
    7: "<i8",
    9: "?",
    10: "<f2",
    11: "<f8",
    12: "<u4",
    13: "<u8",
}


def read_external(t: Any, folder: Path) -> Any:
    """The values of an external-data TensorProto whose file sits in `folder`, as a read-only numpy array.

    Plain types are memory-mapped, nothing copied: the pages are the file's and go when the array does.
    Other types (bfloat16, float8, int4) are read into a copy and decoded by onnx. Raises ValueError for a
    location outside the folder or bytes the file does not hold."""
    import numpy as np

    entries = {e.key: e.value for e in t.external_data}
    location = entries.get("location", "")
    why = escaping(folder / "model.onnx", location)
    if why:
        raise ValueError(f"tensor '{t.name}': external data location '{location}' {why}")
    file = folder / location
    offset = int(entries.get("offset", 0) or 0)
    size = file.stat().st_size
    length = int(entries["length"]) if entries.get("length") else size - offset
    if offset + length > size:
        raise ValueError(f"tensor '{t.name}' needs {offset + length:,} bytes of '{location}', which holds {size:,}")
    dims = tuple(int(d) for d in t.dims)
    plain = _PLAIN.get(t.data_type)
    count = int(np.prod(dims)) if dims else 1
    if plain is not None and count * np.dtype(plain).itemsize == length:
        if length == 0:
            return np.zeros(dims, dtype=plain)
        start = offset - offset % mmap.ALLOCATIONGRANULARITY
        with open(file, "rb") as fh:
            mapped = mmap.mmap(fh.fileno(), length + offset - start, access=mmap.ACCESS_READ, offset=start)
        return np.frombuffer(mapped, dtype=plain, count=count, offset=offset - start).reshape(dims)
    import onnx
    from onnx import numpy_helper

    with open(file, "rb") as fh:
        fh.seek(offset)
        raw = fh.read(length)
    copy = onnx.TensorProto()
    copy.name, copy.data_type, copy.raw_data = t.name, t.data_type, raw
    copy.dims.extend(dims)
    return numpy_helper.to_array(copy)
