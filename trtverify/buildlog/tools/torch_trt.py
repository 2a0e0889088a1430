"""Torch-TensorRT's console: the dynamo front end (`torch_tensorrt.compile(ir="dynamo")`, `torch.compile(backend=
"tensorrt")`) and the TorchScript one (`ERROR: [Torch-TensorRT] - `, formerly TRTorch).

Formats, from pytorch/TensorRT's sources: the partitioners' debug blocks (`Number of TensorRT-Accelerated Engines
Generated: N`, `Supported Nodes:` / `Unsupported or Excluded Nodes:` then `- torch.ops.aten.x.default + Operator
Count: N`, dynamo/partitioning/_adjacency_partitioner.py, _global_partitioner.py); `Detected support for N operators
out of M in subgraph.` and `Converting submodule: _run_on_acc_0` / `Submodule in PyTorch: _run_on_gpu_1`
(dynamo/_compiler.py); the dry-run report (dynamo/_DryRunTracker.py: `The graph consists of N Total Operators, of
which M operators are supported, x% coverage`, `The following ops are currently unsupported or excluded from
conversion ...:` with `op: n` lines, `The following nodes are currently set to run in Torch:` with `Node: op, with
layer location: loc`, `TRT Engine #1 - Submodule name: _run_on_acc_0`, `Number of Operators in Engine: N`); the
interpreter (conversion/_TRTInterpreter.py: `Converting node x (kind: aten.mul.Tensor, args: ...)`, `Converted node
/mul [aten.mul.Tensor] (Inputs: ... | Outputs: ...)`, `TRT INetwork construction elapsed time: 0:00:00.006279`,
`Build TRT engine elapsed time: 0:00:00.821156`, `TRT Engine uses: 72812 bytes of Memory`); converters' `_to_copy
converter rejected node _to_copy_6 with dtype torch.int64`; TorchScript's `Unsupported operators listed below:` with
` - aten::op(...) -> (...)` lines and `Unsupported operator: aten::op`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trtverify.buildlog.findings import Hit
from trtverify.buildlog.lines import LogRecord
from trtverify.buildlog.tools.common import hms_seconds, lines_of

_ENGINES = re.compile(r"^Number of TensorRT-Accelerated Engines Generated: (?P<n>\d+)")
_SECTION = re.compile(r"^(?P<s>Supported Nodes|Unsupported or Excluded Nodes|All Nodes Supported)\b:?")
_OP_COUNT = re.compile(r"^- (?P<op>\S+) \+ Operator Count: (?P<n>\d+)$")
_DETECTED = re.compile(r"^Detected support for (?P<s>\d+) operators out of (?P<t>\d+) in subgraph")
_COVERAGE = re.compile(
    r"^The graph consists of (?P<t>\d+) Total Operators, of which (?P<s>\d+) operators are supported, "
    r"(?P<c>[\d.]+)% coverage"
)
_DRY_UNSUPPORTED = re.compile(r"^The following ops are currently unsupported or excluded from conversion")
_DRY_TORCH = re.compile(r"^The following nodes are currently set to run in Torch")
_DRY_OP = re.compile(r"^(?P<op>(?:torch\.ops\.|_operator\.|torch\.)?[\w.:]+): (?P<n>\d+)$")
_DRY_NODE = re.compile(r"^Node: (?P<op>[^,]+), with layer location: (?P<loc>\S*)")
_DRY_ENGINES = re.compile(r"^(?P<n>\d+) TRT Engine\(s\) were generated")
_DRY_ENGINE = re.compile(r"^TRT Engine #(?P<i>\d+) - Submodule name: (?P<name>\S+)")
_DRY_OPS_IN = re.compile(r"^Number of Operators in Engine: (?P<n>\d+)")
_DRY_IO = re.compile(r"^Engine (?P<io>Inputs|Outputs): (?P<v>.+)$")
_SETTINGS = re.compile(r"^(?:Compilation Settings|Compiled with): CompilationSettings\((?P<s>.*)")
_SUBMODULE = re.compile(r"^Converting submodule: (?P<name>\S+)")
_IN_TORCH = re.compile(r"^Submodule in PyTorch: (?P<name>\S+)")
_REJECTED = re.compile(r"^(?P<conv>\S+) converter rejected node (?P<node>\S+?)(?: (?:with|because) (?P<why>.+))?$")
_TS_HEAD = re.compile(r"(?:Method requested cannot be compiled by|Unsupported operators listed below)")
_TS_OP = re.compile(r"^-\s+(?P<op>(?:aten|prim|trt|torchvision)::[\w.]+)")
_TS_ONE = re.compile(r"^Unsupported operator: (?P<op>\S+)")
# the dynamo / FX backends giving a whole subgraph back to PyTorch (dynamo/backend/backends.py, fx lowering)
_GIVEN_BACK = re.compile(
    r"(?P<what>TRT|FX2TRT) conversion failed on the subgraph\. See trace above\. Returning GraphModule forward instead"
    r"|Conversion of module (?P<module>.{0,200}?) not currently fully supported or convertible"
    r"|(?P<halt>Halting compilation on build failure since pass_through_build_failures)"
)
# TorchScript partitioning (core/partitioning): `Segment Block @0:`, then an indented `Target: TensorRT` or `Torch`
_SEGMENT = re.compile(r"^Segment Block @(?P<n>\d+):?$")
_TARGET = re.compile(r"^Target: (?P<t>TensorRT|Torch)\b")
_NET_TIME = re.compile(r"^TRT INetwork construction elapsed time: (?P<t>\S+)")
_BUILD_TIME = re.compile(r"^Build TRT engine elapsed time: (?P<t>\S+)")
_ENGINE_MEM = re.compile(r"^TRT Engine uses: (?P<n>\d+) bytes of Memory")
_CONVERTING = re.compile(r"^Converting node (?P<node>\S+) \(kind: (?P<kind>[^,)]+)")
_CONVERTED = re.compile(r"^Converted node (?P<node>\S+) \[(?P<kind>[^\]]+)\]")
_INTERP = re.compile(
    r"^(?:Adding input to in-progress INetwork|Marking output|Converting node|Converted node|Ran node)"
)
_METADATA = re.compile(r"^Updated metadata for node: (?P<name>\S+)")
_SETTING_KEYS = ("enabled_precisions", "precision", "min_block_size", "torch_executed_ops", "use_fast_partitioner",
                 "truncate_double", "truncate_long_and_double", "optimization_level")  # fmt: skip


def _items(records: list[LogRecord]) -> Iterator[tuple[int, str, LogRecord]]:
    for r in records:
        if r.dialect in ("blank", "elision"):
            continue
        for line, text in lines_of(r):
            if text:
                yield line, text, r


def _settings(text: str) -> dict[str, str]:
    out = {}
    for key in _SETTING_KEYS:
        m = re.search(r"\b" + key + r"=(?P<v>\{[^}]*\}|set\(\)|[^,)]+)", text)
        if m:
            out[key] = m["v"]
    return out


def rule_torch_tensorrt(records: list[LogRecord]) -> Iterator[Hit]:
    """`torchtrt_partition` (how the graph was split: engines, operators supported, coverage, settings),
    `torchtrt_fallback` (the ops left to PyTorch and why: unsupported or excluded ops with counts, nodes set to run in
    Torch with their location, converters that rejected a node, TorchScript's unsupported operators),
    `torchtrt_engine` (one per TensorRT subgraph: its build time, network construction time, memory, operators) and
    `torchtrt_conversion` (the interpreter's per-node lines, grouped per subgraph)."""
    part: dict[str, Any] = {}
    part_lines: list[int] = []
    fb: dict[str, Any] = {"ops": {}}
    fb_lines: list[int] = []
    engines: dict[str, dict[str, Any]] = {}
    eng_lines: dict[str, list[int]] = {}
    conv: dict[str, dict[str, Any]] = {}
    conv_lines: dict[str, list[int]] = {}
    section: str | None = None
    current = "(unnamed subgraph)"
    for line, text, r in _items(records):
        if not text:
            continue
        if m := _ENGINES.match(text):
            part["engines"] = int(m["n"])
            part_lines.append(line)
        elif m := _DRY_ENGINES.match(text):
            part["engines"] = int(m["n"])
            part_lines.append(line)
        elif m := _SECTION.match(text):
            section = {"S": "supported", "U": "unsupported", "A": None}[m["s"][0]]
            (fb_lines if section == "unsupported" else part_lines).append(line)
        elif (m := _OP_COUNT.match(text)) and section:
            if section == "supported":
                part.setdefault("supported", {})[m["op"]] = int(m["n"])
                part_lines.append(line)
            else:
                fb["ops"][m["op"]] = int(m["n"])
                fb_lines.append(line)
        elif m := _DETECTED.match(text):
            part.update(supported_ops=int(m["s"]), total_ops=int(m["t"]))
            part_lines.append(line)
        elif m := _COVERAGE.match(text):
            part.update(supported_ops=int(m["s"]), total_ops=int(m["t"]), coverage_pct=float(m["c"]))
            part_lines.append(line)
        elif _DRY_UNSUPPORTED.match(text):
            section = "dry_unsupported"
            fb_lines.append(line)
        elif _DRY_TORCH.match(text):
            section = "dry_torch"
            fb_lines.append(line)
        elif section == "dry_unsupported" and (m := _DRY_OP.match(text)):
            fb["ops"][m["op"]] = int(m["n"])
            fb_lines.append(line)
        elif section == "dry_torch" and (m := _DRY_NODE.match(text)):
            fb.setdefault("nodes", []).append({"op": m["op"].strip(), "location": m["loc"]})
            fb_lines.append(line)
        elif section == "dry_torch" and text.startswith("Note: Some of the above nodes"):
            fb_lines.append(line)
        elif m := _SETTINGS.match(text):
            part["settings"] = _settings(m["s"])
            part_lines.append(line)
        elif m := _REJECTED.match(text):
            fb.setdefault("rejected", []).append({"converter": m["conv"], "node": m["node"], "reason": m["why"]})
            fb_lines.append(line)
        elif m := _SEGMENT.match(text):
            section = f"segment:{m['n']}"
            part_lines.append(line)
        elif section and section.startswith("segment:") and (m := _TARGET.match(text)):
            seg = part.setdefault("segments", {})
            seg[m["t"]] = seg.get(m["t"], 0) + 1
            if m["t"] == "Torch":
                fb.setdefault("torch_segments", []).append(int(section.split(":")[1]))
                fb_lines.append(line)
            else:
                part_lines.append(line)
            section = None
        elif m := _GIVEN_BACK.search(text):
            if m["halt"]:
                fb["halted"] = True
            elif m["module"] is not None:
                fb.setdefault("unsupported_modules", []).append(m["module"].strip()[:120])
            else:
                fb["subgraphs_given_back"] = fb.get("subgraphs_given_back", 0) + 1
            fb_lines.append(line)
        elif m := _IN_TORCH.match(text):
            fb.setdefault("submodules_in_torch", []).append(m["name"])
            fb_lines.append(line)
        elif _TS_HEAD.search(text):
            section = "ts"
            fb_lines.append(line)
        elif (section == "ts" and (m := _TS_OP.match(text))) or (m := _TS_ONE.match(text)):
            fb["ops"][m["op"]] = fb["ops"].get(m["op"], 0) + 1
            fb_lines.append(line)
        elif m := _METADATA.match(text):
            engines.setdefault(m["name"], {"submodule": m["name"]})
            eng_lines.setdefault(m["name"], []).append(line)
        elif (m := _SUBMODULE.match(text)) or (m := _DRY_ENGINE.match(text)):
            current = m["name"]
            engines.setdefault(current, {"submodule": current})
            eng_lines.setdefault(current, []).append(line)
        elif m := _DRY_OPS_IN.match(text):
            engines.setdefault(current, {"submodule": current})["operators"] = int(m["n"])
            eng_lines.setdefault(current, []).append(line)
        elif m := _DRY_IO.match(text):
            engines.setdefault(current, {"submodule": current})[m["io"].lower()] = m["v"]
            eng_lines.setdefault(current, []).append(line)
        elif m := _NET_TIME.match(text):
            engines.setdefault(current, {"submodule": current})["network_s"] = hms_seconds(m["t"])
            eng_lines.setdefault(current, []).append(line)
        elif m := _BUILD_TIME.match(text):
            engines.setdefault(current, {"submodule": current})["build_s"] = hms_seconds(m["t"])
            eng_lines.setdefault(current, []).append(line)
        elif m := _ENGINE_MEM.match(text):
            engines.setdefault(current, {"submodule": current})["memory_bytes"] = int(m["n"])
            eng_lines.setdefault(current, []).append(line)
        elif _INTERP.match(text) and r.dialect in ("torch_tensorrt", "unknown"):
            c = conv.setdefault(current, {"submodule": current, "nodes": 0, "ops": {}})
            if m := _CONVERTED.match(text):
                c["nodes"] += 1
                c["ops"][m["kind"]] = c["ops"].get(m["kind"], 0) + 1
            elif text.startswith("Ran node"):  # Torch-TensorRT 2.0-2.2's per-node line, without the op's kind
                c["nodes"] += 1
            conv_lines.setdefault(current, []).append(line)
        elif not text.startswith("-"):
            section = None  # a block ends at the first line of another shape
    if part_lines:
        msg = "Torch-TensorRT partition"
        if "engines" in part:
            msg += f": {part['engines']} TensorRT engine(s)"
        if "total_ops" in part:
            msg += f"; {part['supported_ops']} of {part['total_ops']} operators supported"
            msg += f" ({part['coverage_pct']:g}%)" if "coverage_pct" in part else ""
        elif part.get("supported"):
            msg += f"; {len(part['supported'])} supported op kinds"
        if part.get("segments"):
            msg += "; segments: " + ", ".join(f"{n} {t}" for t, n in part["segments"].items())
        yield Hit("torchtrt_partition", "fallback", "info", msg, part_lines[0], (), part, read=tuple(part_lines))
    if fb_lines and (fb["ops"] or len(fb) > 1):
        ops = fb["ops"]
        named = [f"{op} x{n}" for op, n in list(ops.items())[:6]]
        named += [f"{x['node']} rejected by the {x['converter']} converter" + (f" ({x['reason']})" if x["reason"]
                  else "") for x in fb.get("rejected", [])[:3]]  # fmt: skip
        named += [f"submodule {s} runs in PyTorch" for s in fb.get("submodules_in_torch", [])]
        if fb.get("torch_segments"):
            named.append(
                f"{len(fb['torch_segments'])} segment(s) run in Torch (@{', @'.join(map(str, fb['torch_segments']))})"
            )
        if fb.get("subgraphs_given_back"):
            named.insert(0, f"{fb['subgraphs_given_back']} subgraph(s) failed to convert and run in PyTorch whole")
        if fb.get("unsupported_modules"):
            named.insert(0, f"{len(fb['unsupported_modules'])} module(s) not convertible")
        if fb.get("halted"):
            named.insert(0, "compilation halted on the build failure (pass_through_build_failures)")
        msg = "left to PyTorch: " + "; ".join(named)
        layers = tuple(dict.fromkeys([*ops, *(x["node"] for x in fb.get("rejected", []))]))
        sev = "high" if {"subgraphs_given_back", "unsupported_modules", "halted"} & set(fb) else "medium"
        yield Hit("torchtrt_fallback", "fallback", sev, msg, fb_lines[0], layers, fb, read=tuple(fb_lines))
    for name, e in engines.items():
        parts = [f"built in {e['build_s']:g} s" if e.get("build_s") is not None else ""]
        parts += [f"{e['operators']} operators" if "operators" in e else ""]
        parts += [f"{e['memory_bytes']} bytes of memory" if "memory_bytes" in e else ""]
        if len(e) == 1 and name in conv:
            continue  # only named, and its conversion lines are torchtrt_conversion's
        said = ", ".join(p for p in parts if p) or "its build time is not in the log"
        msg = f"TensorRT engine for {name}: {said}"
        ls = eng_lines[name]
        yield Hit("torchtrt_engine", "build", "info", msg, ls[0], (name,), e, key=f"torchtrt_engine:{name}",
                  read=tuple(ls))  # fmt: skip
    for name, c in conv.items():
        ls = sorted(set(conv_lines[name]) | set(eng_lines.get(name, [])[:1]))
        kinds = f" ({len(c['ops'])} op kinds)" if c["ops"] else ""
        msg = f"{name}: {c['nodes']} node(s) converted to TensorRT{kinds}"
        yield Hit("torchtrt_conversion", "build", "info", msg, ls[0], (name,), c, key=f"torchtrt_conversion:{name}",
                  read=tuple(ls))  # fmt: skip


RULES = (rule_torch_tensorrt,)
KINDS = {
    "torchtrt_partition": ("fallback", "torchtrt_partition"),  # info: engines, ops supported, coverage, settings
    "torchtrt_fallback": ("fallback", "torchtrt_fallback"),  # medium: ops left to PyTorch, with counts and why
    "torchtrt_engine": ("build", "torchtrt_engine"),  # info: per TRT subgraph: build s, network s, memory, ops
    "torchtrt_conversion": ("build", "torchtrt_engine"),  # info: the interpreter's node lines, per subgraph
}
