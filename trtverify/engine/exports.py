"""Readers of trtexec's engine exports: `--exportLayerInfo` (the same JSON as IEngineInspector) and
`--exportProfile`. One layer record per engine layer, with its precision and the ONNX nodes it implements.

Precision of a layer: its weights' type where it has weights (a Conv with INT8 weights computes in INT8
whatever it writes), else the narrowest type among its outputs' formats ("Row major linear FP32",
"Thirty-two wide channel vectorized row major Int8 format", ...). ONNX nodes of a layer: the layer's
`Metadata` where newer TensorRT writes it (`[ONNX Layer: Conv_9]`), else the parts of its fused name
(`conv1.weight + QuantizeLinear_7 + Conv_9`; a TensorRT 8 pointwise layer `PWN(PWN(a), b)` gives a and b); a
reformat layer (`Reformatting CopyNode for Input Tensor 0 to Conv_5 + Add_6`) belongs to the layer it feeds or
drains.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field

from trtverify.toolout.layerinfo import nodes_of
from trtverify.util.errors import UsageError
from trtverify.util.record import Record

TYPES = (("int4", "INT4"), ("fp8", "FP8"), ("e4m3", "FP8"), ("int8", "INT8"), ("bf16", "BF16"), ("bfloat", "BF16"),
         ("fp16", "FP16"), ("half", "FP16"), ("int32", "INT32"), ("int64", "INT64"), ("bool", "BOOL"), ("fp32", "FP32"),
         ("float", "FP32"))  # fmt: skip
NARROW_FIRST = ("INT4", "FP8", "INT8", "BF16", "FP16", "FP32", "INT32", "INT64", "BOOL")
REFORMAT_OF = re.compile(r"^Reformatting CopyNode for (?:Input|Output) Tensor \d+ to (.+)$")
MAX_BYTES = 64 << 20
TIMES_NAMES = ("timing.json", "times.json", "timings.json")  # trtexec --exportTimes files, as usually named


@dataclass
class EngineLayer:
    name: str
    type: str
    precision: str | None
    onnx_nodes: list[str]
    avg_ms: float | None = None
    reformat: bool = False
    feeds: str | None = None  # reformat layers: the layer they reformat for
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


def type_of(fmt: str) -> str | None:
    low = fmt.lower()
    return next((name for key, name in TYPES if key in low), None)


def io_type(tensor: dict[str, Any]) -> str | None:
    """The type of a layer's input or output record: TensorRT <= 10 writes one 'Format/Datatype' description ('Row
    major linear FP16 format'); TensorRT 11 splits it into 'Format' and 'Datatype' (the migration guide writes
    'DataType'), the type then read from 'Datatype' first."""
    if "Format/Datatype" in tensor:
        return type_of(str(tensor["Format/Datatype"]))
    dtype = tensor.get("Datatype", tensor.get("DataType"))
    return type_of(str(dtype)) if dtype is not None else type_of(str(tensor.get("Format", "")))


def io_format(tensor: dict[str, Any]) -> str:
    """A layer input's or output's type and format as one text, whichever generation wrote it."""
    if "Format/Datatype" in tensor:
        return str(tensor["Format/Datatype"])
    parts = (tensor.get("Datatype", tensor.get("DataType")), tensor.get("Format"))
    return " ".join(str(p) for p in parts if p is not None)


def _precision(layer: dict[str, Any]) -> str | None:
    weights = (layer.get("Weights") or {}).get("Type")
    if weights:
        return type_of(str(weights))
    found = [io_type(o) for o in layer.get("Outputs", []) if isinstance(o, dict)]
    found = [f for f in found if f]
    return min(found, key=NARROW_FIRST.index) if found else None


def is_profile(data: Any) -> bool:
    """Whether parsed JSON is an `--exportProfile` list (layer records with `averageMs`)."""
    return isinstance(data, list) and any(isinstance(d, dict) and "averageMs" in d for d in data[:8])


def load_json(path: Path) -> Any:
    """A trtexec JSON export, size-bounded; errors name the file."""
    if path.stat().st_size > MAX_BYTES:
        raise UsageError(f"{path}: {path.stat().st_size >> 20} MB, larger than a trtexec export should be")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a JSON trtexec export ({exc})") from exc
    except RecursionError:
        raise UsageError(f"{path}: not a trtexec export (JSON nested too deeply)") from None


def read_layer_info(path: Path, data: Any = None) -> list[EngineLayer]:
    """Engine layers of a `--exportLayerInfo` file (detailed or not); `data`: its JSON, when already parsed."""
    data = load_json(path) if data is None else data
    layers = data.get("Layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        raise UsageError(f"{path}: no 'Layers' list: not a trtexec --exportLayerInfo / IEngineInspector file")
    out = []
    for i, item in enumerate(layers):
        layer = item if isinstance(item, dict) else {"Name": str(item)}  # without --profilingVerbosity=detailed
        name = str(layer.get("Name", ""))
        ltype = str(layer.get("LayerType", "unknown"))
        m = REFORMAT_OF.match(name)
        # NoOp "Reformatting CopyNode" layers cost nothing; a names-only export says no type: its name tells
        reformat = ltype == "Reformat" or (ltype == "unknown" and m is not None)
        try:
            nodes = nodes_of(m.group(1), layer) if m else nodes_of(name, layer)
            precision = _precision(layer)
        except (TypeError, AttributeError, ValueError, KeyError, IndexError) as exc:  # a field of the wrong shape
            raise UsageError(f"{path}: Layers[{i}] ({name[:80]!r}) is not a trtexec layer record ({exc})") from None
        out.append(EngineLayer(name, ltype, precision, nodes, reformat=reformat,
                               feeds=m.group(1) if m else None, raw=layer))  # fmt: skip
    return out


class ProfileShapes(Record):
    min: list[int] | None
    opt: list[int] | None
    max: list[int] | None
    format: str | None = Field(description="the tensor's format in this profile, as written")


class IOTensor(Record):
    """An input or output of the engine, as the inspector lists it (TensorRT <= 10: the name alone)."""

    name: str
    mode: str | None = Field(description="Input or Output (TensorRT 11's IOMode)")
    dtype: str | None = Field(description="its type as written (Float, Half, Int8, ...)")
    dimensions: list[int] | None = Field(description="-1 for a dimension the profiles set")
    location: str | None = Field(description="Device or Host")
    shape_inference_io: bool | None
    profiles: list[ProfileShapes] = Field(description="min/opt/max shapes per optimisation profile")


def _dims(value: Any, where: str) -> list[int] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in value):
        raise UsageError(f"{where}: expected a list of integers, got {value!r}")
    return list(value)


def read_io(path: Path, data: Any) -> tuple[list[IOTensor], str | None]:
    """(the engine's inputs and outputs, the inspector generation that wrote them: 'TensorRT 11' for `I/O
    Tensors`, 'TensorRT <= 10' for `Bindings`, None where the file has neither)."""
    if not isinstance(data, dict):
        return [], None
    if "I/O Tensors" in data:
        items = data["I/O Tensors"]
        if not isinstance(items, list):
            raise UsageError(f"{path}: 'I/O Tensors' must be a list of tensor records")
        out = []
        for i, t in enumerate(items):
            where = f"{path}: I/O Tensors[{i}]"
            if not isinstance(t, dict) or not isinstance(t.get("Name"), str):
                raise UsageError(f"{where}: not a tensor record with a Name")
            profiles = []
            for j, p in enumerate(t.get("ProfileInfo") or []):
                if not isinstance(p, dict):
                    raise UsageError(f"{where}.ProfileInfo[{j}]: not a profile record")
                profiles.append(ProfileShapes(
                    min=_dims(p.get("MinShape"), f"{where}.ProfileInfo[{j}].MinShape"),
                    opt=_dims(p.get("OptShape"), f"{where}.ProfileInfo[{j}].OptShape"),
                    max=_dims(p.get("MaxShape"), f"{where}.ProfileInfo[{j}].MaxShape"),
                    format=str(p["Format"]) if p.get("Format") is not None else None,
                ))  # fmt: skip
            shape_io = t.get("IsShapeInferenceIO")
            out.append(
                IOTensor(
                    name=t["Name"],
                    mode=str(t["IOMode"]) if t.get("IOMode") is not None else None,
                    dtype=str(t.get("DataType", t.get("Datatype"))) if t.get("DataType", t.get("Datatype")) else None,
                    dimensions=_dims(t.get("Dimensions"), f"{where}.Dimensions"),
                    location=str(t["Location"]) if t.get("Location") is not None else None,
                    shape_inference_io=shape_io if isinstance(shape_io, bool) else None,
                    profiles=profiles,
                )
            )
        return out, "TensorRT 11"
    if "Bindings" in data:
        names = data["Bindings"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise UsageError(f"{path}: 'Bindings' must be a list of tensor names")
        bare = {"mode": None, "dtype": None, "dimensions": None, "location": None, "shape_inference_io": None}
        return [IOTensor(name=n, profiles=[], **bare) for n in names], "TensorRT <= 10"
    return [], None


def read_profile(path: Path, data: Any = None) -> dict[str, float]:
    """Layer name -> average ms of a `--exportProfile` file ([{count}, {name, averageMs, ...}, ...]); `data`: its
    JSON, when already parsed."""
    data = load_json(path) if data is None else data
    if not isinstance(data, list):
        raise UsageError(f"{path}: expected a list of layer timings: not a trtexec --exportProfile file")
    out = {}
    for item in data:
        if isinstance(item, dict) and "name" in item and "averageMs" in item:
            ms = item["averageMs"]
            if not isinstance(ms, (int, float)) or isinstance(ms, bool):
                raise UsageError(f"{path}: layer '{item['name']}': averageMs must be a number, got {ms!r}")
            out[str(item["name"])] = float(ms)
    if not out:
        raise UsageError(f"{path}: no layer timings (name, averageMs) found")
    return out


def read_engine(paths: list[Path], allow_none: bool = False) -> tuple[list[EngineLayer], dict[str, Any]]:
    """One engine's layers with their times, from its export files or a folder holding them (with `allow_none`,
    no layer-info file gives no layers)."""
    files: list[Path] = []
    parsed: dict[Path, Any] = {}  # each file parsed once
    for p in paths:
        if p.is_dir():
            files += sorted(p.glob("*.json"))
        elif p.suffix.lower() == ".json":
            parsed[p] = load_json(p)  # a file named on the command line must read: its error names it
            files.append(p)
    files = [f for f in files if not f.name.endswith(TIMES_NAMES)]  # --exportTimes: the audit summarises those
    info = [f for f in files if f.name.endswith(("graph.json", "layer.json", "layers.json", "layerinfo.json"))]
    prof = [f for f in files if f.name.endswith("profile.json")]
    if not info or not prof:  # files named otherwise: tell them by content, each parsed once
        peeked = {f: parsed[f] if f in parsed else parsed.setdefault(f, peek_json(f)) for f in files}
        info = info or [f for f, d in peeked.items() if isinstance(d, dict) and "Layers" in d]
        prof = prof or [f for f, d in peeked.items() if is_profile(d)]
    if len(info) > 1 or (not info and not allow_none):
        found = ", ".join(str(f) for f in info) or f"none in {', '.join(str(p) for p in paths)}"
        raise UsageError(f"need exactly one --exportLayerInfo file per engine (found: {found})")
    if not info:
        return [], {"layer_info": None, "profile": None, "build": {}}
    data = parsed[info[0]] if info[0] in parsed else parsed.setdefault(info[0], load_json(info[0]))
    layers = read_layer_info(info[0], data)
    io, inspector = read_io(info[0], data)
    times = read_profile(prof[0], parsed.get(prof[0])) if prof else {}
    for layer in layers:
        layer.avg_ms = times.get(layer.name)
    meta = next((load_json(f) for f in files if f.name.endswith("build.metadata.json")), {})
    read = {"layer_info": str(info[0]), "profile": str(prof[0]) if prof else None, "build": meta}
    return layers, {**read, "inspector": inspector, "io_tensors": io}


def peek_json(path: Path) -> Any:
    """A JSON export when it reads, else None (for telling exports apart by content)."""
    try:
        return load_json(path)
    except UsageError:
        return None
