"""Readers of tensors captured on another machine (an engine run on a Jetson, in Triton, anywhere): one per format.

- Polygraphy RunResults JSON (`polygraphy run ... --save-outputs out.json`, any runner: its TensorRT runner and its
  ONNX Runtime runner write the same container, polygraphy/comparator/struct.py `RunResults`): every runner and every
  iteration is listed; arrays are base64 of `np.save` output (polygraphy/json/serde.py), read with
  `np.load(allow_pickle=False)`, never unpickled;
- a folder of `.npy` files, one per tensor (the name from the file name, `%2F` for '/', `%3A` for ':', `%25` for
  '%'), or a folder of such folders named 0, 1, ... (one per iteration);
- trtexec `--exportOutput` JSON: a list of `{"name", "dimensions": "1x10", "values": [...]}`, one per output
  (TensorRT's samples/common/sampleInference.cpp `exportJSONOutput`, dimensions written by `operator<<` of `Dims`
  in samples/common/sampleUtils.h); trtexec writes 'nan'/'inf' bare, which are read too;
- trtexec's debug tensors (`--saveAllDebugTensors=numpy|raw|summary`): a folder of `NNNN_NAME.npy|raw` files and
  `tensor_summary.json`, or that summary file (trtverify.toolout.debugtensors); tensors with only their statistics are
  compared as statistics;
- a Triton / KServe v2 JSON inference response: `{"outputs": [{"name", "shape", "datatype", "data"}]}` (the KServe
  "Open Inference Protocol" / Triton HTTP/REST API, tensor data in row-major order).

Every reader refuses a malformed, truncated or mismatching file with a UsageError that names the file and what is
wrong. Memory: nothing holds a whole capture. A folder of `.npy` files is memory-mapped. The JSON formats are read
in one pass that keeps their structure and leaves each long base64 text or number list in the file
(trtverify/toolout/jsonstream.py); each tensor is checked once when the file is read (decoded, then dropped) and
decoded again from the file when asked for: one tensor in memory at a time.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trtverify.toolout import debugtensors
from trtverify.toolout.debugtensors import TensorStats
from trtverify.toolout.jsonstream import Span, StreamError, numbers, skeleton
from trtverify.toolout.runrecord import RunRecord, read_run
from trtverify.util.errors import UsageError
from trtverify.util.words import count

KINDS = ("polygraphy", "npy", "trtexec", "kserve", "trtexec-debug")
# the kinds whose tool runs one feed per capture, and why (a kit of several feeds is compared on its feed 0 alone)
ONE_FEED = {"trtexec": "trtexec runs one feed", "trtexec-debug": "trtexec runs one feed",
            "kserve": "a KServe response answers one request"}  # fmt: skip
_ESCAPES = {"%": "%25", "/": "%2F", ":": "%3A"}
# KServe v2 / Triton datatypes (BYTES, strings, is not a number tensor)
KSERVE_DTYPES = {
    "BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64", "INT8": "int8",
    "INT16": "int16", "INT32": "int32", "INT64": "int64", "FP16": "float16", "FP32": "float32", "FP64": "float64",
}  # fmt: skip


def escape_name(name: str) -> str:
    """A tensor name as a file name: '%' -> %25, '/' -> %2F, ':' -> %3A (then `.npy`)."""
    return "".join(_ESCAPES.get(ch, ch) for ch in name)


def unescape_name(stem: str) -> str:
    return re.sub(r"%(25|2F|3A)", lambda m: {"25": "%", "2F": "/", "3A": ":"}[m.group(1).upper()], stem, flags=re.I)


@dataclass
class Capture:
    """The tensors of one capture: `iterations[i][name]()` gives the array (decoded or mapped on demand)."""

    path: Path
    kind: str
    runner: str | None = None  # Polygraphy: the runner chosen
    runners: list[tuple[str, int]] = field(default_factory=list)  # Polygraphy: every runner and its iterations
    iterations: list[dict[str, Callable[[], np.ndarray]]] = field(default_factory=list)
    shapes: list[dict[str, tuple[int, ...]]] = field(default_factory=list)
    run: RunRecord | None = None  # a .npy folder of the kit's runner script: where and how the engine ran (run.json)
    # per iteration: tensors whose statistics alone were captured (trtexec's tensor_summary.json)
    statistics: list[dict[str, TensorStats]] = field(default_factory=list)
    note: str = ""  # said in describe(): how it was read

    def names(self) -> list[str]:
        """Every tensor name of the capture (the first iteration's order, others' extra names after)."""
        return list(dict.fromkeys(n for it in self.iterations for n in it))

    def stat_names(self) -> list[str]:
        """The tensors whose statistics alone were captured."""
        return list(dict.fromkeys(n for it in self.statistics for n in it))

    def describe(self) -> str:
        who = f", runner {self.runner}" if self.runner else ""
        ran = f"; {self.run.describe()}" if self.run is not None else ""
        note = f"; {self.note}" if self.note else ""
        return f"{self.path} ({self.kind}{who}, {count(len(self.iterations), 'iteration')}{ran}{note})"


def read_capture(path: Path, runner: str | None = None, known: Iterable[str] = ()) -> Capture:
    """The capture at `path` (a file or a folder), its format recognised from its content. `runner`: which
    runner of a Polygraphy file (its name or its 0-based index); needed when the file holds several. `known`: the
    model's tensor names, which give trtexec's debug-tensor file names their tensor's name back."""
    path = Path(path)
    if path.is_dir() and (path / "0.json").is_file():  # one JSON file per iteration (trtexec runs one feed each)
        cap = _json_folder(path)
    elif path.is_dir():
        cap = _debug(path, None, known) if debugtensors.is_debug_folder(path) else _npy_folder(path)
    elif not path.is_file():
        raise UsageError(f"{path}: no such file or folder")
    else:
        doc = _json(path)
        if debugtensors.is_summary(doc):
            cap = _debug(path.parent, path, known)
        elif isinstance(doc, dict) and doc.get("polygraphy_class") == "RunResults":
            cap = _polygraphy(path, doc, runner)
        elif isinstance(doc, dict) and "outputs" in doc:
            cap = _kserve(path, doc)
        elif isinstance(doc, list) and doc and all(isinstance(d, dict) and "values" in d for d in doc):
            cap = _trtexec(path, doc)
        elif isinstance(doc, dict) and isinstance(doc.get("error"), str):  # Triton / KServe v2's error response
            raise UsageError(f"{path}: the server's error response, not outputs: {doc['error'][:300]!r}; capture again")
        elif isinstance(doc, list) and doc and all(isinstance(d, dict) for d in doc) and _is_feeds(doc):
            raise UsageError(
                f"{path}: a Polygraphy inputs file (--save-inputs / --load-inputs: a list of feeds), not a capture of "
                "outputs; give the file of --save-outputs"
            )
        else:
            raise UsageError(
                f"{path}: not a capture trtverify reads: expected Polygraphy RunResults JSON ({{'polygraphy_class': "
                "'RunResults', 'lst': ...}), trtexec --exportOutput JSON (a list of {name, dimensions, values}), a "
                "KServe v2 response ({outputs: [...]}) or a folder of .npy files"
            )
    if runner is not None and cap.kind != "polygraphy":
        raise UsageError(f"{path}: #{runner} picks a runner of a Polygraphy file; this is a {cap.kind} capture")
    if not cap.iterations or not (any(cap.iterations) or any(cap.statistics)):
        raise UsageError(f"{path}: holds no tensors")
    return cap


def _json(path: Path, in_file: bool = True) -> Any:
    """The file's JSON, its long strings and number lists left in the file (jsonstream.Span) unless not `in_file`;
    trtexec's bare nan, -nan, inf and -inf are read."""
    try:
        return skeleton(path, in_file=in_file)
    except StreamError as exc:
        exc.locate(path)
        where = "truncated? " if exc.truncated else ""
        raise UsageError(f"{path}: not valid JSON ({where}{exc.msg}: line {exc.lineno} column {exc.colno})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read ({exc})") from None


def _whole_json(path: Path) -> Any:
    """The file's JSON with every value in memory (trtexec's tensor summary: statistics, no tensors)."""
    return _json(path, in_file=False)


def _is_feeds(doc: list[Any]) -> bool:
    return all(isinstance(v, dict) and v.get("polygraphy_class") == "ndarray" for d in doc for v in d.values())


# -- Polygraphy ----------------------------------------------------------------------------------------------


def _np_payload(path: Path, where: str, obj: Any) -> str | Span:
    """The base64 text of one Polygraphy array object ({'polygraphy_class': 'ndarray', 'array': ...}, possibly
    wrapped in a LazyArray {'values': ...}, 'LazyNumpyArray' in older files); a Span where the file keeps it."""
    if isinstance(obj, dict) and obj.get("polygraphy_class") in ("LazyArray", "LazyNumpyArray"):
        if "values" not in obj:
            raise UsageError(f"{path}: {where}: a LazyArray without 'values'")
        obj = obj["values"]
    if not isinstance(obj, dict) or obj.get("polygraphy_class") != "ndarray":
        raise UsageError(f"{path}: {where}: not a Polygraphy array (expected {{'polygraphy_class': 'ndarray'}})")
    data = obj.get("array")
    if not isinstance(data, (str, Span)):
        raise UsageError(f"{path}: {where}: the array has no base64 'array' text")
    return data


def decode_array(path: Path, where: str, data: str | Span) -> np.ndarray:
    """base64 of np.save output (a str, or a Span of the file read now) -> the array, without pickle; UsageError
    naming the file and tensor otherwise."""
    try:
        text = data.text() if isinstance(data, Span) else data.encode("ascii")
        raw = base64.b64decode(text, validate=True)
        del text
    except StreamError as exc:
        raise UsageError(f"{path}: {where}: {exc.msg}") from None
    except OSError as exc:
        raise UsageError(f"{path}: {where}: cannot be read ({exc})") from None
    except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
        raise UsageError(f"{path}: {where}: not base64 ({exc})") from None
    if not raw.startswith(b"\x93NUMPY"):
        raise UsageError(f"{path}: {where}: not an np.save array (it starts with {raw[:6]!r}; Polygraphy's legacy "
                         "NPZ or latin-1 payloads are not read)")  # fmt: skip
    try:
        arr = np.load(io.BytesIO(raw), allow_pickle=False)
    except ValueError as exc:
        if "allow_pickle" in str(exc) or "Object arrays" in str(exc):
            raise UsageError(f"{path}: {where}: an object array, which only pickle reads; refused") from None
        raise UsageError(f"{path}: {where}: a damaged np.save array ({exc}); is it truncated?") from None
    except Exception as exc:  # EOFError, OSError...
        raise UsageError(f"{path}: {where}: a damaged np.save array ({type(exc).__name__}: {exc})") from None
    return _numeric(path, where, arr)


def _numeric(path: Path, where: str, arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind not in "biuf":
        raise UsageError(f"{path}: {where}: dtype {arr.dtype} is not a number tensor")
    return arr


def _polygraphy(path: Path, doc: dict[str, Any], runner: str | None) -> Capture:
    lst = doc.get("lst")
    if not isinstance(lst, list) or not lst:
        raise UsageError(f"{path}: RunResults without runners ('lst' is {'missing' if lst is None else 'empty'})")
    runners: list[tuple[str, list[Any]]] = []
    for k, entry in enumerate(lst):
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[0], str)) or not isinstance(
            entry[1], list
        ):
            raise UsageError(f"{path}: lst[{k}]: expected [runner name, [iteration results]]")
        runners.append((entry[0], entry[1]))
    listing = "; ".join(f"#{k} {name} ({count(len(its), 'iteration')})" for k, (name, its) in enumerate(runners))
    if runner is None:
        if len(runners) > 1:
            raise UsageError(f"{path}: holds {len(runners)} runners: {listing}; pick one with FILE#INDEX or FILE#NAME")
        chosen = 0
    elif runner.isdigit() and int(runner) < len(runners):
        chosen = int(runner)
    else:
        names = [n for n, _ in runners]
        if runner not in names:
            raise UsageError(f"{path}: no runner '{runner}' (it holds: {listing})")
        chosen = names.index(runner)
    name, iterations = runners[chosen]
    cap = Capture(path, "polygraphy", runner=name, runners=[(n, len(its)) for n, its in runners])
    for i, it in enumerate(iterations):
        where = f"runner {name}, iteration {i}"
        if not isinstance(it, dict) or it.get("polygraphy_class") != "IterationResult":
            raise UsageError(f"{path}: {where}: not an IterationResult")
        outputs = it.get("outputs")
        if not isinstance(outputs, dict):
            raise UsageError(f"{path}: {where}: no 'outputs' mapping")
        tensors: dict[str, Callable[[], np.ndarray]] = {}
        shapes: dict[str, tuple[int, ...]] = {}
        for tname, obj in outputs.items():
            if tname == "polygraphy_class":
                continue
            w = f"{where}, tensor '{tname}'"
            data = _np_payload(path, w, obj)
            shapes[tname] = decode_array(path, w, data).shape  # checked now, decoded again when compared
            tensors[tname] = lambda w=w, data=data: decode_array(path, w, data)
        cap.iterations.append(tensors)
        cap.shapes.append(shapes)
    return cap


# -- folder of .npy --------------------------------------------------------------------------------------------


def _npy_files(folder: Path) -> tuple[dict[str, Callable[[], np.ndarray]], dict[str, tuple[int, ...]]]:
    tensors: dict[str, Callable[[], np.ndarray]] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for f in sorted(folder.glob("*.npy")):
        arr = _load_npy(f)
        tensors[unescape_name(f.stem)] = lambda f=f: _load_npy(f)
        shapes[unescape_name(f.stem)] = arr.shape
    return tensors, shapes


def _load_npy(f: Path) -> np.ndarray:
    try:
        arr = np.load(f, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:
        if any(w in str(exc) for w in ("allow_pickle", "Object arrays", "Python objects")):
            raise UsageError(f"{f}: an object array, which only pickle reads; refused") from None
        raise UsageError(f"{f}: not a readable .npy file ({exc}); is it truncated?") from None
    except Exception as exc:  # OSError, EOFError
        raise UsageError(f"{f}: not a readable .npy file ({type(exc).__name__}: {exc})") from None
    if not isinstance(arr, np.ndarray):
        raise UsageError(f"{f}: not one array")
    return _numeric(f, "array", arr)


def _npy_folder(path: Path) -> Capture:
    cap = Capture(path, "npy")
    subs = sorted((d for d in path.iterdir() if d.is_dir() and d.name.isdigit()), key=lambda d: int(d.name))
    if subs:
        if [int(d.name) for d in subs] != list(range(len(subs))):
            found = [d.name for d in subs]
            raise UsageError(f"{path}: iteration folders must be 0, 1, ... without gaps (found {found})")
        for d in subs:
            tensors, shapes = _npy_files(d)
            if not tensors:
                raise UsageError(f"{d}: no .npy files")
            cap.iterations.append(tensors)
            cap.shapes.append(shapes)
    else:
        tensors, shapes = _npy_files(path)
        if not tensors:
            files = sorted(f.name for f in path.glob("*.json") if not f.name.endswith(".inputs.json"))
            held = (
                f"; it holds {', '.join(files[:4])}{', ...' if len(files) > 4 else ''}: give one of them"
                if files
                else ""
            )
            raise UsageError(f"{path}: a folder without .npy files (or iteration folders 0, 1, ...){held}")
        cap.iterations.append(tensors)
        cap.shapes.append(shapes)
    cap.run = read_run(path)
    if cap.run is not None and cap.run.feeds != len(cap.iterations):
        raise UsageError(f"{cap.run.path}: records {count(cap.run.feeds, 'feed')}, but {path} holds "
                         f"{count(len(cap.iterations), 'iteration folder')}: copied back in part?")  # fmt: skip
    return cap


def _debug(folder: Path, summary: Path | None, known: Iterable[str]) -> Capture:
    tensors, shapes, stats, note = debugtensors.read_debug_folder(folder, summary, known, _load_npy, _whole_json)
    return Capture(summary or folder, "trtexec-debug", iterations=[tensors], shapes=[shapes], statistics=[stats],
                   note=note)  # fmt: skip


def _json_folder(path: Path) -> Capture:
    """A folder of `0.json`, `1.json`, ...: one trtexec `--exportOutput` file (or KServe response) per iteration."""
    files = sorted((f for f in path.glob("*.json") if f.stem.isdigit()), key=lambda f: int(f.stem))
    if [int(f.stem) for f in files] != list(range(len(files))):
        raise UsageError(f"{path}: iteration files must be 0.json, 1.json, ... without gaps (found "
                         f"{[f.name for f in files]})")  # fmt: skip
    cap = Capture(path, "json folder")
    for f in files:
        one = read_capture(f)
        if one.kind not in ("trtexec", "kserve"):
            raise UsageError(f"{f}: a {one.kind} capture; a folder of iterations holds one trtexec --exportOutput "
                             "file (or KServe response) per iteration")  # fmt: skip
        cap.iterations += one.iterations
        cap.shapes += one.shapes
    return cap


# -- trtexec and KServe ------------------------------------------------------------------------------------------


def _values(path: Path, where: str, values: Any, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """A list of numbers, or a Span of one read from the file now, as an array of `shape`."""
    try:
        arr = numbers(values, dtype)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{path}: {where}: values are not numbers of type {dtype} ({exc})") from None
    except OSError as exc:
        raise UsageError(f"{path}: {where}: cannot be read ({exc})") from None
    size = int(np.prod(shape)) if shape else 1
    if arr.size != size:
        raise UsageError(f"{path}: {where}: {count(arr.size, 'value')} for shape {list(shape)} ({size} expected)")
    return arr.reshape(shape)


def _lazy(path: Path, where: str, values: Any, shape: tuple[int, ...], dtype: str) -> Callable[[], np.ndarray]:
    """The tensor, checked now; a short list is kept as its array, a long one (a Span) read again when asked for."""
    arr = _values(path, where, values, shape, dtype)
    if isinstance(values, Span):
        return lambda: _values(path, where, values, shape, dtype)  # this one is dropped on return
    return lambda arr=arr: arr


def _trtexec(path: Path, doc: list[Any]) -> Capture:
    tensors: dict[str, Callable[[], np.ndarray]] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for k, d in enumerate(doc):
        name, dims = d.get("name"), d.get("dimensions")
        if not isinstance(name, str) or not isinstance(dims, str):
            raise UsageError(f"{path}: [{k}]: expected {{'name': str, 'dimensions': '1x10', 'values': [...]}}")
        where = f"tensor '{name}'"
        if dims.strip() and not re.fullmatch(r"\d+(x\d+)*", dims.strip()):
            raise UsageError(f"{path}: {where}: dimensions '{dims}' are not like 1x3x224x224")
        shape = tuple(int(x) for x in dims.strip().split("x")) if dims.strip() else ()
        values = d["values"]
        if not isinstance(values, (list, Span)):
            raise UsageError(f"{path}: {where}: 'values' is not a list")
        if name in tensors:
            raise UsageError(f"{path}: tensor '{name}' appears twice")
        tensors[name] = _lazy(path, where, values, shape, "float64")
        shapes[name] = shape
    return Capture(path, "trtexec", iterations=[tensors], shapes=[shapes])


def _kserve(path: Path, doc: dict[str, Any]) -> Capture:
    outputs = doc["outputs"]
    if not isinstance(outputs, list) or not outputs:
        raise UsageError(f"{path}: 'outputs' is not a non-empty list of {{name, shape, datatype, data}}")
    tensors: dict[str, Callable[[], np.ndarray]] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for k, o in enumerate(outputs):
        missing = [key for key in ("name", "shape", "datatype", "data") if not isinstance(o, dict) or key not in o]
        if missing:
            params = o.get("parameters") if isinstance(o, dict) else None
            if isinstance(params, dict) and "binary_data_size" in params:
                raise UsageError(f"{path}: outputs[{k}]: binary tensor data (Triton's binary extension) is not read; "
                                 "ask for JSON data (binary_data_output: false)")  # fmt: skip
            raise UsageError(f"{path}: outputs[{k}]: missing {', '.join(missing)}")
        name, shape, dtype = o["name"], o["shape"], o["datatype"]
        where = f"tensor '{name}'"
        if not isinstance(shape, list) or not all(isinstance(x, int) and x >= 0 for x in shape):
            raise UsageError(f"{path}: {where}: shape {shape!r} is not a list of sizes")
        if dtype not in KSERVE_DTYPES:
            raise UsageError(f"{path}: {where}: datatype {dtype!r} is not a number type ({', '.join(KSERVE_DTYPES)})")
        if name in tensors:
            raise UsageError(f"{path}: tensor '{name}' appears twice")
        tensors[name] = _lazy(path, where, o["data"], tuple(shape), KSERVE_DTYPES[dtype])
        shapes[name] = tuple(shape)
    return Capture(path, "kserve", iterations=[tensors], shapes=[shapes])


def read_feeds(path: Path) -> list[dict[str, np.ndarray]]:
    """A Polygraphy inputs file (`--save-inputs`, `--load-inputs`: a list of feeds, each input an np.save payload)."""
    return list(iter_feeds(path))


def iter_feeds(path: Path) -> Iterator[dict[str, np.ndarray]]:
    """The feeds of a Polygraphy inputs file one at a time, each decoded from the file when reached (the file is read
    in one pass that leaves each long array's text in it)."""
    doc = _json(path)
    if not isinstance(doc, list) or not doc or not all(isinstance(d, dict) for d in doc):
        raise UsageError(f"{path}: not a Polygraphy inputs file (a list of feeds, each {{input name: array}})")
    for i, feed in enumerate(doc):
        yield {n: decode_array(path, f"feed {i}, input '{n}'", _np_payload(path, f"feed {i}, input '{n}'", obj))
               for n, obj in feed.items()}  # fmt: skip


def inputs_beside(capture: Path) -> Path:
    """Where the inputs a capture was made from are saved beside it (`polygraphy run ... --save-inputs`)."""
    return capture.with_name(f"{capture.stem}.inputs.json")


def split_selector(spec: str) -> tuple[Path, str | None, int | None]:
    """'FILE', 'FILE#RUNNER' (a Polygraphy runner's name or 0-based index) or 'FILE#RUNNER#I' / 'FILE##I' (only its
    iteration I, compared on the kit's feed I) -> (path, runner, iteration)."""
    if "#" not in spec or Path(spec).exists():
        return Path(spec), None, None
    file, _, rest = spec.partition("#")
    runner, _, iteration = rest.partition("#")
    if iteration and not iteration.isdigit():
        raise UsageError(f"--captured {spec}: the iteration after the second '#' is a number (0, 1, ...)")
    return Path(file), runner or None, int(iteration) if iteration else None


__all__ = [
    "KINDS",
    "Capture",
    "decode_array",
    "escape_name",
    "inputs_beside",
    "iter_feeds",
    "read_capture",
    "read_feeds",
    "split_selector",
    "unescape_name",
]
