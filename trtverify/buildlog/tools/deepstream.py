"""DeepStream's `nvinfer` element (gst-nvinfer, libnvds_infer): the engine each inference element looked for,
deserialised or built, its bindings, the INT8 calibration table and the custom library.

Formats, from DeepStream's public sources (sources/gst-plugins/gst-nvinfer/gstnvinfer.cpp's logger:
`gst_nvinfer_logger:<primary_gie> NvDsInferContext[UID 1]: Info from NvDsInferContextImpl::buildModel()
<nvdsinfer_context_impl.cpp:1914> [UID = 1]: <message>`, DeepStream 4's `NvDsInferContext[UID 1]:initialize(): ...`,
gstnvinfer_impl.cpp's `[UID 1]: Load new model:<config> sucessfully`; sources/libs/nvdsinfer/nvdsinfer_context_impl.cpp:
`Trying to create engine from model files`, `deserialized trt engine from :<path>`, `deserialize engine from file
:<path> failed`, `deserialize backend context from engine from file :<path> failed, try rebuild`, `serialize cuda
engine to file: <path> successfully`, `build engine file failed`, `Use deserialized engine model: <path>`, `Backend
has maxBatchSize 1 whereas 2 has been requested`, `Could not open custom lib: <dlerror>`; nvdsinfer_model_builder.cpp:
`Deserialize engine failed because file path: <path> open error`, `INT8 calibration file not specified. Trying FP16
mode.`, `INT8 calibration file not specified/accessible. ...`, `Cannot access INT8 calibration file '<path>'`,
`[Implicit Engine Info]: layers num: N` / `[FullDims Engine Info]: layers num: N` then one `0   INPUT  kFLOAT data
3x640x640   [min: .. opt: .. Max: ..]` row per binding); the engine file names nvinfer gives
(`model_b1_gpu0_fp16.engine`: batch, GPU, precision); custom libraries' `File does not exist: <calib.table>`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trtverify.buildlog.findings import Hit
from trtverify.buildlog.lines import LogRecord
from trtverify.buildlog.tools.common import lines_of

_GST = re.compile(
    r"(?:gst_nvinfer_logger:<(?P<elem>[^>]+)> )?NvDsInferContext\[UID (?P<uid>\d+)\]:\s*"
    r"(?:(?:Info|Warning|Error) (?:from|in) [\w:~]+\(\)(?: <[^>]*> \[UID = \d+\])?:\s*|\w+\(\):\s*)?(?P<msg>.*)"
)
_LOAD_MODEL = re.compile(r"(?:<(?P<elem>[^>]+)> )?\[UID (?P<uid>\d+)\]: Load new model:(?P<cfg>\S+) suc+es+ful+y")
_CONFIG_ERR = re.compile(r"Config file path: (?P<cfg>[^,\s]+), NvDsInfer Error: (?P<err>\w+)")
_PATH = r"\s*:?\s*(?P<path>\S+?\.(?:engine|plan|trt|eng|bin))"
_ENGINE = [
    (re.compile(r"^deserialized trt engine from" + _PATH), "deserialized"),
    (re.compile(r"^deserialize (?:backend context from )?engine from (?:engine from )?file" + _PATH + r" failed"),
     "deserialize_failed"),
    (re.compile(r"Deserialize engine failed because file path:" + _PATH + r" open error"), "not_found"),
    (re.compile(r"Deserialize engine failed from file:" + _PATH), "deserialize_failed"),
    (re.compile(r"^serialize cuda engine to file:" + _PATH + r" successfully"), "built"),
    (re.compile(r"^failed to serialize cu\w* engine to file:" + _PATH), "serialize_failed"),
    (re.compile(r"^Use deserialized engine model:" + _PATH), "used"),
    (re.compile(r"Failed to read from model engine file"), "not_found"),
]  # fmt: skip
_MODEL_FILE = re.compile(r"Cannot access (?P<kind>[\w ]+?) file '(?P<path>[^']+)'")
_BUILD = re.compile(r"^Trying to create engine from model(?: files)?")
_BUILD_FAILED = re.compile(
    r"(?P<what>build engine file failed|failed to build network since parsing model errors|build backend context "
    r"failed|generate backend failed.*|Failed to create "
    r"network using custom network creation function|Failed to get cuda engine from custom library API|Failed to "
    r"build CUDA engine on \S+|Failed to create NvDsInferContext instance)"
)
_MAX_BATCH = re.compile(r"Backend has maxBatchSize (?P<have>\d+) whereas (?P<want>\d+) has been requested")
_INFO = re.compile(r"\[(?P<mode>Implicit|FullDims|Explicit) Engine Info\]: layers num: (?P<n>\d+)")
_ROW = re.compile(
    r"^(?P<i>\d+)\s+(?P<io>INPUT|OUTPUT)\s+(?P<dt>k[A-Z0-9]+)\s+(?P<name>\S+(?: \S+)*?)\s+(?P<dims>\d+(?:x\d+)*)"
    r"(?:\s+min: (?P<min>\S+)\s+opt: (?P<opt>\S+)\s+Max: (?P<max>\S+))?\s*$"
)
_IMPLICIT_DEPRECATED = re.compile(r"implicit batch dimension mode has been deprecated")
_CALIB = [
    (re.compile(r"INT8 calibration file not specified\. Trying FP16 mode"), "not_specified_fp16"),
    (re.compile(r"INT8 calibration file not specified/accessible"), "not_specified"),
    (re.compile(r"Cannot access INT8 calibration file '?(?P<path>[^'\s]+)"), "missing"),
    (re.compile(r"^File does not exist: (?P<path>\S*calib\S*)"), "missing"),
]
_CUSTOM_LIB = re.compile(r"Could not open custom lib(?:rary)?:\s*(?P<err>.+)")
_DLERROR = re.compile(r"^(?P<lib>\S+?\.so\S*): cannot open shared object file")
_CUSTOM_FN = re.compile(r"(?P<msg>Could not find .{0,80}?(?:func(?:tion)?|symbol) '?(?P<fn>\w+)'?.*)")
_ENGINE_NAME = re.compile(r"_b(?P<batch>\d+)_(?:gpu|dla)(?P<gpu>\d+)_(?P<prec>fp32|fp16|int8|best)\.engine$")


# GStreamer's debug prefix (`0:00:01.159080019 17762 0x55de125e0d60 WARN  nvinfer gstnvinfer.cpp:677:...`): where a
# terminal wrap joined two messages into one record, each is read on its own
_GST_PREFIX = re.compile(r"(?<=\S)\s*(?=\d+:\d\d:\d\d\.\d+ +\d+ +0x[0-9a-f]+ +[A-Z]+ +nvinfer )")


_GST_OTHER = re.compile(r"gstnvinfer[\w.]*:\d+:\w+:<(?P<elem>[^>]+)>\s*(?:error:\s*)?(?P<msg>.*)")


def _ours(msg: str) -> bool:
    """A message of nvinfer's that the rule reads, outside the element's own logger lines."""
    return (
        any(rx.search(msg) for rx, _ in _ENGINE)
        or any(rx.search(msg) for rx, _ in _CALIB)
        or any(rx.search(msg) for rx in (_IMPLICIT_DEPRECATED, _BUILD_FAILED, _CUSTOM_LIB, _MODEL_FILE, _CONFIG_ERR))
    )


def _pieces(r: LogRecord) -> Iterator[tuple[int, str]]:
    for line, text in lines_of(r):
        for piece in _GST_PREFIX.split(text):
            yield line, piece.strip()


def _ctx(ctxs: dict[str, dict[str, Any]], uid: str, elem: str | None) -> dict[str, Any]:
    c = ctxs.setdefault(uid, {"uid": int(uid) if uid.isdigit() else uid, "engines": [], "lines": []})
    if elem:
        c.setdefault("element", elem)
    return c


def rule_deepstream(records: list[LogRecord]) -> Iterator[Hit]:
    """`deepstream_engine` (one per nvinfer element: its config file, each engine file looked for / deserialised /
    built / failed, the build, implicit or full-dims batch, the binding table, a max batch size too small),
    `deepstream_calibration` (medium: the INT8 calibration table missing or not given, FP16 used instead) and
    `deepstream_custom_lib` (high: the custom library that could not be opened, or a function missing in it)."""
    ctxs: dict[str, dict[str, Any]] = {}
    last: str | None = None
    pending: list[tuple[int, str]] = []  # lines printed before their element's first line (the model builder's)
    hits: list[Hit] = []
    table: dict[str, Any] | None = None
    seen = False
    for r in records:
        if r.dialect in ("blank", "elision"):
            table = None
            continue
        for line, text in _pieces(r):
            uid = elem = None
            msg = text
            if m := _GST.search(text):
                uid, elem, msg = m["uid"], m["elem"], m["msg"].strip()
            elif m := _LOAD_MODEL.search(text):
                c = _ctx(ctxs, m["uid"], m["elem"])
                c["config"] = m["cfg"]
                c["lines"].append(line)
                last, seen = m["uid"], True
                continue
            if uid is not None:
                seen = True
                c = _ctx(ctxs, uid, elem)
                for pl, pmsg in pending:
                    _read(c, pl, pmsg, hits)
                pending.clear()
                last = uid
                _read(c, line, msg, hits)
                table = None
                continue
            if table is not None and (row := _ROW.match(text)):
                b = {"index": int(row["i"]), "io": row["io"], "dtype": row["dt"], "name": row["name"],
                     "dims": row["dims"]}  # fmt: skip
                if row["min"]:
                    b.update(min=row["min"], opt=row["opt"], max=row["max"])
                table["bindings"].append(b)
                table["lines"].append(line)
                continue
            table = None
            msg = re.sub(r"^(?:(?:INFO|WARNING|ERROR): )?(?:\.\./nvdsinfer/[\w.]+:\d+ )?", "", text)
            if m := _INFO.search(msg):
                seen = True
                c = ctxs[last] if last is not None else _ctx(ctxs, "?", None)
                c["batch_mode"] = "implicit" if m["mode"] == "Implicit" else "full_dims"
                c["layers_num"] = int(m["n"])
                c["bindings"] = []
                c["lines"].append(line)
                table = {"bindings": c["bindings"], "lines": c["lines"]}
                continue
            owner = None
            if g := _GST_OTHER.search(msg):  # gstnvinfer's own errors name the element only
                msg = g["msg"].strip()
                owner = next((u for u, c in ctxs.items() if c.get("element") == g["elem"]), None)
            if not _ours(msg):
                continue
            if owner is not None:
                _read(ctxs[owner], line, msg, hits)
            elif msg.startswith("Deserialize engine failed") or last is None:
                pending.append((line, msg))
            else:
                _read(ctxs[last], line, msg, hits)
    if pending and (seen or ctxs):
        c = ctxs[last] if last is not None else _ctx(ctxs, "?", None)
        for pl, pmsg in pending:
            _read(c, pl, pmsg, hits)
    elif pending and any(p.startswith("Deserialize engine failed") for _, p in pending):
        c = _ctx(ctxs, "?", None)
        for pl, pmsg in pending:
            _read(c, pl, pmsg, hits)
    for c in ctxs.values():
        if len(c["lines"]) == 0:
            continue
        yield _engine_hit(c)
    yield from hits


def _read(c: dict[str, Any], line: int, msg: str, hits: list[Hit]) -> None:
    """One nvinfer message into its element's context; calibration and custom-library messages become their own
    hits."""
    c["lines"].append(line)
    who = c.get("element") or f"UID {c['uid']}"
    for rx, action in _ENGINE:
        if m := rx.search(msg):
            path = m.groupdict().get("path")
            c["engines"].append({"action": action, "path": path} if path else {"action": action})
            if path and (n := _ENGINE_NAME.search(path)):
                c.update(engine_batch=int(n["batch"]), engine_gpu=int(n["gpu"]), engine_precision=n["prec"])
            return
    if _BUILD.match(msg):
        c["built_from_model"] = True
    elif m := _MODEL_FILE.search(msg):
        c["model_file"] = m["path"]
        c.setdefault("errors", []).append(f"cannot access {m['kind']} file {m['path']}")
    elif m := _CONFIG_ERR.search(msg):
        c.setdefault("config", m["cfg"])
        c.setdefault("errors", []).append(m["err"])
    elif m := _BUILD_FAILED.search(msg):
        c.setdefault("errors", []).append(m["what"])
    elif m := _MAX_BATCH.search(msg):
        c["max_batch_size"], c["batch_size_requested"] = int(m["have"]), int(m["want"])
    elif _IMPLICIT_DEPRECATED.search(msg):
        c["batch_mode"] = c.get("batch_mode", "implicit")
        c["implicit_batch_deprecated"] = True
    elif m := _CUSTOM_LIB.search(msg):
        err = m["err"].strip()
        d: dict[str, Any] = {"element": who, "error": err}
        if lib := _DLERROR.match(err):
            d["library"] = lib["lib"]
        said = f"{who}: could not open the custom library" + (f" {d['library']}" if "library" in d else "")
        hits.append(Hit("deepstream_custom_lib", "build", "high", f"{said}: {err}", line, (), d))
    elif m := _CUSTOM_FN.search(msg):
        d = {"element": who, "function": m["fn"], "error": m["msg"]}
        hits.append(Hit("deepstream_custom_lib", "build", "high", f"{who}: {m['msg']}", line, (), d))
    else:
        for rx, state in _CALIB:
            if m := rx.search(msg):
                d = {"element": who, "state": state}
                if m.groupdict().get("path"):
                    d["path"] = m["path"]
                said = {"not_specified_fp16": "INT8 calibration table not given: FP16 used instead",
                        "not_specified": "INT8 calibration table not given or not readable",
                        "missing": f"INT8 calibration table {d.get('path', '')} does not exist"}[state]  # fmt: skip
                hits.append(Hit("deepstream_calibration", "calibration", "medium", f"{who}: {said}", line, (), d,
                                key=f"deepstream_calibration:{who}"))  # fmt: skip
                return


def _engine_hit(c: dict[str, Any]) -> Hit:
    who = c.get("element") or (f"UID {c['uid']}" if c["uid"] != "?" else "")
    acts = {e["action"]: e.get("path") for e in c["engines"]}
    said = []
    looked = acts.get("not_found") or acts.get("deserialize_failed")
    if looked or "not_found" in acts:
        said.append(f"engine {looked} not loaded" if looked else "engine file not read")
    if "deserialized" in acts:
        said.append(f"deserialized {acts['deserialized']}")
    if c.get("built_from_model"):
        said.append("built from the model files")
    if "built" in acts:
        said.append(f"serialized to {acts['built']}")
    if "serialize_failed" in acts:
        said.append(f"failed to serialize to {acts['serialize_failed']}")
    if c.get("errors"):
        said.append("; ".join(c["errors"]))
    if "batch_mode" in c:
        mode = {"implicit": "implicit batch", "full_dims": "explicit batch (full dims)"}[c["batch_mode"]]
        said.append(mode + (f", {c['layers_num']} bindings" if "layers_num" in c else ""))
    for b in c.get("bindings", [])[:4]:
        said.append(f"{b['io'].lower()} {b['name']} {b['dtype']} {b['dims']}" + (f" (max {b['max']})" if "max" in b
                                                                                    else ""))  # fmt: skip
    if "max_batch_size" in c:
        said.append(f"engine max batch size {c['max_batch_size']} < {c['batch_size_requested']} requested")
    if c.get("config"):
        said.append(f"config {c['config']}")
    engine = acts.get("used") or acts.get("deserialized") or acts.get("built") or looked
    d = {k: v for k, v in c.items() if k != "lines"}
    if engine:
        d["engine"] = engine
    failed = bool(c.get("errors")) or "serialize_failed" in acts
    sev = "high" if failed else "medium" if "max_batch_size" in c else "info"
    msg = f"DeepStream nvinfer{' ' + who if who else ''}: " + ("; ".join(said) or "named")
    ls = sorted(set(c["lines"]))
    return Hit("deepstream_engine", "build", sev, msg, ls[0], (), d, key=f"deepstream_engine:{c['uid']}",
               read=tuple(ls))  # fmt: skip


RULES = (rule_deepstream,)
KINDS = {
    "deepstream_engine": ("build", "deepstream"),  # info (high: build failed): engine files, batch mode, bindings
    "deepstream_calibration": ("calibration", "deepstream"),  # medium: the INT8 calibration table missing
    "deepstream_custom_lib": ("build", "deepstream"),  # high: the custom library not opened, a function missing
}
