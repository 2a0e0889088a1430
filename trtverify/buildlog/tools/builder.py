"""Verbose builder lines a reader needs, and TensorRT-RTX's console.

Builder formats (TensorRT 7-10 verbose logs): fusions `ConvReluFusion: Fusing conv1 with relu1`, `Fusing conv1 with
relu1`, `Running: ConstShuffleFusion on ...`; Myelin failures `[myelin] Error: ...`, `MyelinCheckException ...:
myelin failed ... tensor X` / `myelinGraphFinalize ... failed`; optimisation-profile violations
`IExecutionContext::setInputShape: Error Code 3: API Usage Error (Parameter check failed, condition: engineDims.d[i]
== dims.d[i]. Static dimension mismatch while setting input shape for x. Set dimensions are [1,3,640,640]. Expected
dimensions are [1,3,320,320].)`, `... setBindingDimensions: ... out of bounds of profile ...`, `Supplied binding
dimension [1,3] for bindings[0] exceed min ~ max range at index 1, maximum dimension in profile is 2, minimum dimension
in profile is 1, but supplied dimension is 3.` and `The input dimensions ... out of range of the profile`.
TensorRT-RTX (the `tensorrt_rtx` CLI, trtexec's sibling, docs.nvidia.com/deeplearning/tensorrt-rtx quick start):
`&&&& RUNNING TensorRT-RTX.tensorrt_rtx [TensorRT-RTX v1200] [b34] # tensorrt_rtx --onnx=m.onnx --saveEngine=e.trt`,
`TensorRT-RTX version: 1.2.0`, `Runtime cache written to resnet.cache`, `Loading runtime cache from X`, `Deserializing
runtime cache`, `Using existing runtime cache`, JIT compilation lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trtverify.buildlog.findings import Hit
from trtverify.buildlog.lines import LogRecord
from trtverify.buildlog.tools.common import first_line

_FUSION = re.compile(r"^(?:(?P<pass>\w+Fusion\w*|\w+Fuse\w*): )?Fusing (?P<a>.+?) with (?P<b>.+?)\s*$")


def rule_layer_fusion(records: list[LogRecord]) -> Iterator[Hit]:
    """Which nodes the builder fused into what, one finding with every pair (and the fusion pass that did it)."""
    pairs: list[dict[str, Any]] = []
    lines: list[int] = []
    for r in records:
        m = _FUSION.match(first_line(r))
        if m and r.severity in ("verbose", "info", None):
            pairs.append({"pass": m["pass"], "fused": [m["a"], m["b"]]})
            lines.append(r.first)
    if pairs:
        shown = "; ".join(f"{p['fused'][0]} + {p['fused'][1]}" for p in pairs[:5])
        msg = f"{len(pairs)} layer fusion(s): {shown}" + (" ..." if len(pairs) > 5 else "")
        layers = tuple(dict.fromkeys(n for p in pairs for n in p["fused"]))[:50]
        yield Hit("layer_fusion", "tactics", "info", msg, lines[0], layers, {"fusions": pairs[:500]},
                  read=tuple(lines))  # fmt: skip


_MYELIN = re.compile(r"\bmyelin\b|MyelinCheckException|myelinGraph\w+|\[myelin\]|Myelin\w*Error", re.I)
_MYELIN_BAD = re.compile(r"[Ee]rror|[Ff]ail|[Aa]ssert|[Ee]xception|abort|unsupported", re.I)
_MYELIN_NAME = re.compile(
    r"(?:tensor|node|op|operation|layer)[:\s]+['\"`]?(?P<name>[\w./:\[\]-]{2,})|ForeignNode\[(?P<fn>[^\]]+)\]", re.I
)


_NAMELIKE = re.compile(r"[\d_/.:\[\]]")  # a name, not the next word of a sentence (`node can not be handled`)


def rule_myelin_failure(records: list[LogRecord]) -> Iterator[Hit]:
    """A Myelin (the fused-graph compiler) error or assertion naming a tensor, op or ForeignNode (others: the floor)."""
    for r in records:
        text = r.text.replace("\n", " ")
        if r.severity in ("verbose", "info") or not _MYELIN.search(text) or not _MYELIN_BAD.search(text):
            continue
        names = [m["name"] or m["fn"] for m in _MYELIN_NAME.finditer(text)]
        names = [n.rstrip(".,)") for n in names if n and (_NAMELIKE.search(n) or "ForeignNode" in text)]
        if not names:
            continue  # an assertion naming nothing stays the floor's log_error, with its quoted condition
        d = {"names": names[:8]}
        yield Hit("myelin_failure", "build", "high", first_line(r)[:300], r.first, tuple(names[:8]), d)


_REGION = re.compile(r"\{?ForeignNode\[(?P<body>.+?)\]\}(?:\s*\((?P<runner>Myelin\[[^\]]*\])\))?")
_TIMING = re.compile(r"^(?:-+ Timing Runner:|=+ Computing costs for)")


def rule_myelin_region(records: list[LogRecord]) -> Iterator[Hit]:
    """The Myelin regions (`{ForeignNode[first...last]}`: ONNX nodes TensorRT handed to Myelin as one layer) the log
    names, one finding each: the region's first and last node, the runner, and the errors it met (an error naming
    the region, or one inside its timing block: `Autotuner: no tactics to implement operation`)."""
    regions: dict[str, dict[str, Any]] = {}
    reads: dict[str, list[int]] = {}
    timing: str | None = None
    for r in records:
        text = r.text.replace("\n", " ")
        found = [(m["body"], m["runner"]) for m in _REGION.finditer(text)]
        for body, runner in found:
            first, _, last = body.partition("...")
            reg = regions.setdefault(body, {"region": body, "first": first.strip(), "last": last.strip() or None})
            if runner:
                reg["runner"] = runner
            reads.setdefault(body, []).append(r.first)
        if found and _TIMING.match(first_line(r)):
            timing = found[0][0]
        elif _TIMING.match(first_line(r)):
            timing = None
        bad = r.severity in ("error", "internal_error") or r.text.lstrip().startswith(("Error", "ERROR"))
        targets = [b for b, _ in found] or ([timing] if timing and bad else [])
        if bad:
            for body in targets:
                regions[body].setdefault("errors", []).append(first_line(r)[:300])
                reads[body].append(r.first)
    for body, reg in regions.items():
        ls = sorted(set(reads[body]))
        span = f"{reg['first']} ... {reg['last']}" if reg["last"] else reg["first"]
        msg = f"Myelin region {span}" + (f" ({reg['runner']})" if "runner" in reg else "")
        msg += f": {len(reg['errors'])} error(s), first: {reg['errors'][0]}" if reg.get("errors") else ""
        yield Hit("myelin_region", "build", "info", msg, ls[0], (body,), reg, key=f"myelin_region:{body}",
                  read=tuple(ls))  # fmt: skip


_PROFILE_BAD = [
    # TensorRT 10 (executionContext.cpp): `Set dimension [1,1620] for tensor input_values does not satisfy any
    # optimization profiles. Valid range for profile 0: [1,3240]..[1,12960].`
    re.compile(
        r"Set dimension \[(?P<set>[^\]]*)\] for tensor (?P<input>\S+) does not satisfy any optimization "
        r"profiles?\.?(?:\s*Valid range for profile (?P<profile>\d+): \[(?P<pmin>[^\]]*)\]\.\.\[(?P<pmax>[^\]]*)\])?"
    ),
    re.compile(
        r"(?:Static dimension mismatch while setting input shape for|setInputShape: .*? for) "
        r"(?P<input>[^\s.]+)\.? Set dimensions are \[(?P<set>[^\]]*)\]\. Expected dimensions are "
        r"\[(?P<exp>[^\]]*)\]"
    ),  # fmt: skip
    re.compile(
        r"Supplied binding dimension \[(?P<set>[^\]]*)\] for bindings\[(?P<input>\d+)\] exceed min ~ max "
        r"range at index (?P<idx>\d+), maximum dimension in profile is (?P<max>-?\d+), minimum dimension in "
        r"profile is (?P<min>-?\d+), but supplied dimension is (?P<got>-?\d+)"
    ),  # fmt: skip
    re.compile(
        r"(?:setInputShape|setBindingDimensions|setInputShapeBinding)\b.*?(?:out of (?:bounds|range)|exceeds?|"
        r"not within).*?(?:profile|bounds)(?:.*?(?:input|tensor|binding)[:\s]+'?(?P<input>[\w./:-]+))?",
        re.I,
    ),
    re.compile(
        r"(?:[Ii]nput|[Bb]inding|[Tt]ensor) '?(?P<input>[\w./:-]+)'?.*?(?:dimensions?|shape) \[?(?P<set>[\d,x ]+)"
        r"\]?.*?(?:out of (?:range|bounds) of (?:the )?(?:optimi[sz]ation )?profile|outside the profile)"
    ),
]


def rule_profile_violation(records: list[LogRecord]) -> Iterator[Hit]:
    """A shape set at runtime that the engine's optimisation profile does not cover: the input and the shape (a
    message a paste broke over unindented lines is read with up to 4 of them)."""
    for i, r in enumerate(records):
        text = r.text.replace("\n", " ")
        if re.search(r"setInputShape|setBindingDimensions|Set dimension|Supplied binding", text):
            tail = [x for x in records[i + 1 : i + 5] if x.dialect == "unknown"]
            tail = tail[: next((k for k, x in enumerate(records[i + 1 : i + 5]) if x.dialect != "unknown"), 4)]
            text = " ".join([text, *(x.text.replace("\n", " ") for x in tail)])
        else:
            tail = []
        for rx in _PROFILE_BAD:
            m = rx.search(text)
            if not m:
                continue
            d = {k: v for k, v in m.groupdict().items() if v is not None}
            inp = d.get("input")
            says = f"input {inp}" if inp else "an input"
            if "set" in d:
                says += f" set to [{d['set']}]"
            if "exp" in d:
                says += f", engine expects [{d['exp']}]"
            if "max" in d:
                says += f", profile allows {d['min']}..{d['max']} at index {d['idx']}, got {d['got']}"
            if "pmax" in d:
                says += f", profile {d['profile']} allows [{d['pmin']}]..[{d['pmax']}]"
            yield Hit("profile_violation", "build", "high", f"shape outside the optimization profile: {says}",
                      r.first, (inp,) if inp else (), d, read=tuple(x.first for x in tail))  # fmt: skip
            break


_RTX_BANNER = re.compile(
    r"^&&&& (?P<status>RUNNING|PASSED|FAILED) TensorRT-RTX\.(?P<tool>\w+) \[TensorRT-RTX v(?P<v>\d+)\]"
    r"(?: \[b(?P<b>\d+)\])?(?: # (?P<cmd>.*))?"
)
_RTX_VERSION = re.compile(r"^TensorRT-RTX [Vv]ersion:? (?P<version>[\d.]+)")
_RTX_CACHE = re.compile(
    r"^(?:(?P<w>Runtime cache written to|Saving runtime cache to|Serializ\w+ runtime cache to)|(?P<l>Loading runtime "
    r"cache from|Deserializ\w+ runtime cache(?: from)?)|(?P<u>Using existing runtime cache))\s*:?\s*(?P<path>\S*)"
)
_RTX_JIT = re.compile(r"\bJIT\b|just-in-time|[Cc]ompiling kernels|ahead-of-time|\bAOT\b")
_OPT = re.compile(r"--(?P<k>\w+)(?:=(?P<v>\S+))?")


def _number(n: str) -> str:
    return f"{int(n[:-4])}.{int(n[-4:-2])}.{int(n[-2:])}" if len(n) > 4 else f"{n[0]}.{n[1]}.{int(n[2:])}"


def rule_rtx(records: list[LogRecord]) -> Iterator[Hit]:
    """TensorRT-RTX: the run (`tensorrt_rtx` banner: version from its build number, model, engine, options, status),
    and the runtime cache and JIT / AOT lines."""
    run: dict[str, Any] = {}
    run_lines: list[int] = []
    cache: list[dict[str, str]] = []
    cache_lines: list[int] = []
    for r in records:
        text = first_line(r)
        if m := _RTX_BANNER.match(text):
            run.update(tool=m["tool"], version=_number(m["v"]), version_number=int(m["v"]), status=m["status"])
            if m["b"]:
                run["build"] = int(m["b"])
            if m["cmd"] and "options" not in run:  # the RUNNING banner's command; PASSED / FAILED repeat it
                opts = {o["k"]: o["v"] if o["v"] is not None else True for o in _OPT.finditer(m["cmd"])}
                run["options"] = opts
                for key, name in (("onnx", "model"), ("saveEngine", "engine_saved"), ("loadEngine", "engine_loaded"),
                                  ("runtimeCacheFile", "runtime_cache")):  # fmt: skip
                    if key in opts:
                        run[name] = opts[key]
            run_lines.append(r.first)
        elif m := _RTX_VERSION.match(text):
            run.setdefault("version", m["version"])
            run_lines.append(r.first)
        elif m := _RTX_CACHE.match(text):
            action = "written" if m["w"] else "loaded" if m["l"] else "reused"
            cache.append({"action": action, "path": m["path"]})
            cache_lines.append(r.first)
        elif _RTX_JIT.search(text) and r.severity in ("info", "verbose", None) and run:
            cache.append({"action": "jit", "line": text[:200]})
            cache_lines.append(r.first)
    if run:
        parts = [f"TensorRT-RTX {run.get('version', '')}".strip(), run.get("tool", "")]
        parts += [f"model {run['model']}" if "model" in run else ""]
        parts += [f"engine {run.get('engine_saved') or run.get('engine_loaded')}" if {"engine_saved",
                  "engine_loaded"} & set(run) else ""]  # fmt: skip
        parts += [run.get("status", "")]
        yield Hit("rtx_run", "build", "high" if run.get("status") == "FAILED" else "info",
                  ", ".join(p for p in parts if p), run_lines[0], (), run, read=tuple(run_lines))  # fmt: skip
    if cache:
        what = ", ".join(f"{c['action']} {c.get('path', '')}".strip() for c in cache[:4])
        yield Hit("rtx_runtime_cache", "tactics", "info", f"runtime cache: {what}", cache_lines[0], (),
                  {"events": cache}, read=tuple(cache_lines))  # fmt: skip


RULES = (rule_layer_fusion, rule_myelin_failure, rule_myelin_region, rule_profile_violation, rule_rtx)
KINDS = {
    "layer_fusion": ("tactics", "layer_fusion"),  # info: the fused pairs and the pass
    "myelin_failure": ("build", "myelin"),  # high: a Myelin error, with the tensor / op it names
    "myelin_region": ("build", "myelin"),  # info: a ForeignNode's first / last node, runner, the errors it met
    "profile_violation": ("build", "profile_violation"),  # high: input, shape set, profile bounds
    "rtx_run": ("build", "rtx"),  # info: version (from the build number), model, engine, options, status
    "rtx_runtime_cache": ("tactics", "rtx"),  # info: runtime cache written / loaded / reused, JIT lines
}
