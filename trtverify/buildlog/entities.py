"""The names and numbers in a log line, found by generic patterns (no tool's rules): file names, tensor / layer /
node names, op types, shapes, sizes (as written and in bytes), durations (as written and in seconds), versions
and error codes. One extractor, used by the context block (context.py) and the evidence of every finding.

`extract(text)` returns only the kinds it found, each a list of unique values in the order written:

    {"files": ["model.onnx"], "names": ["conv1"], "ops": ["Conv"], "shapes": ["1x3x224x224"],
     "sizes": [{"text": "512 MiB", "bytes": 536870912}], "durations": [{"text": "12.5 ms", "seconds": 0.0125}],
     "versions": [{"tool": "TensorRT", "version": "10.4.0"}], "error_codes": ["Error Code 4"],
     "locations": ["mha_fusion.cpp:344"]}

A version with no tool beside it (`expecting library version 8.0.0 got 8.0.1`) has tool "".

Sizes: KiB / MiB / GiB are powers of 1024; kB / KB / MB / GB are powers of 1000 as the SI defines them (TensorRT
itself writes MiB; a tool that writes `MB` for 2**20 bytes is off by 5 %, and the text as written is kept beside it).
"""

from __future__ import annotations

import re
from typing import Any

MODEL_EXT = r"onnx|pt|pth|pb|safetensors|tflite|torchscript|gguf|uff|caffemodel|prototxt|h5|keras|ckpt|nemo|bin"
ENGINE_EXT = r"plan|engine|trt"
DATA_EXT = r"cache|calib|calibration|table|json|ya?ml|so(?:\.\d+)*|dll|txt|log|npz|npy|csv|pbtxt|tar|zip|bin"
_SOURCE_EXT = r"py|cpp|cc|cu|h|hpp|c"
_OTHER_EXT = DATA_EXT + "|" + _SOURCE_EXT
# a source location a tool prints with its message: `mha_fusion.cpp:344`, `onnx2trt_utils.cpp:235`
_LOCATION = re.compile(rf"(?<![\w.-])[\w./-]*\w\.(?:{_SOURCE_EXT}):\d+\b")
# a version with no tool named beside it: `expecting library version 8.0.0 got 8.0.1`
_BARE_VERSION = re.compile(
    r"\b(?:[Vv]ersion|expect(?:ing|ed)|got|found|requires?|but)\s+v?(?P<v>\d+\.\d+\.\d+(?:\.\d+)?)\b"
)
# a path or a file name: an extension the tools' files carry, or an absolute / relative path of two parts or more
FILE = re.compile(
    r"(?<![\w/.~$-])(?P<f>(?:[A-Za-z]:[\\/]|~?/|\.{1,2}/)?(?:[\w.+@-]+[\\/])*[\w.+@-]*\w\."
    rf"(?:{MODEL_EXT}|{ENGINE_EXT}|{_OTHER_EXT}))(?![\w/-])"
    r"|(?<![\w/.~$:-])(?P<p>(?:~|\.{1,2})?(?:/[\w.+@-]+){2,}/?)(?![\w/])"
)
QUOTED = re.compile(r"'([^'\n]{1,200})'|\"([^\"\n]{1,200})\"|`([^`'\n]{1,200})[`']")
_NAMED = re.compile(
    r"(?<!-)\b(?P<kw>layer|node|tensor|input|output|plugin|op|Layer|Node|Tensor)"
    r"(?P<colon>\s*:)?\s+(?P<name>[\w./:\[\]-]{2,120})"
)
_IDENTIFIER = re.compile(r"[\d_/.:\[\]]|\w-\w")  # what a word of prose lacks: digits, _ / . : [ ], an inner -
_OPS = re.compile(
    r"\[(?:Op|op|OpType|LayerType): ?(?P<a>\w+)\]|(?:op_type|OpType|LayerType|op type|node type|Op)\s*[:=]\s*"
    r"['\"]?(?P<b>[A-Za-z_]\w*)|(?:[Ii]mporter registered for op|[Uu]nsupported (?:op|operator)(?: type)?):?\s*"
    r"['\"]?(?P<c>\w+)|(?P<d>(?:torch\.ops\.)?aten(?:::|\.)\w+(?:\.\w+)?)|\) \[(?P<e>[A-Z][A-Za-z]+)\]"
    r"|\bplugin (?:creator )?(?:for )?['\"]?(?P<f>[A-Z][\w:]+)['\"]? (?:not found|could not be found)"
)
_DIMS = r"-?\d+(?:\s*[,x×]\s*-?\d+)+"
SHAPE = re.compile(
    rf"\[{_DIMS},?\]|\({_DIMS},?\)|(?<![\w.])-?\d+(?:x-?\d+){{2,}}(?![\w.])|(?<![\w.])\d+x\d+(?=\s|$|,)"
    r"|\((?:-?\d+|[A-Za-z_]\w*)(?:, (?:-?\d+|[A-Za-z_]\w*))+\)(?=\s*[\],}]|, (?:opt|max)|$)"
)
_SIZE_UNIT = {
    "b": 1, "byte": 1, "bytes": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
}  # fmt: skip
SIZE = re.compile(
    r"(?<![\w.])(?P<n>\d+(?:\.\d+)?(?:e\+?\d+)?)\s?(?P<u>[KMGT]i?B|[kK]B|bytes?|B)\b"
    r"|(?P<u2>\b[KMGT]iB|bytes)\)?\s*[:=]\s*(?P<n2>\d+(?:\.\d+)?)\b"
)
_SECONDS = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "msec": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0, "min": 60.0, "mins": 60.0, "minute": 60.0,
    "minutes": 60.0, "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
}  # fmt: skip
DURATION = re.compile(
    r"(?<![\w.:])(?P<n>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s?(?P<u>ns|us|µs|msec|ms|milliseconds?|secs?|seconds?|s"
    r"|mins?|minutes?|hours?|h)\b(?![/-])|(?<![\w.:-])(?<!\d\d )(?P<clock>\d{1,3}:\d\d:\d\d(?:\.\d+)?)(?![\w:])"
)
_TOOL_NAMES = (
    ("TensorRT-LLM", r"TensorRT[-_ ]LLM|tensorrt_llm|TRT-LLM"),
    ("TensorRT-RTX", r"TensorRT[-_ ]RTX|tensorrt_rtx"),
    ("Torch-TensorRT", r"Torch[-_ ]TensorRT|torch_tensorrt|TRTorch"),
    ("TensorRT", r"TensorRT|tensorrt|TRT|libnvinfer(?:_builder_resource)?|nvinfer"),
    ("Polygraphy", r"[Pp]olygraphy"),
    ("ModelOpt", r"(?:nvidia[-_])?[Mm]odel[Oo]pt|[Mm]odelopt"),
    ("ONNX Runtime", r"ONNX ?Runtime|onnxruntime(?:[-_]gpu)?|ORT"),
    ("Triton", r"Triton(?: Inference Server| Server)?|tritonserver|server_version"),
    ("DeepStream", r"DeepStream(?:SDK|[-_ ]app)?|deepstream(?:[-_]app)?"),
    ("cuDNN", r"cuDNN|CUDNN|cudnn"),
    ("cuBLAS", r"cuBLAS(?:/cuBLAS)?(?: ?LT|Lt)?|CUBLAS(?:LT)?|cublas(?:Lt)?"),
    ("CUDA", r"CUDA(?: [Rr]untime| [Dd]river| [Tt]oolkit)?|[Cc]uda(?: [Rr]untime| [Dd]river)?|cudart|nvcc"),
    ("driver", r"NVIDIA[- ][Dd]river|[Dd]river"),
    ("JetPack", r"JetPack|Jetpack|jetpack"),
    ("L4T", r"L4T|R\d\d \(release\)"),
    ("PyTorch", r"PyTorch|[Tt]orch"),
    ("ONNX IR", r"ONNX IR"),
    ("ONNX", r"ONNX|onnx"),
    ("opset", r"opset|[Oo]pset"),
    ("TensorFlow", r"TensorFlow|tensorflow"),
)
TOOL = {f"t{i}": name for i, (name, _) in enumerate(_TOOL_NAMES)}
VERSION = re.compile(
    r"(?<![\w-])(?:"
    + "|".join(f"(?P<t{i}>{rx})" for i, (_, rx) in enumerate(_TOOL_NAMES))
    + r")(?:\s*\|\s*|\s+|\s*[=:]+\s*|\.so\.|\s+[Vv]ersion:?\s*|\s*[Vv]ersion\s*(?:is\s*)?[:=]?\s*"
    r"|\s+v|-v|\s*\(v?|==)(?P<v>\d+\.\d+(?:\.\d+){0,3}(?:[.+-]?(?:post|dev|rc|a|b|cu|g)\w*)?)(?![\d.]*\d)"
)
TRT_NUMBER = re.compile(r"\[TensorRT v(?P<n>\d{4,6})\]|\bTRT-(?P<m>\d{4,6})-")
_ERROR_CODE = re.compile(
    r"\bError Code:? ?\d+|\bError\[\d+\]|\berror code:? ?-?\d+|\b(?:CUDA_ERROR|CUBLAS_STATUS|CUDNN_STATUS|NVINFER)_\w+"
    r"|\bcuda\w*Error\w+|\bcudaError\w*|\bCUDA error:? \d+|\bexit (?:code|status):? ?-?\d+|\bErrorCode::\w+"
    r"|\bstatus[ =:]+(?:\d+|[A-Z_]{4,})|\berrno:? ?\d+|\bE\d{4}\b"
)


def _unique(items: list[Any]) -> list[Any]:
    seen: set[Any] = set()
    out: list[Any] = []
    for x in items:
        key = tuple(x.items()) if isinstance(x, dict) else x
        if key not in seen:
            seen.add(key)
            out.append(x)
    return out


def trt_number(n: str) -> str:
    """7000 -> 7.0.0, 8502 -> 8.5.2, 100400 -> 10.4.0 (TensorRT's NV_TENSORRT_VERSION)."""
    if len(n) == 4:
        return f"{n[0]}.{n[1]}.{int(n[2:])}"
    return f"{int(n[:-4])}.{int(n[-4:-2])}.{int(n[-2:])}"


def files(text: str) -> list[str]:
    """File names and paths: the tools' model, engine, cache, library and source files, and any path of two parts."""
    out = []
    for m in FILE.finditer(text):
        f = (m["f"] or m["p"]).rstrip(".,;:)'\"")
        if m["p"] and not re.search(r"[A-Za-z]", f):  # `/1/2/3`: a fraction or a date, not a path
            continue
        out.append(f)
    return _unique(out)


def names(text: str) -> list[str]:
    """The names a message mentions: quoted, or after 'layer', 'node', 'tensor', 'input', 'output', 'plugin'.

    Messages are sentences, so not every word after those is a name: a quoted phrase of plain words (`See
    "Lazy Loading" section`) is a title; after `tensor:` any word is a name, but after a bare `tensor` only one
    that looks like an identifier (digits, `_ / . : [ ]`, an inner `-`: `conv_6`, `/model.22/Squeeze`, `1143`),
    or a capitalised word after a lower-case keyword (`layer Embedding`, `plugin OneHot`). `the tensor to have a
    static shape`, `this input tensor`, `Layer Time (ms)` name nothing."""
    found = [next(g for g in m.groups() if g) for m in QUOTED.finditer(text)]
    found = [n for n in found if not re.fullmatch(r"[A-Za-z]+(?: [A-Za-z]+)+", n)]
    for m in _NAMED.finditer(text):
        name = m["name"].rstrip(".,:;")
        if m["colon"] or _identifier(name, m["kw"]):
            found.append(name)
    return list(dict.fromkeys(n for n in found if n))


def _identifier(word: str, keyword: str) -> bool:
    """`word`, right after `keyword` without a colon, is a name rather than the next word of a sentence."""
    if word.startswith("[") or not re.search(r"\w", word):  # `{input [min=...]}`, `--- End node ---`
        return False
    if _IDENTIFIER.search(word):
        return True
    return keyword.islower() and word[:1].isupper()


def sizes(text: str) -> list[dict[str, Any]]:
    out = []
    for m in SIZE.finditer(text):
        n, unit = (m["n"], m["u"]) if m["n"] else (m["n2"], m["u2"])
        factor = _SIZE_UNIT.get(unit.lower())
        if factor is None:
            continue
        out.append({"text": m.group(0).strip(), "bytes": round(float(n) * factor)})
    return _unique(out)


def durations(text: str) -> list[dict[str, Any]]:
    out = []
    for m in DURATION.finditer(text):
        if m["clock"]:
            parts = [float(p) for p in m["clock"].split(":")]
            secs = parts[0] * 3600 + parts[1] * 60 + parts[2]
        else:
            secs = float(m["n"]) * _SECONDS[m["u"]]
        out.append({"text": m.group(0).strip(), "seconds": round(secs, 9)})
    return _unique(out)


def versions(text: str) -> list[dict[str, str]]:
    """(tool, version) pairs: `TensorRT version: 10.4.0`, `CUDA 12.2`, `libnvinfer.so.8.6.1`, `[TensorRT v8502]`."""
    out = []
    for m in VERSION.finditer(text):
        tool = next(TOOL[k] for k, v in m.groupdict().items() if v is not None and k in TOOL)
        out.append({"tool": tool, "version": m["v"]})
    named = {v["version"] for v in out}
    out.extend({"tool": "", "version": m["v"]} for m in _BARE_VERSION.finditer(text) if m["v"] not in named)
    for m in TRT_NUMBER.finditer(text):
        out.append({"tool": "TensorRT", "version": trt_number(m["n"] or m["m"])})
    return _unique(out)


def extract(text: str) -> dict[str, list[Any]]:
    """Every entity kind found in `text` (one line, or several joined by newlines); kinds not found are left out."""
    found: dict[str, list[Any]] = {
        "files": files(text),
        "names": names(text),
        "ops": _unique([next(g for g in m.groups() if g) for m in _OPS.finditer(text)]),
        "shapes": _unique([m.group(0) for m in SHAPE.finditer(text)]),
        "sizes": sizes(text) if re.search(r"\d\s?[KMGTkb]|[Bb]\b|\bbytes?\b|iB", text) else [],
        "durations": durations(text) if re.search(r"\d\s?[nuµmsh]|\d:\d\d:", text) else [],
        "versions": versions(text) if re.search(r"\d\.\d|v\d{4}|TRT-\d", text) else [],
        "error_codes": _unique([m.group(0) for m in _ERROR_CODE.finditer(text)]),
        "locations": _unique([m.group(0) for m in _LOCATION.finditer(text)]),
    }
    return {k: v for k, v in found.items() if v}
