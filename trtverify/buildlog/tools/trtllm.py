"""TensorRT-LLM builds (`trtllm-build`, the Python API's `tensorrt_llm.build`) and the memory of any TensorRT build.

Formats, from TensorRT-LLM's sources and its examples' READMEs (e.g. examples/models/core/commandr/README.md,
tensorrt_llm/commands/build.py and builder.py): `[TRT-LLM] [I] Total time of building all engines: 00:01:47`,
`Total time of building Unnamed Network 0: 00:00:52`, `Engine serialized. Total time: 00:00:25`, `Serializing engine
to trt_engines/.../rank0.engine...`, `Build phase peak memory: 176257.29 MB, children: 17.65 MB`; TensorRT's own
`[MemUsageStats] Peak memory usage of TRT CPU/GPU memory allocators: CPU 4 MiB, GPU 70725 MiB` and `Peak memory usage
during Engine building and serialization: CPU: 176260 MiB`. Memory shortfalls as TensorRT 8-10 print them:
`Requested amount of GPU memory (2833252352 bytes) could not be allocated. There may not be enough free memory ...`,
`Error Code 2: OutOfMemory (Requested size was 2833252352 bytes.)`, `Skipping tactic 28 due to insufficient memory on
requested size of 2833252352 detected for tactic 0x0000000204040736.`, `Tactic Device request: 4229MB Available:
3748MB. Device memory is insufficient to use tactic.`, `Tactic 3 scratch requested: 4434452480, available: 1073741824`;
and PyTorch's `CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 23.65 GiB total capacity; 1.50 GiB free ...)`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trtverify.buildlog.findings import Hit
from trtverify.buildlog.lines import LogRecord
from trtverify.buildlog.tools.common import first_line, hms_seconds, to_bytes

_T = r"(?P<t>(?:\d+ days?, )?\d+:\d\d:\d\d(?:\.\d+)?)"
_ALL = re.compile(r"^Total time of building all (?:\d+ )?engines:\s*" + _T)
_ONE = re.compile(r"^Total time of building (?P<net>.+?):\s*" + _T)
_SERIALIZED = re.compile(r"^Engine serialized\. Total time:\s*" + _T)
_CONVERT = re.compile(r"^Total time of converting checkpoints:\s*" + _T)
_GENERATION = re.compile(r"^Engine generation completed in (?P<s>[\d.]+) seconds")


def rule_trtllm_build_time(records: list[LogRecord]) -> Iterator[Hit]:
    """One finding per TensorRT-LLM build: the total (`all engines`), each network's build, serialization and
    checkpoint conversion, and TensorRT's engine generation time where the build printed it."""
    d: dict[str, Any] = {}
    lines: list[int] = []
    trtllm = any(r.dialect == "trtllm" for r in records)
    for r in records:
        text = first_line(r)
        if m := _ALL.match(text):
            d["total_s"] = hms_seconds(m["t"])
        elif m := _SERIALIZED.match(text):
            d["serialization_s"] = d.get("serialization_s", 0.0) + (hms_seconds(m["t"]) or 0.0)
        elif m := _CONVERT.match(text):
            d["checkpoint_conversion_s"] = hms_seconds(m["t"])
        elif m := _ONE.match(text):
            d.setdefault("networks", {})[m["net"]] = hms_seconds(m["t"])
        elif trtllm and (m := _GENERATION.match(text)):
            d["engine_generation_s"] = d.get("engine_generation_s", 0.0) + float(m["s"])
        else:
            continue
        lines.append(r.first)
    if not lines or not ({"total_s", "networks", "serialization_s", "checkpoint_conversion_s"} & set(d)):
        return
    parts = [f"all engines {d['total_s']:g} s" if "total_s" in d else ""]
    parts += [f"{n} {s:g} s" for n, s in d.get("networks", {}).items()]
    parts += [f"serialization {d['serialization_s']:g} s" if "serialization_s" in d else ""]
    parts += [f"checkpoint conversion {d['checkpoint_conversion_s']:g} s" if "checkpoint_conversion_s" in d else ""]
    message = "TensorRT-LLM build time: " + ", ".join(p for p in parts if p)
    yield Hit("trtllm_build_time", "performance", "info", message, lines[0], (), d, read=tuple(lines))


_PEAK = [
    re.compile(
        r"Peak memory usage of TRT CPU/GPU memory allocators: CPU (?P<cpu>[\d.]+) ?MiB, GPU (?P<gpu>[\d.]+) ?MiB"
    ),
    re.compile(r"Peak memory usage during Engine building and serialization: CPU: (?P<cpu_build>[\d.]+) ?MiB"),
    re.compile(r"Build phase peak memory: (?P<phase>[\d.]+) ?MB(?:, children: (?P<children>[\d.]+) ?MB)?"),
    re.compile(r"^Peak (?P<which>GPU|CPU|device|host) memory(?: usage)?(?: during [\w ]+)?:\s*(?P<any>[\d.]+) ?MiB"),
    # TensorRT-LLM's profiler (tensorrt_llm/profiler.py): `[MemUsage] Rank 0 Engine serialized - Allocated Memory: Host
    # 0.3352 (GiB) Device 3.5739 (GiB)` at each step, `Peak Memory Usage: Host X (GiB) Device Y (GiB)`
    re.compile(
        r"(?:Allocated Memory|Peak Memory Usage): Host (?P<host>[\d.]+) \((?P<host_u>[KMG]i?B)\) "
        r"Device (?P<dev>[\d.]+) \((?P<dev_u>[KMG]i?B)\)"
    ),  # fmt: skip
    # TensorRT-LLM's estimate of the engine's memory at runtime (builder.py)
    re.compile(
        r"^(?P<est>Activation memory size|Weights memory size|Max KV Cache memory size|Estimated max memory "
        r"usage on runtime): (?P<est_v>[\d.]+) ?MiB"
    ),  # fmt: skip
]
_EST_KEYS = {"Activation memory size": "runtime_activation_mib", "Weights memory size": "runtime_weights_mib",
             "Max KV Cache memory size": "runtime_kv_cache_mib",
             "Estimated max memory usage on runtime": "runtime_estimate_mib"}  # fmt: skip


def _mib(value: str, unit: str) -> float:
    return float(value) * {"KiB": 1 / 1024, "KB": 1 / 1024, "MiB": 1, "MB": 1, "GiB": 1024, "GB": 1024}.get(unit, 1)


_PEAK_KEYS = {"cpu": "allocator_cpu_mib", "gpu": "allocator_gpu_mib", "cpu_build": "build_cpu_mib",
              "phase": "build_phase_mib", "children": "children_mib"}  # fmt: skip


def rule_build_peak_memory(records: list[LogRecord]) -> Iterator[Hit]:
    """The peak CPU and GPU memory of a build: TensorRT's [MemUsageStats] (TensorRT 10), TensorRT-LLM's `Build
    phase peak memory` and its profiler's `[MemUsage]` steps (the largest), and TensorRT-LLM's estimate of the
    engine's memory at runtime (weights, activations, KV cache), all in one finding (MiB)."""
    d: dict[str, Any] = {}
    lines: list[int] = []
    for r in records:
        text = first_line(r)
        for rx in _PEAK:
            m = rx.search(text)
            if not m:
                continue
            for g, v in m.groupdict().items():
                if v is not None and g in _PEAK_KEYS:
                    d[_PEAK_KEYS[g]] = float(v)
            if m.groupdict().get("any"):
                d[f"peak_{m['which'].lower()}_mib"] = float(m["any"])
            if m.groupdict().get("host"):  # the largest the profiler saw, over its steps
                for k, v, u in (
                    ("trtllm_host_mib", m["host"], m["host_u"]),
                    ("trtllm_device_mib", m["dev"], m["dev_u"]),
                ):
                    d[k] = max(d.get(k, 0.0), round(_mib(v, u), 2))
            if m.groupdict().get("est"):
                d[_EST_KEYS[m["est"]]] = float(m["est_v"])
            lines.append(r.first)
            break
    if not lines:
        return
    gpu = max((d[k] for k in ("allocator_gpu_mib", "trtllm_device_mib") if k in d), default=None)
    cpu = max((d[k] for k in ("allocator_cpu_mib", "build_cpu_mib", "build_phase_mib", "trtllm_host_mib") if k in d),
              default=None)  # fmt: skip
    parts = [f"GPU {gpu:g} MiB" if gpu is not None else "", f"CPU {cpu:g} MiB" if cpu is not None else ""]
    parts += [f"{k.split('_')[1].upper()} {v:g} MiB" for k, v in d.items() if k.startswith("peak_")]
    if "runtime_estimate_mib" in d:
        parts.append(f"engine estimated at {d['runtime_estimate_mib']:g} MiB at runtime")
    message = "peak memory of the build: " + (", ".join(p for p in parts if p) or "stated")
    yield Hit("build_peak_memory", "performance", "info", message, lines[0], (), d, read=tuple(lines))


_SIZE = r"(?P<{0}>[\d.]+)\s*(?P<{0}_u>bytes|[KMGT]i?B)?"
_SHORT = [
    re.compile(r"Requested amount of GPU memory \(" + _SIZE.format("req") + r"\) could not be allocated"),
    re.compile(r"OutOfMemory \(Requested size was " + _SIZE.format("req") + r"\.?\)"),
    re.compile(r"Error Code \d+: OutOfMemory\b|Cuda Runtime \(out of memory\)"),
    re.compile(
        r"CUDA out of memory\. Tried to allocate "
        + _SIZE.format("req")
        + r"(?:.*?(?P<avail>[\d.]+) (?P<avail_u>[KMGT]i?B) free)?"
    ),  # fmt: skip
    re.compile(
        r"\b(?:out of (?:GPU |device )?memory|OOM)\b.*?(?:request(?:ed)?|allocate)\D*" + _SIZE.format("req"), re.I
    ),  # fmt: skip
]
_SKIP = re.compile(
    r"Skipping tactic (?P<tactic>-?\w+) due to insuf+icient memory(?: on requested size of (?P<req>\d+)"
    r"(?: detected for tactic (?P<for>\w+))?)?"
    r"|^Tactic (?P<tactic2>-?\w+) scratch requested: (?P<req2>\d+), available: (?P<avail2>\d+)"
    r"|Some tactics do not have sufficient workspace memory"
)
_GB = 1 << 30


def _sizes(m: re.Match[str]) -> dict[str, Any]:
    g = m.groupdict()
    d: dict[str, Any] = {}
    for key, name in (("req", "requested_bytes"), ("req2", "requested_bytes"), ("avail", "available_bytes"),
                      ("avail2", "available_bytes")):  # fmt: skip
        if g.get(key):
            d[name] = to_bytes(g[key], g.get(key + "_u") if key in ("req", "avail") else None)
    return d


def _say(d: dict[str, Any]) -> str:
    parts = [f"{d['requested_bytes'] / _GB:.3g} GiB requested" if "requested_bytes" in d else ""]
    parts += [f"{d['available_bytes'] / _GB:.3g} GiB available" if "available_bytes" in d else ""]
    return ", ".join(p for p in parts if p)


_DEVICE_REQUEST = re.compile(
    r"Tactic Device request: "
    + _SIZE.format("req")
    + r"\s*Available: "
    + _SIZE.format("avail")
    + r"\.? Device memory is insufficient"
)


def rule_memory_shortfall(records: list[LogRecord]) -> Iterator[Hit]:
    """Allocations the build or the runtime could not make, with the size asked and, where printed, the size
    available. A tactic skipped for lack of memory is `tactic_skipped_workspace`, with its sizes: TensorRT prints
    `Tactic Device request: X Available: Y` next to the `Skipping tactic` line (before it in 8.x, after it in 10.x),
    and the two lines are one skip."""
    skips: list[dict[str, Any]] = []  # {"line", "text", "d", "read"}
    last: dict[str, Any] | None = None  # the skip or device request of the previous record
    for r in records:
        if r.dialect in ("blank", "elision"):
            continue
        text = first_line(r)
        m = _SKIP.search(text)
        req = _DEVICE_REQUEST.search(text)
        if m or req:
            d = _sizes(m or req)
            if m and (m["tactic"] or m["tactic2"]):
                d["tactic"] = m["for"] or m["tactic"] or m["tactic2"]
            kind = "skip" if m else "request"
            if last is not None and last["kind"] != kind and not last["paired"]:
                request, skip = (last["d"], d) if kind == "skip" else (d, last["d"])
                last["d"] = {**request, **skip}  # the skip line's exact bytes, the request line's available
                if "available_bytes" in request:
                    last["d"]["available_bytes"] = request["available_bytes"]
                last["read"].append(r.first)
                last["paired"] = True
                if kind == "skip":
                    last["text"] = text
                last = None
                continue
            last = {"kind": kind, "line": r.first, "text": text, "d": d, "read": [r.first], "paired": False}
            skips.append(last)
            continue
        last = None
        for rx in _SHORT:
            m = rx.search(text)
            if m:
                d = _sizes(m)
                msg = f"out of memory: {_say(d)}" if d else f"out of memory: {text[:200]}"
                yield Hit("memory_shortfall", "build", "high", msg, r.first, (), d, key="memory_shortfall")
                break
    for s in skips:
        msg = s["text"] if not s["d"].get("requested_bytes") else f"{s['text']} [{_say(s['d'])}]"
        yield Hit("tactic_skipped_workspace", "tactics", "medium", msg, s["line"], (), s["d"], read=tuple(s["read"]))


RULES = (rule_trtllm_build_time, rule_build_peak_memory, rule_memory_shortfall)
KINDS = {
    "trtllm_build_time": ("performance", "build_time"),  # info: all engines, per network, serialization (s)
    "build_peak_memory": ("performance", "build_memory"),  # info: peak CPU / GPU MiB of the build
    "memory_shortfall": ("build", "build_memory"),  # high: an allocation that failed; requested / available bytes
}
