"""Engine files and Polygraphy's other commands.

Formats: Polygraphy's util.save_file / load_file (`Saving engine to model.engine`, `Loading bytes from model.engine`,
`Saving tactic replay file to replay.json`, `Loading tactic replay file from replay.json`, `Saving tactic timing cache
to ...`), its profile echo (`Configuring with profiles:[ Profile 0: {x [min=[..], opt=[..], max=[..]]} ]`, older
`Profile().add('x', min=[..], opt=[..], max=[..])`), `polygraphy inspect model` (tools/inspect/subtool/model/text.py:
`==== TensorRT Engine ====`, `Name: n | Explicit Batch Engine (2 layers)`, `---- N Engine Input(s) ----`, `---- N
Profile(s) (M Binding(s) Each) ----`, `---- N Layer(s) ----`, `==== ONNX Model ====`, `Name: n | ONNX Opset: 17`,
`---- N Node(s) ----`, `---- N Initializer(s) ----`, per-layer tensors `{y [dtype=float16, shape=(..)]}`);
TensorRT-LLM's `Serializing engine to .../rank0.engine...`; DeepStream's `Deserialize engine failed from file: X`,
`deserialized trt engine from :X`, `serialize cuda engine to file: X successfully`; TensorRT-RTX's `Engine serialized to
X`; the engine loader's version checks (TensorRT 7-10 runtime.cpp / the plan header: `The engine plan file is not
compatible with this version of TensorRT, expecting library version 8.6.1.6 got 8.5.2.2, please rebuild.`, `...
generated on an incompatible device, expecting compute 8.6 got compute 8.7, please rebuild.`, `Serialization assertion
stdVersionRead == kSERIALIZATION_VERSION failed.Version tag does not match. Note: Current Version: 236, Serialized
Engine Version: 239`, `Serialization assertion plan->header.magicTag == rt::kPLAN_MAGIC_TAG failed.Trying to load an
engine created with incompatible serialization version.`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trtverify.buildlog.findings import Hit
from trtverify.buildlog.lines import LogRecord
from trtverify.buildlog.tools.common import first_line, lines_of

_PATH = r"(?P<path>[^\s'\"]+?\.(?:engine|plan|trt|bin|eng))(?=[\s'\",:;)]|\.{3}|\.?$)"
_ENGINE_IO = [
    (re.compile(r"Deserialize engine failed (?:from file|because file path): ?" + _PATH), "load_failed"),
    (
        re.compile(
            r"(?:Failed to (?:load|open|read|deserialize)|Error opening|Cannot open|Unable to (?:open|load))"
            r" (?:the )?(?:engine|plan|file)(?: file)?:? ?'?" + _PATH,
            re.I,
        ),
        "load_failed",
    ),  # fmt: skip
    (re.compile(r"[Ee]ngine file:? '?" + _PATH + r"'? (?:does not exist|not found|is missing)"), "missing"),
    (re.compile(r"(?:No such file or directory|not found|does not exist)\W+'?" + _PATH), "missing"),
    (
        re.compile(r"^(?:Saving|Writing|Serializing) (?:the )?(?:TensorRT )?engine (?:to|into)(?: file)?:? '?" + _PATH),
        "saved",
    ),  # fmt: skip
    (re.compile(r"^(?:Engine serialized to|serialize cuda engine to file:|Saved engine to) ?'?" + _PATH), "saved"),
    (re.compile(r"^Loading (?:bytes|engine|TensorRT engine|the engine)(?: from(?: bytes)?)?:? '?" + _PATH), "loaded"),
    (re.compile(r"^(?:deserialized trt engine from|Loaded engine from|Loading engine file):? ?'?" + _PATH), "loaded"),
    # Ultralytics: `Loading yolov8n.engine for TensorRT inference...`, `TensorRT: building FP16 engine as
    # yolov8n.engine`, `TensorRT: export success ✅ 120.3s, saved as 'yolov8n.engine' (13.6 MB)`
    (re.compile(r"^Loading " + _PATH + r" for TensorRT inference"), "loaded"),
    (re.compile(r"TensorRT: building (?:\w+ )?engine as '?" + _PATH), "building"),
    (re.compile(r"TensorRT: export success\b.*?saved as '?" + _PATH), "saved"),
    (re.compile(r"^Building (?:a new )?(?:TensorRT )?engine (?:for .*?: |to )'?" + _PATH), "building"),
    (
        re.compile(r"(?:Rebuilding|Re-building|will rebuild|rebuild(?:ing)? the) (?:the )?engine\b.*?" + _PATH, re.I),
        "rebuilt",
    ),  # fmt: skip
]
_ARTIFACT = re.compile(
    r"^(?P<act>Saving|Loading) (?P<what>tactic replay file|tactic timing cache|calibration cache|timing cache)"
    r" (?:to|from):? (?P<path>\S+)"
)
_MISMATCH = [
    re.compile(
        r"engine plan file is not compatible with this version of TensorRT, expecting library version "
        r"(?P<want>[\d.]+) got (?P<got>[\d.]+)"
    ),  # fmt: skip
    re.compile(
        r"engine plan file is generated on an incompatible device, expecting compute (?P<want_cc>[\d.]+) "
        r"got compute (?P<got_cc>[\d.]+)"
    ),  # fmt: skip
    re.compile(
        r"Version tag does not match\.?(?: Note: Current Version: (?P<cur>\d+), Serialized Engine Version: "
        r"(?P<eng>\d+))?"
    ),  # fmt: skip
    re.compile(r"magicTag == rt::kPLAN_MAGIC_TAG failed|engine created with incompatible serialization version"),
    re.compile(
        r"[Ss]erialized engine (?:was )?(?:built|created) with (?:a different|an incompatible) (?:version|"
        r"TensorRT)"
    ),  # fmt: skip
]


_CLI = re.compile(r"(?:^|\s)--(?P<io>save|load)Engine[= ](?P<path>\S+)")
_ECHO = re.compile(r"^(?P<io>Save|Load) engine: (?P<path>\S+)$")  # trtexec's options echo (an empty one: not given)


def rule_engine_files(records: list[LogRecord]) -> Iterator[Hit]:
    """Each engine file the log names, with what happened to it (saved, loaded, building, rebuilt, missing,
    load_failed; `saving` / `loading` where only trtexec's or tensorrt_rtx's command line or options echo names
    it); a failed or missing load is high. One finding per path."""
    asked: list[Hit] = []  # named by a command line or options echo only: reported where nothing else names it
    told: set[str] = set()
    for r in records:
        text = first_line(r).strip()
        cli = [(m["io"].lower(), m["path"]) for m in (*_CLI.finditer(text), *filter(None, [_ECHO.match(text)]))]
        for io, path in cli:
            action = "saving" if io == "save" else "loading"
            asked.append(Hit("engine_file", "build", "info", f"engine {action} {path} (as the command asks)",
                             r.first, (), {"path": path, "action": action}, key=f"engine_file:{path}"))  # fmt: skip
        if cli:
            continue
        for rx, action in _ENGINE_IO:
            m = rx.search(text)
            if m:
                path = m["path"].rstrip(".")
                sev = "high" if action in ("load_failed", "missing") else "info"
                msg = {"saved": "engine saved to", "loaded": "engine loaded from", "building": "building engine",
                       "rebuilt": "engine rebuilt:", "missing": "engine file missing:",
                       "load_failed": "engine failed to load from"}[action] + f" {path}"  # fmt: skip
                told.add(path)
                yield Hit("engine_file", "build", sev, msg, r.first, (), {"path": path, "action": action},
                          key=f"engine_file:{path}")  # fmt: skip
                break
        m = _ARTIFACT.match(text)
        if m:
            d = {"what": m["what"], "path": m["path"], "action": "saved" if m["act"] == "Saving" else "loaded"}
            yield Hit("polygraphy_artifact", "tactics", "info", text, r.first, (), d, key=f"artifact:{m['path']}")
    yield from (h for h in asked if h.detail["path"] not in told)


def rule_engine_version_mismatch(records: list[LogRecord]) -> Iterator[Hit]:
    """An engine built by another TensorRT (or for another GPU) than the one loading it: both versions or
    serialization tags where the log prints them, and the fix."""
    for r in records:
        text = r.text.replace("\n", " ")
        for rx in _MISMATCH:
            m = rx.search(text)
            if not m:
                continue
            g = {k: v for k, v in m.groupdict().items() if v}
            d: dict[str, Any] = {}
            if "want" in g:
                d.update(engine_version=g["got"], runtime_version=g["want"])
            if "want_cc" in g:
                d.update(engine_compute=g["got_cc"], runtime_compute=g["want_cc"])
            if "cur" in g:
                d.update(runtime_tag=int(g["cur"]), engine_tag=int(g["eng"]))
            d["fix"] = ("rebuild the engine on this GPU" if "want_cc" in g else
                        "rebuild the engine with the TensorRT that loads it" +
                        (f" ({g['want']})" if "want" in g else ""))  # fmt: skip
            says = ", ".join(f"{k} {v}" for k, v in d.items() if k != "fix")
            msg = "engine built by another TensorRT than the one loading it" + (f" ({says})" if says else "")
            if "want_cc" in g:
                msg = f"engine built for another GPU (compute {g['got_cc']}, this one {g['want_cc']})"
            yield Hit("engine_version_mismatch", "build", "high", f"{msg}: {d['fix']}", r.first, (), d)
            break


_PROFILE = re.compile(
    r"'?(?P<name>[\w./:-]+)'?,?\s*\[?min=\[(?P<min>[^\]]*)\],?\s*opt=\[(?P<opt>[^\]]*)\],?\s*max=\[(?P<max>[^\]]*)\]"
)
_INSPECT_HEAD = re.compile(r"^==== (?P<what>TensorRT Engine|ONNX Model|TensorRT Network|Trt Network) ====")
_NAME = re.compile(r"^Name: (?P<name>.*?) \| (?P<rest>.*)$")
_COUNT = re.compile(r"^---- (?P<n>\d+) (?P<what>[\w ]+?)\(s\)(?: \((?P<b>\d+) Binding\(s\) Each\))?(?P<tail>.*)----$")
_DTYPE = re.compile(r"->\s*\{.*?\[dtype=(?P<dt>\w+)")
_LAYERS_IN_NAME = re.compile(r"\((?P<n>\d+) layers?\)")
_MEMORY = re.compile(r"^Device Memory: (?P<n>\d+) bytes")
_LAYER = re.compile(r"^Layer (?P<i>\d+)\s*\| (?P<name>.+?) \[Op: (?P<op>[^\]]+)\]")


def rule_polygraphy_inspect(records: list[LogRecord]) -> Iterator[Hit]:
    """`polygraphy inspect model` summaries (engine, ONNX model, network): name, layer / node / initializer /
    input / output / profile counts, device memory, each listed layer (`--show layers`: name, op, output type) and
    the count of layer outputs per type; and the optimization
    profiles a build was configured with (`optimization_profiles`)."""
    cur: dict[str, Any] | None = None
    lines: list[int] = []
    profiles: list[dict[str, Any]] = []
    prof_lines: list[int] = []

    def done() -> Iterator[Hit]:
        if cur is None:
            return
        counts = ", ".join(f"{v} {k}" for k, v in cur.get("counts", {}).items())
        msg = f"{cur['what']}" + (f" {cur['name']}" if cur.get("name") else "") + (f": {counts}" if counts else "")
        if cur.get("precision"):
            msg += "; layer outputs " + ", ".join(f"{k} {v}" for k, v in cur["precision"].items())
        yield Hit("polygraphy_inspect", "performance", "info", msg, lines[0], (), cur, key=f"inspect:{lines[0]}",
                  read=tuple(lines))  # fmt: skip

    for r in records:
        if r.dialect in ("blank", "elision"):
            continue
        for line, text in lines_of(r):
            if "min=[" in text and "max=[" in text:
                for m in _PROFILE.finditer(text):
                    profiles.append({k: m[k] for k in ("name", "min", "opt", "max")})
                    prof_lines.append(line)
            if m := _INSPECT_HEAD.match(text):
                yield from done()
                cur, lines = {"what": m["what"], "counts": {}}, [line]
            elif cur is None:
                continue
            elif m := _NAME.match(text):
                cur["name"] = m["name"]
                cur["kind"] = m["rest"]
                if n := _LAYERS_IN_NAME.search(m["rest"]):
                    cur["counts"]["layers"] = int(n["n"])
                lines.append(line)
            elif m := _COUNT.match(text):
                cur["counts"][m["what"].strip().lower().replace(" ", "_") + "s"] = int(m["n"])
                lines.append(line)
            elif m := _MEMORY.match(text):
                cur["device_memory_bytes"] = int(m["n"])
                lines.append(line)
            elif m := _LAYER.match(text):
                cur.setdefault("layers", []).append({"name": m["name"], "op": m["op"]})
                lines.append(line)
            elif m := _DTYPE.search(text):
                cur.setdefault("precision", {})[m["dt"]] = cur.setdefault("precision", {}).get(m["dt"], 0) + 1
                if cur.get("layers") and "output_dtype" not in cur["layers"][-1]:
                    cur["layers"][-1]["output_dtype"] = m["dt"]  # a layer's precision: its first output's type
                lines.append(line)
            elif text.startswith("{") and cur.get("layers"):
                lines.append(line)  # a layer's input tensors
    yield from done()
    if profiles:
        names = ", ".join(f"{p['name']} min [{p['min']}] opt [{p['opt']}] max [{p['max']}]" for p in profiles[:4])
        yield Hit(
            "optimization_profiles",
            "build",
            "info",
            f"optimization profiles: {names}",
            prof_lines[0],
            tuple(dict.fromkeys(p["name"] for p in profiles)),
            {"profiles": profiles},
            read=tuple(prof_lines),
        )


_ENGINE_KINDS = {"build_failure", "engine_version_mismatch", "library_version_mismatch", "log_error",
                 "plugin_not_found", "memory_shortfall", "trtllm_build_time", "build_time"}  # fmt: skip


def attach_engine_files(hits: list[Hit], records: list[LogRecord]) -> None:
    """The engine file a finding concerns, in its detail (`engine`): the first one named in the 5 lines after the
    finding (a failed deserialisation names its file next), else the last one named before it, else the only one
    the log names. Only where the finding is about an engine (build failures, version mismatches, memory, build
    times, plugins, errors that mention an engine or its (de)serialisation) and the log names one."""
    named = [(h.line, h.detail["path"]) for h in hits if h.kind == "engine_file"]
    if not named:
        return
    for h in hits:
        if h.kind not in _ENGINE_KINDS or "engine" in h.detail:
            continue
        if h.kind == "log_error" and not re.search(r"engine|[Ss]erializ|plan", h.message):
            continue
        before = [p for line, p in named if line <= h.line]
        after = [p for line, p in named if h.line < line <= h.line + 5]
        path = after[0] if after and h.kind != "build_time" else (before[-1] if before else None)
        if path is None and len({p for _, p in named}) == 1 and h.kind not in ("log_error",):
            path = named[0][1]  # the one engine the log names: a build's summary is about it
        if path:
            h.detail["engine"] = path


RULES = (rule_engine_files, rule_engine_version_mismatch, rule_polygraphy_inspect)
KINDS = {
    "engine_file": ("build", "engine_file"),  # info (high when missing / failed to load): path, action
    "polygraphy_artifact": ("tactics", "polygraphy_convert"),  # info: tactic replay / timing cache saved or loaded
    "engine_version_mismatch": ("build", "engine_version_mismatch"),  # high: both versions or tags, the fix
    "polygraphy_inspect": ("performance", "polygraphy_inspect"),  # info: counts, memory, output precisions
    "optimization_profiles": ("build", "polygraphy_convert"),  # info: min / opt / max per input
}
