"""Message families beyond the original rules: DLA placement listings, plugins, implementations, API and
deprecation messages, build time, TF-TRT and ONNX Runtime TensorRT EP fallbacks. Kinds: config.findings.FAMILY_KINDS.

Each rule matches a message family across TensorRT 6-10 wordings and the loggers that wrap it (trtexec, the Python
logger, DeepStream, Torch-TensorRT, TF-TRT, ONNX Runtime), on the record text lines.split_records leaves after the
prefix; none raises on any input.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterator
from typing import Any

from trtverify.buildlog.findings import Hit, Rule, _msg
from trtverify.buildlog.lines import LogRecord
from trtverify.util.words import count

# --- dla_layers: "Layers running on DLA / GPU" listings --------------------------------------

# TensorRT 7: `--------------- Layers running on DLA:` then one record `{a,b,c}, {d,e}` (often terminal-wrapped);
# TensorRT 8.x-10: `---------- Layers Running on DLA ----------` then one `[DlaLayer] {ForeignNode[a...b]}` or
# `[GpuLayer] TYPE: name` record per layer.
_LISTING_HEAD = re.compile(r"^[-=\s]*Layers running on (?P<dev>DLA|GPU)\b[\s:\-=]*(?P<rest>.*)$", re.I)
_LISTING_ITEM = re.compile(r"^\[(?P<dev>Dla|Gpu)Layer\]\s*(?:[A-Z][A-Z0-9_]*: )?(?P<name>.+)$")


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets; `{a,b}` groups (TensorRT 7 DLA subgraphs) are opened into their names."""
    out: list[str] = []
    depth, cur = 0, ""
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    names: list[str] = []
    for part in (p.strip() for p in out):
        if part.startswith("{") and not part.startswith("{ForeignNode"):
            closed = part.endswith("}")
            inner = [x.strip() for x in part.strip("{}").split(",")]
            if not closed and len(inner) > 1:  # an unclosed group at the end of the text: its last name is cut
                inner = inner[:-1]
            names.extend(x for x in inner if x)
        elif part:
            names.append(part)
    return names


def rule_dla_layers(records: list[LogRecord]) -> Iterator[Hit]:
    """One hit per listing (a DLA list and the GPU list after it). Terminal-wrapped list lines that lost their
    prefix (unknown records on the next physical lines) are joined without a separator. Only listings that place
    a layer on DLA count: TensorRT 8.4+ prints an empty DLA list and the whole network as GPU layers in every build."""
    cur: dict[str, Any] | None = None
    dev: str | None = None
    buf: list[str] = []
    last_line = 0

    def flush() -> None:
        nonlocal buf
        if cur is not None and dev is not None and buf:
            cur[dev].extend(_split_top("".join(buf)))
        buf = []

    def emit() -> Iterator[Hit]:
        if cur is not None and cur["dla"]:
            d = {"dla": cur["dla"], "gpu": cur["gpu"]}
            msg = f"{count(len(cur['dla']), 'layer')} on DLA, {len(cur['gpu'])} on GPU"
            yield Hit("dla_layers", "fallback", "info", msg, cur["line"], tuple(cur["gpu"]), d)

    for r in records:
        text = r.text.split("\n", 1)[0].strip()
        head = _LISTING_HEAD.match(text)
        if head:
            flush()
            d_new = head.group("dev").lower()
            if cur is None or d_new == "dla" or cur[d_new]:
                yield from emit()
                cur = {"line": r.first, "dla": [], "gpu": []}
            dev, last_line = d_new, r.last
            if head.group("rest"):
                buf.append(head.group("rest"))
            continue
        if cur is None or dev is None:
            continue
        item = _LISTING_ITEM.match(text)
        if item:
            flush()
            cur[item.group("dev").lower()].append(item.group("name").strip())
            last_line = r.last
        elif r.dialect == "unknown" and r.first == last_line + 1 and buf:
            buf.append(r.text.replace("\n", ""))  # a wrapped piece of the list line
            last_line = r.last
        elif r.dialect not in ("unknown", "blank", "elision") and not buf and _looks_like_list(text):
            buf.append(text)  # TensorRT 7: the list is the record after the header
            last_line = r.last
        else:
            flush()
            dev = None
    flush()
    yield from emit()


def _looks_like_list(text: str) -> bool:
    return bool(text) and (text.startswith("{") or ("," in text and ": " not in text) or " " not in text)


# --- plugin_not_found ------------------------------------------------------------------------

_PLUGIN_MISSING = [
    re.compile(
        r"getPluginCreator could not find plugin:?\s+(?P<plugin>[^\s,]+)"
        r"(?:,?\s+version:?\s*(?P<version>[^\s,)]+))?(?:,?\s+(?:plugin_)?namespace:?\s*(?P<namespace>[^\s,)]*))?"
    ),
    re.compile(
        r"Cannot find plugin:?\s+(?P<plugin>[^\s,]+?),?\s+version:?\s*(?P<version>[^\s,)]+?),?"
        r"(?:\s+namespace:?\s*(?P<namespace>[^\s,)]*))?"
    ),
    re.compile(r"Could not find plugin creator(?: for (?:plugin )?(?P<plugin>[^\s,]+))?", re.I),
    re.compile(
        r"Could not register plugin creator\s*-?\s*(?P<namespace>[^\s:]*)::(?P<plugin>[^\s,]+)"
        r"(?: version:? (?P<version>\S+))?"
    ),
    re.compile(r"Plugin not found, are the plugin name, version,? and namespace correct"),
    re.compile(r"IPluginCreator not found in Plugin Registry"),
    re.compile(r"Failed to create plugin\b(?::? (?P<plugin>[A-Za-z_][\w.]*))?"),
]
_PLUGIN_CONTEXT = [
    re.compile(
        r"Searching for plugin: (?P<plugin>[^\s,]+), plugin_version: (?P<version>[^\s,]*), "
        r"plugin_namespace: ?(?P<namespace>\S*)"
    ),
    re.compile(r"While parsing node number \d+ \[(?P<plugin>[\w.:-]+) ->"),
    re.compile(r"No importer registered for op: (?P<plugin>[\w.:-]+)"),
]


_NODE_NAME = re.compile(r'^(?:.*?: )?name: "(?P<node>[^"]+)"\s*$')


def _clean(v: str | None) -> str | None:
    return v.rstrip(".") if v else v


def rule_plugin_not_found(records: list[LogRecord]) -> Iterator[Hit]:
    """A plugin (or its creator) the registry does not hold. Messages that do not name the plugin (the ONNX
    parser's `Plugin not found, are the plugin name, version, and namespace correct?` assertion, deserialisation's
    `IPluginCreator not found`) take it from the nearest `Searching for plugin` / `While parsing node ... [Op ->`
    line before them."""
    ctx: dict[str, Any] = {}
    in_node = False  # inside the ONNX parser's dump of the node it failed on (`--- Begin node ---` ... `name: "X"`)
    dump: list[int] = []  # the dump's lines, read with the finding that names its node
    for r in records:
        text = r.text
        if "Successfully created plugin" in text:
            ctx = {}
            continue
        for i, part in enumerate(text.split("\n")):
            if "--- Begin node ---" in part:
                ctx.pop("node", None)
                dump = []
            in_node = (in_node or "--- Begin node ---" in part) and "--- End node ---" not in part
            if in_node:
                dump.append(min(r.first + i, r.last))
            if in_node and (m := _NODE_NAME.search(part)):
                ctx.setdefault("node", m["node"])  # the node's own name comes before its attributes' names
        for rx in _PLUGIN_CONTEXT:
            m = rx.search(text)
            if m:
                ctx = {k: _clean(v) for k, v in m.groupdict().items()}
        for rx in _PLUGIN_MISSING:
            m = rx.search(text)
            if not m:
                continue
            got = {k: _clean(v) for k, v in m.groupdict().items() if v}
            if "plugin" in got and got["plugin"] != ctx.get("plugin"):
                ctx = got
            info = {**ctx, **got}
            detail = {k: info[k] for k in ("plugin", "version", "namespace", "node") if info.get(k) is not None}
            layers = tuple(info[k] for k in ("plugin", "node") if info.get(k))
            read = tuple(dump) if "node" in detail else ()
            yield Hit("plugin_not_found", "fallback", "high", _msg(r), r.first, layers, detail, read=read)
            break


# --- strongly typed networks and weak-typing deprecation ----------------------------------------

_STRONG = re.compile(r"strongly[ _-]?typed|kSTRONGLY_TYPED|isStronglyTyped|STRONGLY_TYPED", re.I)
_STRONG_MISUSE = re.compile(
    r"API Usage Error|Parameter check failed|not (?:allowed|permitted|supported)|cannot|can't|invalid|"
    r"must not|incompatible|conflict|ignored|disallowed|error",
    re.I,
)
# TensorRT-RTX builds strongly typed networks only: precision flags fail a parameter check.
_RTX_FLAG = re.compile(r"condition: !\s*config\.getFlag\(BuilderFlag::k(?:FP16|BF16|INT8|FP8|INT4|FP4)\)")


def rule_strongly_typed_usage(records: list[LogRecord]) -> Iterator[Hit]:
    for r in records:
        text = r.text
        strong = (
            _STRONG.search(text)
            and _STRONG_MISUSE.search(text)
            and r.severity in ("error", "internal_error", "warning", None)
        )
        if strong or _RTX_FLAG.search(text):
            m = re.search(r"BuilderFlag::k(\w+)", text)
            detail = {"flag": m.group(1)} if m else {}
            yield Hit("strongly_typed_usage", "build", "high", _msg(r), r.first, (), detail)


_WEAK = re.compile(
    r"weak(?:ly)?[ _-]?typ|--(?:fp16|int8|bf16|fp8|int4|best)\b|\bk(?:FP16|INT8|BF16|FP8|INT4)\b|"
    r"BuilderFlag\.(?:FP16|INT8|BF16|FP8)|\bIInt8\w*Calibrator|int8_calibrator|\bcalibrat|"
    r"precision constraints?|setPrecision|setOutputType|implicit quantization",
    re.I,
)
_DEPRECATED = re.compile(r"deprecat", re.I)


def rule_weak_typing_deprecated(records: list[LogRecord]) -> Iterator[Hit]:
    for r in records:
        if _DEPRECATED.search(r.text) and _WEAK.search(r.text):
            yield Hit("weak_typing_deprecated", "build", "info", _msg(r), r.first)


# --- build_time ------------------------------------------------------------------------------

_NUM = r"(?P<n>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)"
_BUILD_TIME = [
    (re.compile(r"Engine built in " + _NUM + r"\s*s(?:ec)?"), 1.0),
    (re.compile(r"Engine generation completed in " + _NUM + r"\s*s(?:ec|econds)?"), 1.0),
    (re.compile(r"Finished engine building in " + _NUM + r"\s*s(?:ec|econds)?"), 1.0),
    (re.compile(r"(?:Engine )?[Bb]uild(?:ing)? (?:the )?(?:TRT |TensorRT )?engine took " + _NUM + r"\s*s"), 1.0),
    (re.compile(r"^Total Time(?: to build)?:\s*" + _NUM + r"\s*ms\s*$"), 1e-3),
]
_ELAPSED = re.compile(r"Build TRT engine elapsed time:\s*(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+(?:\.\d+)?)")


_TACTIC_TIME = re.compile(r"Formats and tactics? selection completed in " + _NUM + r"\s*(?:seconds|secs|s)\b", re.I)


def rule_tactic_selection_time(records: list[LogRecord]) -> Iterator[Hit]:
    """Where a build spent its time: TensorRT's `Formats and tactics selection completed in N seconds.`, beside the
    build's total (`build_time`)."""
    for r in records:
        m = _TACTIC_TIME.search(r.text.split("\n", 1)[0])
        if m:
            yield Hit("tactic_selection_time", "performance", "info", _msg(r), r.first, (), {"seconds": float(m["n"])})


def rule_build_time(records: list[LogRecord]) -> Iterator[Hit]:
    for r in records:
        text = r.text.split("\n", 1)[0].strip()
        seconds: float | None = None
        m = _ELAPSED.search(text)
        if m:
            seconds = int(m.group("h") or 0) * 3600 + int(m.group("m")) * 60 + float(m.group("s"))
        else:
            for rx, scale in _BUILD_TIME:
                m = rx.search(text)
                if m:
                    seconds = float(m.group("n")) * scale
                    break
        if seconds is not None:
            yield Hit("build_time", "performance", "info", _msg(r), r.first, (), {"seconds": seconds})


# --- calibration_cache_contents --------------------------------------------------------------

_CACHE_HEAD = re.compile(r"^TRT-(?P<n>\d{4,6})-(?P<cal>\w*Calibrat\w*)$")
_CACHE_ENTRY = re.compile(r"^(?P<name>\S(?:[^:]|:(?! ))*?): (?P<hex>[0-9a-fA-F]{1,8})$")
_SCALE_HEX = re.compile(r"^[34][0-9a-fA-F]{7}$")  # a positive float32 between about 1e-7 and 1e3


def _version(n: str) -> str:
    if len(n) == 4:
        return f"{n[0]}.{n[1]}.{int(n[2:])}"
    return f"{int(n[:-4])}.{int(n[-4:-2])}.{int(n[-2:])}"


def _scale(hexs: str) -> float:
    return float(struct.unpack(">f", bytes.fromhex(hexs.zfill(8)))[0])


def rule_calibration_cache_contents(records: list[LogRecord]) -> Iterator[Hit]:
    """A calibration cache pasted into the log: the `TRT-<version>-<Calibrator>` header and `tensor: <hex float32>`
    lines, or (header lost) a run of at least three such lines with eight hex digits each."""
    i = 0
    while i < len(records):
        r = records[i]
        head = _CACHE_HEAD.match(r.text.strip()) if r.dialect == "unknown" else None
        j = i + 1 if head else i
        entries: list[tuple[str, str]] = []
        while j < len(records) and records[j].dialect == "unknown":
            m = _CACHE_ENTRY.match(records[j].text.strip())
            if not m or (not head and not _SCALE_HEX.match(m.group("hex"))):
                break
            entries.append((m.group("name"), m.group("hex")))
            j += 1
        if head or (len(entries) >= 3 and any(re.search("[a-fA-F]", h) for _, h in entries)):
            d: dict[str, Any] = {
                "header": head.group(0) if head else None,
                "version": _version(head.group("n")) if head else None,
                "calibrator": head.group("cal") if head else None,
                "tensors": len(entries),
            }
            msg = f"calibration cache with {len(entries)} tensor scales" + (f" ({head.group(0)})" if head else "")
            extremes: tuple[str, ...] = ()
            if entries:
                d["first"] = [entries[0][0], _scale(entries[0][1])]
                # the tensors with the extreme scales: a huge scale (a wide range, coarse INT8 steps) or a tiny one
                # (a range calibration barely saw) is where INT8 loses accuracy first
                scaled = sorted(((_scale(h), n) for n, h in entries if _SCALE_HEX.match(h.zfill(8))), reverse=True)
                if scaled:
                    d["largest"] = [[n, v] for v, n in scaled[:3]]
                    d["smallest"] = [[n, v] for v, n in scaled[::-1][:3]]
                    (top, top_name), (low, low_name) = scaled[0], scaled[-1]
                    msg += f"; largest {top:.4g} ({top_name}), smallest {low:.4g} ({low_name})"
                    extremes = tuple(dict.fromkeys([top_name, low_name]))
            span = (r.first, records[j - 1].last if j > i else r.last)
            yield Hit("calibration_cache_contents", "calibration", "info", msg, r.first, extremes, d, span=span)
            i = max(j, i + 1)
        else:
            i += 1


# --- TF-TRT native segments ------------------------------------------------------------------

_TFTRT = [
    re.compile(r"Engine creation for (?P<seg>\S+) failed\. The native segment will be used instead"),
    re.compile(r"(?:retrying with|Running|Executing|[Ff]alling back to) native segment for (?P<seg>\S+)"),
    re.compile(r"Engine retrieval for input shapes: .* failed\. Running native segment(?: for (?P<seg>\S+))?"),
    re.compile(r"TensorRT node (?P<seg>\S+) added for segment \d+ consisting of \d+ nodes failed"),
    re.compile(r"[Ff]all(?:ing)?(?: |-)?back to (?:TF|TensorFlow)(?: function| native| segment)?"),
    re.compile(r"Not a TF-TRT candidate, \(Op type: (?P<seg>[^)]+)\)"),
    re.compile(r"Number of TensorRT candidate segments: (?P<segments>\d+)"),
    re.compile(r"Cannot replace segment \d+ consisting of \d+ nodes by (?P<seg>\S+) reason"),
    re.compile(r"Total nonconverted OPs: (?P<ops2>\d+)"),  # the conversion report: those ops stay in TensorFlow
    re.compile(
        r"There are (?P<ops>\d+) ops of (?P<types>\d+) different types in the graph that are not converted to "
        r"TensorRT:\s*(?P<list>[^(]*)"
    ),
]


def rule_tftrt_native_segment(records: list[LogRecord]) -> Iterator[Hit]:
    """Segments (and ops) TF-TRT left to TensorFlow. The counts a log prints (candidate segments, ops not converted)
    are facts about the whole conversion, so every hit carries them."""
    hits: list[tuple[LogRecord, tuple[str, ...]]] = []
    summary: dict[str, Any] = {}
    for r in records:
        text = r.text
        for rx in _TFTRT:
            m = rx.search(text)
            if not m:
                continue
            g = m.groupdict()
            layers: tuple[str, ...] = ()
            if g.get("seg"):
                layers = (g["seg"].rstrip(".,"),)
            if g.get("segments"):
                summary.setdefault("segments", int(g["segments"]))
            if g.get("ops2"):
                summary.setdefault("ops_not_converted", int(g["ops2"]))
            if g.get("ops"):
                summary.setdefault("ops_not_converted", int(g["ops"]))
                layers = tuple(x.strip() for x in g["list"].split(",") if x.strip())
            hits.append((r, layers))
            break
    for r, layers in hits:
        yield Hit("tftrt_native_segment", "fallback", "medium", _msg(r), r.first, layers, dict(summary))


# --- ONNX Runtime TensorRT EP ----------------------------------------------------------------

_ORT_EP = [
    re.compile(r"No graph will run on TensorRT execution provider"),
    re.compile(r"number of subgraphs running on TensorRT execution provider is (?P<subgraphs>\d+)", re.I),
    re.compile(r"number of (?:nodes|partitions)[^:]*?supported by TensorRT[^:\d]*:?\s*(?P<nodes>\d+)", re.I),
    re.compile(r"TensorRT EP.*\bsubgraph\b.*not supported", re.I),
    re.compile(r"(?P<op>[\w./:-]+) is not supported by TensorRT"),
]
# a TensorRT parser message inside an ONNX Runtime line: the TensorRT EP leaves that node to another provider
# (a missing plugin is plugin_not_found's, not reported twice)
_ORT_PARSER = re.compile(r"No importer registered for op: (?P<op2>[\w.-]+)|UNSUPPORTED_NODE")


def rule_ort_trt_ep_unsupported(records: list[LogRecord]) -> Iterator[Hit]:
    for r in records:
        m = None
        for rx in _ORT_EP:
            m = rx.search(r.text)
            if m:
                break
        if m is None and r.dialect == "onnxruntime":
            m = _ORT_PARSER.search(r.text)
        if m is None:
            continue
        g = m.groupdict()
        op = g.get("op") or g.get("op2")
        detail: dict[str, Any] = {}
        if g.get("nodes"):
            detail["nodes"] = int(g["nodes"])
        if g.get("subgraphs"):
            detail["subgraphs"] = int(g["subgraphs"])
        yield Hit("ort_trt_ep_unsupported", "fallback", "medium", _msg(r), r.first, (op,) if op else (), detail)


RULES: tuple[Rule, ...] = (
    rule_dla_layers,
    rule_plugin_not_found,
    rule_strongly_typed_usage,
    rule_weak_typing_deprecated,
    rule_build_time,
    rule_tactic_selection_time,
    rule_calibration_cache_contents,
    rule_tftrt_native_segment,
    rule_ort_trt_ep_unsupported,
)
