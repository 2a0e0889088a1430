"""ONNX Runtime's TensorRT execution provider and the NV TensorRT RTX one: where the nodes went, why a provider was
not used, and the engine and timing cache files.

Formats, from onnxruntime's sources: session_state.cc's VERBOSE placement listing (`Node placements`, ` All nodes
placed on [TensorrtExecutionProvider]. Number of nodes: 1`, ` Node(s) placed on [CUDAExecutionProvider]. Number of
nodes: 6` then one `  OpType (NodeName)` line per node) and its WARNING `Some nodes were not assigned to the preferred
execution providers ...`; tensorrt_execution_provider.cc's `[TensorRT EP] Whole graph will run on TensorRT execution
provider`, `... Graph is partitioned and number of subgraphs running on TensorRT execution provider is N`, `No graph
will run on ...` (older builds spell it `exeuction`), its VERBOSE cache lines (`[TensorRT EP] Serialized <engine cache
path>`, `DeSerialized <path>`, `Serialized timing cache <path>`, `Deserialized timing cache from <path>`) and its
profile warnings (`Number of optimization profiles should be greater than 0`), the same under `[NvTensorRTRTX EP]`;
provider_bridge_ort.cc's `Failed to load library libonnxruntime_providers_tensorrt.so with error: libnvinfer.so.8:
cannot open shared object file`, Windows' `LoadLibrary failed with error 126 "" when trying to load "...dll"` and
`Error loading "...dll" which depends on "nvinfer_10.dll" which is missing.`; onnxruntime_pybind_state.cc's `Failed to
create TensorrtExecutionProvider. Please reference ...` and the Python session's `EP Error ... when using [...]` /
`Falling back to ['CUDAExecutionProvider', 'CPUExecutionProvider'] and retrying.`, `Specified provider 'X' is not in
available provider names.`
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trtverify.buildlog.findings import Hit
from trtverify.buildlog.lines import LogRecord
from trtverify.buildlog.tools.common import lines_of
from trtverify.util.words import count

_PLACED = re.compile(
    r"^(?P<all>All nodes(?: have been)?|Node\(s\)) placed on \[(?P<ep>\w+?)(?:ExecutionProvider)?\]\.?"
    r"(?:\s*Number of nodes: (?P<n>\d+))?"
)
_NODE = re.compile(r"^(?P<op>[\w.:-]+) \((?P<name>[^()]*)\)$")
_PREFERRED = re.compile(
    r"Some nodes were not assigned to the preferred execution providers|Rerunning with verbose output on a "
    r"non-minimal build will show node assignments"
)
_TRT_EP = r"\[(?P<ep>TensorRT|NvTensorRTRTX) EP\]"
_WHOLE = re.compile(_TRT_EP + r" Whole graph will run on \w+ ex\w+ provider")
_PARTITIONED = re.compile(_TRT_EP + r" Graph is partitioned and number of subgraphs running on \w+ ex\w+ provider is "
                          r"(?P<n>\d+)")  # fmt: skip
_NONE = re.compile(_TRT_EP + r" No graph will run on \w+ ex\w+ provider")
_CACHE = re.compile(
    _TRT_EP + r" (?P<act>Serialized|DeSerialized|Deserialized|Decrypted and DeSerialized|Encrypted and Serialized)"
    r"(?P<timing> timing cache)?(?: from)?:? (?P<path>\S+)"
)
_PROFILE = re.compile(_TRT_EP + r" (?P<msg>.*\bprofiles?\b.*)", re.I)
_EP_FAILED = re.compile(_TRT_EP + r" (?P<msg>(?:Failed|Can't|Could not|Unable)\b.*?)(?::\s*(?P<node>\S+))?$")
_LIB_LINUX = re.compile(
    r"Failed to load library (?P<lib>\S+) with error: "
    r"(?P<err>(?P<missing>[^\s:]+): cannot open shared object file.*|.+)"
)
_LIB_WIN = re.compile(
    r'LoadLibrary failed with error (?P<code>\d+) "(?P<err>[^"]*)" when trying to load "(?P<lib>[^"]+)"'
)
_LIB_DEPENDS = re.compile(r'Error loading "(?P<lib>[^"]+)" which depends on "(?P<missing>[^"]+)" which is missing')
_CREATE_FAILED = re.compile(r"Failed to create (?P<p>\w+ExecutionProvider)")
# onnxruntime_pybind_state.cc, where the TensorRT libraries are not found (the TensorRT EP's plugins are not registered)
_INSTALL_TRT = re.compile(r"Please install TensorRT libraries as mentioned in the GPU requirements page")
_WHEN_USING = re.compile(r"when using (?P<req>\[[^\]]*\])")
_FALLING_BACK = re.compile(r"Falling back to (?P<fb>\[[^\]]*\]) and retrying")
_NOT_AVAILABLE = re.compile(r"Specified provider '(?P<p>\w+)' is not in available provider names")
_RUNNING_ON = re.compile(r"^Running on (?P<p>\w+ExecutionProvider)")
_PROVIDER_LIB = re.compile(r"onnxruntime_providers_(?P<p>\w+?)(?:\.dll|\.so|\b)")


def _items(records: list[LogRecord]) -> Iterator[tuple[int, str, LogRecord]]:
    for r in records:
        if r.dialect in ("blank", "elision"):
            continue
        for line, text in lines_of(r):
            text = text.replace("**", "").strip()  # markdown bold left in a pasted log
            if text:
                yield line, text, r


def _names(text: str) -> list[str]:
    return re.findall(r"'(\w+)'", text)


def rule_ort_placement(records: list[LogRecord]) -> Iterator[Hit]:
    """`ort_ep_placement`: how many nodes each provider took (with their op types and names) and how the TensorRT
    EP split the graph (whole graph, N subgraphs, none); medium where a TensorRT provider was in the session and
    nodes went to another one."""
    eps: dict[str, dict[str, Any]] = {}
    d: dict[str, Any] = {}
    ls: list[int] = []
    cur: str | None = None
    for line, text, r in _items(records):
        if m := _PLACED.match(text):
            cur = m["ep"]
            n = int(m["n"]) if m["n"] else None
            eps[cur] = {"nodes": n, "all": m["all"].startswith("All"), "ops": {}, "names": []}
            ls.append(line)
            continue
        if cur is not None and r.dialect == "onnxruntime" and (m := _NODE.match(text)):
            e = eps[cur]
            e["ops"][m["op"]] = e["ops"].get(m["op"], 0) + 1
            if len(e["names"]) < 50:
                e["names"].append(m["name"])
            ls.append(line)
            continue
        cur = None
        if text == "Node placements":
            ls.append(line)
        elif _PREFERRED.search(text):
            d["not_preferred"] = True
            ls.append(line)
        elif m := _WHOLE.search(text):
            d["trt_ep"], d["subgraphs"], d["whole_graph"] = m["ep"], 1, True
            ls.append(line)
        elif m := _PARTITIONED.search(text):
            d["trt_ep"], d["subgraphs"] = m["ep"], int(m["n"])
            ls.append(line)
        elif m := _NONE.search(text):
            d["trt_ep"], d["subgraphs"] = m["ep"], 0
            ls.append(line)
    if not ls:
        return
    trt_in = any(k in ("Tensorrt", "NvTensorRTRTX") for k in eps) or "trt_ep" in d
    others = {k: v["nodes"] for k, v in eps.items() if k not in ("Tensorrt", "NvTensorRTRTX")}
    parts = [f"{'all nodes on ' if v['all'] else ''}{k}ExecutionProvider"
             + (f" {v['nodes']}" if v["nodes"] is not None else "") for k, v in eps.items()]  # fmt: skip
    msg = "ONNX Runtime node placement: " + (", ".join(parts) if parts else "")
    if "subgraphs" in d:
        ep = f"{d['trt_ep']} EP" if d["trt_ep"] != "TensorRT" else "TensorRT EP"
        said = (
            ("whole graph on the " + ep)
            if d.get("whole_graph")
            else f"{count(d['subgraphs'], 'subgraph')} on the " + ep
        )
        msg += ("; " if parts else "") + said
    if d.get("not_preferred"):
        msg += ("; " if parts or "subgraphs" in d else "") + "some nodes not on the preferred providers"
    for k, v in eps.items():
        if k not in ("Tensorrt", "NvTensorRTRTX") and v["ops"]:
            shown = ", ".join(f"{op} x{n}" for op, n in list(v["ops"].items())[:6])
            msg += f"; on {k}: {shown}"
    d["providers"] = {f"{k}ExecutionProvider": v for k, v in eps.items()}
    sev = "medium" if (trt_in and (others or d.get("subgraphs") == 0)) else "info"
    layers = tuple(n for k, v in eps.items() if k not in ("Tensorrt", "NvTensorRTRTX") for n in v["names"])
    yield Hit("ort_ep_placement", "fallback", sev, msg, ls[0], layers[:50], d, read=tuple(ls))


def rule_ort_provider_fallback(records: list[LogRecord]) -> Iterator[Hit]:
    """`ort_ep_unavailable` (high): a provider that could not be created (its library or a library it needs is
    missing, a LoadLibrary / dlopen error), the providers asked for and those the session fell back to."""
    d: dict[str, Any] = {}
    ls: list[int] = []
    said: list[str] = []
    for line, text, _r in _items(records):
        hit = False
        if m := _LIB_LINUX.search(text):
            d.setdefault("library", m["lib"])
            if m["missing"]:
                d.setdefault("missing_library", m["missing"])
            d.setdefault("error", m["err"].strip())
            hit = True
        if m := _LIB_WIN.search(text):
            d.setdefault("library", m["lib"])
            d.setdefault("error_code", int(m["code"]))
            if m["err"]:
                d.setdefault("error", m["err"])
            hit = True
        if m := _LIB_DEPENDS.search(text):
            d.setdefault("library", m["lib"])
            d["missing_library"] = m["missing"]
            hit = True
        if m := _CREATE_FAILED.search(text):
            d.setdefault("provider", m["p"])
            hit = True
        if _INSTALL_TRT.search(text):
            d.setdefault("provider", "TensorrtExecutionProvider")
            d["reason"] = "the TensorRT libraries were not found (PATH / LD_LIBRARY_PATH)"
            hit = True
        if m := _NOT_AVAILABLE.search(text):
            d.setdefault("provider", m["p"])
            d["not_available"] = True
            hit = True
        if m := _WHEN_USING.search(text):
            d["requested"] = _names(m["req"])
            hit = True
        if m := _FALLING_BACK.search(text):
            d["fallback"] = _names(m["fb"])
            hit = True
        if m := _RUNNING_ON.match(text):
            d["running_on"] = m["p"]
            hit = hit or bool(ls)
        if hit:
            ls.append(line)
            said.append(text)
    if not ls:
        return
    if "provider" not in d and (p := _PROVIDER_LIB.search(d.get("library", ""))):
        d["provider"] = {"tensorrt": "TensorrtExecutionProvider", "cuda": "CUDAExecutionProvider",
                         "nv_tensorrt_rtx": "NvTensorRTRTXExecutionProvider"}.get(p["p"], p["p"])  # fmt: skip
    who = d.get("provider", "an execution provider")
    msg = f"{who} not used"
    if d.get("missing_library"):
        msg += f": {d['missing_library']} is missing"
        if d.get("library"):
            msg += f" (loading {d['library']})"
    elif d.get("library"):
        msg += f": {d['library']} failed to load" + (f" (error {d['error_code']})" if "error_code" in d else "")
        if d.get("error"):
            msg += f": {d['error']}"
    elif d.get("reason"):
        msg += f": {d['reason']}"
    elif d.get("not_available"):
        msg += ": not in the available providers"
    elif d.get("provider"):
        msg += ": failed to create it (its dependencies are not met)"
    if d.get("fallback"):
        msg += "; fell back to " + ", ".join(d["fallback"])
    yield Hit("ort_ep_unavailable", "fallback", "high", msg, ls[0], (), d, read=tuple(ls))


_OPTIONS = re.compile(_TRT_EP + r" (?:TensorRT |NvTensorRTRTX )?(?:provider|EP) options:\s*(?P<rest>.*)", re.I)
_OPTION = re.compile(r"(?:^|,\s*)(?P<k>[a-z][a-z0-9_]+): (?P<v>[^,]*?)(?=,|$)")
_OPTION_LINE = re.compile(r"^(?:trt|nv|int8|device)[a-z0-9_]*: [^,]*,?$")
_SHOWN_OPTIONS = (
    "trt_fp16_enable", "trt_int8_enable", "trt_engine_cache_enable", "trt_cache_path", "trt_engine_cache_path",
    "trt_timing_cache_enable", "trt_timing_cache_path", "trt_max_workspace_size", "trt_profile_min_shapes",
    "trt_profile_opt_shapes", "trt_profile_max_shapes", "device_id",
)  # fmt: skip


def rule_ort_ep_options(records: list[LogRecord]) -> Iterator[Hit]:
    """`ort_ep_options`: the TensorRT EP's provider options as it prints them (`[TensorRT EP] TensorRT provider
    options: device_id: 0, trt_fp16_enable: 0, ...`, on one line or split), key / value; the message states the
    precision flags, the engine and timing cache settings and paths, the workspace and the profile shapes given."""
    opts: dict[str, str] = {}
    ls: list[int] = []
    ep = ""
    reading = False
    for line, text, _r in _items(records):
        m = _OPTIONS.search(text)
        if m:
            ep, reading, rest = m["ep"], True, m["rest"]
        elif reading and _OPTION_LINE.match(text):
            rest = text
        else:
            reading = False
            continue
        for o in _OPTION.finditer(rest):
            opts[o["k"]] = o["v"].strip()
        ls.append(line)
    if not opts:
        return
    shown = [f"{k} {opts[k]}" for k in _SHOWN_OPTIONS if opts.get(k, "") != ""]
    msg = f"{ep} EP provider options: " + ", ".join(shown or [f"{k} {v}" for k, v in list(opts.items())[:8]])
    d: dict[str, Any] = {"ep": ep, "options": opts}
    for k in ("trt_cache_path", "trt_engine_cache_path", "trt_timing_cache_path"):
        if opts.get(k):
            d.setdefault("cache_path", opts[k])
    yield Hit("ort_ep_options", "build", "info", msg, ls[0], (), d, read=tuple(ls))


def rule_ort_ep_files(records: list[LogRecord]) -> Iterator[Hit]:
    """`ort_ep_cache` (each engine / timing cache file the TensorRT EPs wrote or read, with its path),
    `ort_ep_profile` (their optimization profile warnings) and `ort_ep_error` (high: an engine the EP failed to
    build or load, with the fused node)."""
    files: list[dict[str, Any]] = []
    ls: list[int] = []
    for line, text, r in _items(records):
        if m := _CACHE.search(text):
            act = m["act"].lower()
            what = "timing_cache" if m["timing"] else ("ep_context_model" if m["path"].endswith(".onnx") else "engine")
            f = {"ep": m["ep"], "path": m["path"], "kind": what,
                 "action": "read" if "deserial" in act else "written"}  # fmt: skip
            if f not in files:
                files.append(f)
            ls.append(line)
        elif m := _PROFILE.search(text):
            d = {"ep": m["ep"], "warning": m["msg"]}
            d.update(
                {k: v for k, v in zip(("input",), re.findall(r"input[ :]+'?([\w./:-]+)'?", m["msg"]), strict=False)}
            )
            sev = "medium" if r.severity in ("warning", "error", "internal_error") else "info"
            yield Hit("ort_ep_profile", "build", sev, text, line, (), d, key=f"ort_ep_profile:{m['msg'][:60]}")
        elif m := _EP_FAILED.search(text):
            d = {"ep": m["ep"], "error": m["msg"].strip()}
            layers: tuple[str, ...] = ()
            if m["node"]:
                d["node"] = m["node"].rstrip(".,;)")
                layers = (d["node"],)
            yield Hit("ort_ep_error", "build", "high", text, line, layers, d)
    if files:
        parts = [f"{f['kind'].replace('_', ' ')} {f['action']}: {f['path']}" for f in files[:6]]
        msg = f"{files[0]['ep']} EP cache files: " + "; ".join(parts)
        yield Hit("ort_ep_cache", "tactics", "info", msg, ls[0], (), {"files": files}, read=tuple(ls))


RULES = (rule_ort_placement, rule_ort_provider_fallback, rule_ort_ep_options, rule_ort_ep_files)
KINDS = {
    "ort_ep_placement": ("fallback", "ort_ep"),  # info (medium: nodes left to CUDA / CPU): nodes per provider
    "ort_ep_unavailable": ("fallback", "ort_ep"),  # high: the provider not created: missing library, fallback
    "ort_ep_options": ("build", "ort_ep"),  # info: the EP's provider options (precision, caches, paths, profiles)
    "ort_ep_cache": ("tactics", "ort_ep"),  # info: engine / timing cache files written or read, paths
    "ort_ep_profile": ("build", "ort_ep"),  # info (medium: a warning): the EP's optimization profile messages
    "ort_ep_error": ("build", "ort_ep"),  # high: an engine the EP could not build or load, the fused node
}
