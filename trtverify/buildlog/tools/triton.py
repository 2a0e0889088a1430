"""Triton Inference Server: model loading and the TensorRT and TensorRT-LLM backends, and the tables the server prints.

Formats, from triton-inference-server/core (src/model_lifecycle.cc: `loading: <model>:<version>`, `successfully loaded
'<model>' version <v>` (newer: without the version, and the whole message in double quotes), `failed to load '<model>'
version <v>: <Status>: <reason>`, `unloading: <model>:<version>`, `successfully unloaded '<model>' version <v>`;
model_repository_manager.cc `Poll failed for model directory '<dir>': <reason>`), the backends
(TRITONBACKEND_Initialize / ModelInitialize / ModelInstanceInitialize lines: `TRITONBACKEND_ModelInitialize: <model>
(version <v>)`, `TRITONBACKEND_ModelInstanceInitialize: <instance> (GPU device <n>)`; the TensorRT backend's
instance_state.cc `Created instance <instance> on GPU <n> with stream priority <p> and optimization profile
<profile>;` and backend_model_instance.cc `Creating instance <instance> on GPU <n> (<cc>) using artifact '<file>'`),
the model configuration Triton prints with --log-verbose (`"platform": "tensorrt_plan"`, `"default_model_filename"`,
`"version_policy": {"latest": {"num_versions": 1}}`), the server's tables (server.cc / tritonserver.cc: `| Option |
Value |` with server_id, server_version, model_repository_path[0], ...; `| Model | Version | Status |`; `| Backend |
Path | Config |`), all behind glog's prefix `I0829 03:48:41.018596 1161 model_lifecycle.cc:819] `; and the
TensorRT-LLM runtime the tensorrtllm backend runs (`[TensorRT-LLM][INFO] Loaded engine size: 3404 MiB`, `TRTGptModel
maxBatchSize: 1`, `Max KV cache pages per sequence: 64`, `Max KV cache blocks per sequence: 65 [window size=2051],
tokens per block=32, primary blocks=116617, secondary blocks=0`, `Number of tokens per block: 32.`, `[MemUsageChange]
Allocated 78.30 GiB for max tokens in paged KV cache (3731744).`, `Allocate 14575206400 bytes for k/v cache.`, `Using
35584 total tokens in paged KV cache, and 32 blocks per sequence`, `[MemUsageChange] Allocated 2265.58 MiB for execution
context memory.`, `Rank 0 is using GPU 0`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trtverify.buildlog.findings import Hit
from trtverify.buildlog.lines import LogRecord
from trtverify.buildlog.tools.common import lines_of, to_bytes
from trtverify.util.words import count

# glog's prefix, as Triton prints it; pasted logs sometimes lose the newlines between messages (split there too)
_GLOG = re.compile(r"(?P<sev>[IWEF])\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ (?P<src>[\w.-]+):\d+\] ?")
_LOADING = re.compile(r"^loading: (?P<m>[^:\s]+):(?P<v>\d+)")
_UNLOADING = re.compile(r"^unloading: (?P<m>[^:\s]+):(?P<v>\d+)")
_LOADED = re.compile(r"^successfully loaded '(?P<m>[^']+)'(?: version (?P<v>\d+))?")
_UNLOADED = re.compile(r"^successfully unloaded '(?P<m>[^']+)'(?: version (?P<v>\d+))?")
_FAILED = re.compile(r"^failed to load '(?P<m>[^']+)'(?: version (?P<v>\d+))?:\s*(?P<why>.+)")
_POLL = re.compile(r"^Poll failed for model directory '(?P<m>[^']+)':\s*(?P<why>.+)")
# TensorRT Inference Server (TRTIS, before Triton 2): servables
_SERVABLE_FAILED = re.compile(
    r"^(?:Loading servable: \{name: (?P<m>\S+) version: (?P<v>\d+)\} failed|Servable \{name: (?P<m2>\S+) version: "
    r"(?P<v2>\d+)\} cannot be loaded):\s*(?P<why>.+)"
)
_SERVABLE_LOADING = re.compile(r"^Loading servable version \{name: (?P<m>\S+) version: (?P<v>\d+)\}")
_MODEL_INIT = re.compile(r"^TRITONBACKEND_ModelInitialize: (?P<m>\S+) \(version (?P<v>\d+)\)")
_BACKEND_INIT = re.compile(r"^TRITONBACKEND_Initialize: (?P<b>\S+)")
_INSTANCE_INIT = re.compile(
    r"^TRITONBACKEND_ModelInstanceInitialize: (?P<i>\S+) \((?P<kind>GPU|CPU|MODEL)(?: device (?P<d>\d+))?\)"
)
_CREATED = re.compile(
    r"^Creat(?:ed|ing) instance (?P<i>\S+) on (?P<kind>GPU|CPU)(?: (?P<d>\d+))?(?: \((?P<cc>[\d.]+)\))?"
    r"(?: using (?:artifact )?'?(?P<art>[^'\s]+)'?)?(?: with stream priority (?P<prio>-?\d+))?"
    r"(?: and optimization profile (?P<prof>[^;\s]+))?"
)
_ENGINE_SIZE = re.compile(r"^Loaded engine size: (?P<n>[\d.]+) ?(?P<u>[KMG]i?B)")
_CONFIG_KEY = re.compile(
    r'"(?P<k>name|platform|backend|default_model_filename|max_batch_size)":\s*"?(?P<v>[^",]+)"?'
)  # fmt: skip
_POLICY = re.compile(r'"version_policy":\s*\{\s*"?(?P<p>latest|all|specific)"?(?::\s*\{\s*(?P<rest>[^}]*))?')
_POLICY_N = re.compile(r'^"(?:num_versions|versions)":\s*(?:\d+|\[[^\]]*\])')
_POLICY_ALONE = re.compile(r'^"(?P<p>latest|all|specific)":\s*\{\s*(?P<rest>[^}]*)')
_PATH = re.compile(r"(?P<path>[\w./\\:~-]*[\w-]\.(?:plan|engine|onnx|pt|savedmodel|graphdef))\b")
_LIB = re.compile(r"(?P<lib>[\w./\\:~-]*[\w-]\.(?:so|dll)(?:\.\d+)*)\b")
# the server options' keys (tritonserver.cc), for a table pasted without its `| Option | Value |` head
_OPTION_KEYS = re.compile(
    r"^(?:server_id|server_version|server_extensions|model_repository_path\[\d+\]|model_control_mode|"
    r"strict_model_config|rate_limit|pinned_memory_pool_byte_size|cuda_memory_pool_byte_size\{\d+\}|"
    r"min_supported_compute_capability|strict_readiness|exit_timeout|cache_enabled|response_cache_byte_size)$"
)
_STATUS = re.compile(r"^(?P<code>Internal|Invalid argument|Not found|Unavailable|Unknown|Already exists|Unsupported)"
                     r":\s*(?P<rest>.*)")  # fmt: skip


def _messages(records: list[LogRecord]) -> Iterator[tuple[int, str, str, str]]:
    """(line, severity letter, source file, message) of each Triton glog message, quotes and `\\n` escapes undone;
    other lines as ('', '', text)."""
    for r in records:
        if r.dialect in ("blank", "elision"):
            continue
        for line, text in lines_of(r):
            starts = list(_GLOG.finditer(text))
            if not starts:
                yield line, "", "", text
                continue
            if starts[0].start() > 0:
                yield line, "", "", text[: starts[0].start()].strip()
            for i, m in enumerate(starts):
                end = starts[i + 1].start() if i + 1 < len(starts) else len(text)
                msg = text[m.end() : end].strip()
                if len(msg) >= 2 and msg[0] == '"' and msg[-1] == '"':
                    msg = msg[1:-1].replace('\\"', '"').replace("\\n", "\n")
                for part in msg.split("\n") or [""]:
                    yield line, m["sev"], m["src"], part.strip()


def _backend_of(src: str) -> str:
    """The backend that printed a TRITONBACKEND_* line, from its source file: `libtensorrtllm.cc` -> tensorrtllm."""
    stem = src.rsplit(".", 1)[0]
    return {"python_be": "python", "libtorch": "pytorch"}.get(stem, stem.removeprefix("lib"))


def _owner(instance: str, models: dict[str, dict[str, Any]]) -> str | None:
    """The model an instance belongs to: the longest model name it starts with (`peopleNet_0_0` -> peopleNet)."""
    named = [m for m in models if instance == m or instance.startswith(m + "_")]
    if named:
        return max(named, key=len)
    base = re.sub(r"(?:_\d+)+$", "", instance)
    return base or None


def _table_rows(text: str, ncols: int) -> list[list[str]]:
    rx = re.compile(r"\|" + r"([^|]*)\|" * ncols)
    return [[c.strip() for c in m.groups()] for m in rx.finditer(text)]


def rule_triton(records: list[LogRecord]) -> Iterator[Hit]:
    """`triton_model` (one per model: versions loading / loaded / unloaded / failed with the reason, its backend and
    platform, the version policy, the engine file, each instance with its device and optimization profile, the
    engine's size), `triton_server_options` (the options table as key / value), `triton_model_status` (the model
    and backend status tables; high where a model is not READY)."""
    models: dict[str, dict[str, Any]] = {}
    lines: dict[str, list[int]] = {}
    options: dict[str, str] = {}
    opt_lines: list[int] = []
    status: list[dict[str, str]] = []
    backends: dict[str, str] = {}
    table_lines: list[int] = []
    table: str | None = None  # the table being read: options / models / backends / other
    cfg_model: str | None = None  # the model whose configuration is being printed
    last_instance_model: str | None = None
    seen_triton = False
    last_key = last_b = ""
    policy_open = False  # the line before opened `"version_policy": {`
    head_line: int | None = None
    frame_lines: list[int] = []  # the tables' rules, the heads of tables not read, the empty messages above them

    def model(name: str, line: int) -> dict[str, Any]:
        lines.setdefault(name, []).append(line)
        return models.setdefault(name, {"model": name})

    for line, _sev, src, text in _messages(records):
        if src:
            seen_triton = True
        # --- tables: a header row names the table, rows follow (wrapped cells: an empty first cell continues) ---
        if text.startswith("|") or text.startswith("+-"):
            if head_line is not None:  # the server's empty message the table is printed under
                frame_lines.append(head_line)
                head_line = None
            if text.startswith("+-"):
                frame_lines.append(line)
                continue
            head = [c.strip() for c in text.strip("|").split("|")]
            if head[:2] == ["Option", "Value"]:
                table, seen_triton = "options", True
                opt_lines.append(line)
                continue
            if head[:3] == ["Model", "Version", "Status"]:
                table, seen_triton = "models", True
                table_lines.append(line)
                continue
            if head[:2] == ["Backend", "Path"]:
                table, seen_triton = "backends", True
                table_lines.append(line)
                continue
            if head and head[0] in ("Repository Agent", "Model", "Backend"):
                table = "other"
                frame_lines.append(line)
                continue
            if table is None and len(head) == 2 and _OPTION_KEYS.match(head[0]):
                table, seen_triton = "options", True  # the options table pasted without its head
            if table == "options":
                for k, v in _table_rows(text, 2):
                    if k:
                        options[k] = v
                        last_key = k
                    elif options:
                        options[last_key] += v
                opt_lines.append(line)
            elif table == "models":
                for m, v, s in _table_rows(text, 3):
                    if m or not status:
                        status.append({"model": m, "version": v, "status": s})
                    else:
                        status[-1]["status"] += s
                        status[-1]["version"] += v
                table_lines.append(line)
            elif table == "backends":
                for b, p, _cfg in _table_rows(text, 3):
                    if b:
                        backends[b] = p
                        last_b = b
                    elif backends:
                        backends[last_b] += p
                table_lines.append(line)
            continue
        table = None
        head_line = line if src and not text else None
        if m := _LOADING.match(text):
            model(m["m"], line).setdefault("loading", []).append(m["v"])
        elif m := _LOADED.match(text):
            d = model(m["m"], line)
            d["state"] = "loaded"
            if m["v"]:
                d["version"] = m["v"]
        elif m := _FAILED.match(text):
            d = model(m["m"], line)
            d["state"], d["reason"] = "failed", m["why"].strip()
            if m["v"]:
                d["version"] = m["v"]
            if s := _STATUS.match(d["reason"]):
                d["status"] = s["code"]
            if p := _PATH.search(d["reason"]):
                d.setdefault("engine", p["path"])
            if lib := _LIB.search(d["reason"]):
                d["library"] = lib["lib"]
        elif m := _SERVABLE_FAILED.match(text):
            d = model(m["m"] or m["m2"], line)
            d["state"], d["reason"], d["version"] = "failed", m["why"].strip(), m["v"] or m["v2"]
            if s := _STATUS.match(d["reason"]):
                d["status"] = s["code"]
        elif m := _SERVABLE_LOADING.match(text):
            model(m["m"], line).setdefault("loading", []).append(m["v"])
        elif m := _POLL.match(text):
            d = model(m["m"].rstrip("/").rsplit("/", 1)[-1], line)
            d["state"], d["reason"] = "failed", m["why"].strip()
        elif m := _UNLOADING.match(text):
            model(m["m"], line).setdefault("unloading", []).append(m["v"])
        elif m := _UNLOADED.match(text):
            d = model(m["m"], line)
            d.setdefault("unloaded", []).append(m["v"] or d.get("version", ""))
            if d.get("state") != "failed":
                d["state"] = "unloaded"
        elif m := _BACKEND_INIT.match(text):
            backends.setdefault(m["b"], "")
        elif m := _MODEL_INIT.match(text):
            d = model(m["m"], line)
            d["version"] = m["v"]
            if src:
                d["backend"] = _backend_of(src)
        elif (m := _INSTANCE_INIT.match(text)) or (m := _CREATED.match(text)):
            owner = _owner(m["i"], models)
            if owner is None:
                continue
            d = model(owner, line)
            inst = next((x for x in d.setdefault("instances", []) if x["name"] == m["i"]), None)
            if inst is None:
                inst = {"name": m["i"], "device": m["kind"]}
                d["instances"].append(inst)
            if m["d"] is not None:
                inst["gpu"] = int(m["d"]) if m["kind"] == "GPU" else None
                if inst["gpu"] is None:
                    inst.pop("gpu")
            g = m.groupdict()
            if g.get("prof"):
                inst["profile"] = g["prof"]
            if g.get("cc"):
                inst["compute_capability"] = g["cc"]
            if g.get("art"):
                d["engine"] = g["art"]
            if src and _INSTANCE_INIT.match(text):
                d.setdefault("backend", _backend_of(src))
            last_instance_model = owner
        elif (m := _ENGINE_SIZE.match(text)) and src and last_instance_model:
            d = model(last_instance_model, line)
            d["engine_size"] = f"{m['n']} {m['u']}"
            d["engine_size_bytes"] = to_bytes(m["n"], m["u"])
        elif src or cfg_model is not None or text.startswith(("{", '"')):
            # the model configuration (--log-verbose), one key a line, or one JSON text in a quoted message
            for k in _CONFIG_KEY.finditer(text):
                if k["k"] == "name" and text.lstrip().startswith('"name"'):
                    cfg_model = k["v"].strip()
                    continue
                if k["k"] == "name" or cfg_model is None:
                    continue
                key = {"default_model_filename": "engine"}.get(k["k"], k["k"])
                value = k["v"].strip()
                if key == "max_batch_size":
                    model(cfg_model, line)[key] = int(value) if value.isdigit() else value
                elif value:
                    model(cfg_model, line).setdefault(key, value)
            if cfg_model is None:
                continue
            p = _POLICY.search(text) or (_POLICY_ALONE.match(text) if policy_open else None)
            policy_open = text.startswith('"version_policy"') and p is None
            if p:
                policy = p["p"] + (f" {p['rest'].strip().replace(chr(34), '')}" if p["rest"] else "")
                model(cfg_model, line)["version_policy"] = policy.strip()
            elif (n := _POLICY_N.match(text)) and models.get(cfg_model, {}).get("version_policy", "").count(" ") == 0:
                if "version_policy" in models.get(cfg_model, {}):
                    models[cfg_model]["version_policy"] += " " + n.group().replace('"', "").rstrip(",")
                    lines[cfg_model].append(line)
    if not seen_triton and not models:
        return
    for name, d in models.items():
        if len(d) == 1:
            continue
        state = d.get("state") or ("loading" if d.get("loading") else "instances created" if d.get("instances")
                                   else "configured")  # fmt: skip
        if not d.get("version") and len(set(d.get("loading", []))) == 1:
            d["version"] = d["loading"][0]
        ver = f" version {d['version']}" if d.get("version") else ""
        if state == "failed":
            said = f"Triton failed to load '{name}'{ver}: {d['reason']}"
        else:
            said = f"Triton model '{name}'{ver}: {state}"
        parts = [f"{k.replace('_', ' ')} {d[k]}" for k in ("library", "backend", "platform", "engine") if d.get(k)]
        if d.get("engine_size"):
            parts.append(f"engine size {d['engine_size']}")
        if d.get("version_policy"):
            parts.append(f"version policy {d['version_policy']}")
        if d.get("max_batch_size") is not None:
            parts.append(f"max_batch_size {d['max_batch_size']}")
        insts = d.get("instances", [])
        if insts:
            where = sorted({f"GPU {x['gpu']}" if "gpu" in x else x["device"] for x in insts})
            profs = sorted({x["profile"] for x in insts if "profile" in x})
            parts.append(f"{count(len(insts), 'instance')} on {', '.join(where)}")
            if profs:
                parts.append(f"optimization profile {', '.join(profs)}")
        said += " (" + "; ".join(p for p in parts if p) + ")" if any(parts) else ""
        sev = "high" if state == "failed" else "info"
        ls = sorted(set(lines[name]))
        yield Hit("triton_model", "build", sev, said, ls[0], (name,), d, key=f"triton_model:{name}", read=tuple(ls))
    if options:
        first = ("server_version", "server_id", "model_repository_path", "model_control_mode", "strict_model_config")
        keys = sorted(options, key=lambda k: next((i for i, f in enumerate(first) if k.startswith(f)), len(first)))
        msg = "Triton server options: " + ", ".join(f"{k} {options[k][:80]}" for k in keys[:8])
        d = {"options": options}
        if "server_version" in options:
            d["server_version"] = options["server_version"]
        yield Hit(
            "triton_server_options", "build", "info", msg, opt_lines[0], (), d, read=tuple(opt_lines + frame_lines)
        )
    if status or backends and table_lines:
        bad = [s for s in status if s["status"] and s["status"] != "READY"]
        said = [f"{s['model']} {s['version']}: {s['status']}" for s in status[:8]]
        if backends:
            said.append("backends: " + ", ".join(f"{b} {p}".strip() for b, p in backends.items()))
        msg = ("Triton model status: " if status else "Triton ") + "; ".join(said)
        d = {"models": status, "backends": backends, "not_ready": len(bad)}
        line0 = table_lines[0] if table_lines else 0
        if line0:
            yield Hit("triton_model_status", "build", "high" if bad else "info", msg, line0,
                      tuple(s["model"] for s in bad), d, read=tuple(table_lines + frame_lines))  # fmt: skip


# --- the TensorRT-LLM runtime (the tensorrtllm backend, the C++ executor) ---------------------------------------

_TRTLLM = [
    (re.compile(r"^Loaded engine size: (?P<n>[\d.]+) ?(?P<u>[KMG]i?B)"), "engine_size"),
    (re.compile(r"^TRTGptModel (?P<k>\w+): (?P<n>-?\d+)"), "model"),
    (re.compile(r"^Max KV cache (?:pages|blocks) per sequence: (?P<n>\d+)(?P<rest>.*)"), "blocks_per_sequence"),
    (re.compile(r"^Number of tokens per block: (?P<n>\d+)"), "tokens_per_block"),
    (re.compile(r"Allocated (?P<n>[\d.]+) ?(?P<u>[KMG]i?B) for max tokens in paged KV cache \((?P<t>\d+)\)"),
     "kv_cache"),
    (re.compile(r"^Allocate (?P<n>\d+) bytes for k/v cache"), "kv_cache"),
    (re.compile(r"^Using (?P<t>\d+) (?:total )?tokens in paged KV cache(?:, and (?P<b>\d+) blocks per sequence)?"),
     "kv_tokens"),
    (re.compile(r"Allocated (?P<n>[\d.]+) ?(?P<u>[KMG]i?B) for execution context memory"), "context_memory"),
    (re.compile(r"^Rank (?P<r>\d+) is using GPU (?P<g>\d+)"), "rank_gpu"),
    (re.compile(r"^Engine version (?P<v>\S+) found in the config file"), "engine_version"),
]  # fmt: skip
_KV_REST = re.compile(r"(?P<k>tokens per block|primary blocks|secondary blocks|window size)=(?P<n>\d+)")


def rule_trtllm_runtime(records: list[LogRecord]) -> Iterator[Hit]:
    """`trtllm_runtime`: the TensorRT-LLM runtime's engine and KV cache as the tensorrtllm backend (or the
    executor) states them: engine size, max batch size / tokens / sequence length, KV cache size in bytes and as
    written, tokens and blocks, the execution context memory, the GPU of each rank."""
    d: dict[str, Any] = {}
    ls: list[int] = []
    for r in records:
        if r.dialect != "trtllm":
            continue
        text = r.text.split("\n", 1)[0].strip()
        for rx, what in _TRTLLM:
            m = rx.search(text)
            if not m:
                continue
            g = m.groupdict()
            if what == "engine_size":
                d["engine_size"] = f"{g['n']} {g['u']}"
                d["engine_size_bytes"] = to_bytes(g["n"], g["u"])
            elif what == "model":
                d.setdefault("model", {})[g["k"]] = int(g["n"])
            elif what == "blocks_per_sequence":
                d["blocks_per_sequence"] = int(g["n"])
                for k in _KV_REST.finditer(g["rest"] or ""):
                    d[k["k"].replace(" ", "_")] = int(k["n"])
            elif what == "tokens_per_block":
                d["tokens_per_block"] = int(g["n"])
            elif what == "kv_cache":
                d["kv_cache"] = f"{g['n']} {g.get('u') or 'bytes'}"
                d["kv_cache_bytes"] = to_bytes(g["n"], g.get("u"))
                if g.get("t"):
                    d["kv_cache_tokens"] = int(g["t"])
            elif what == "kv_tokens":
                d["kv_cache_tokens"] = int(g["t"])
                if g["b"]:
                    d["blocks_per_sequence"] = int(g["b"])
            elif what == "context_memory":
                d["context_memory"] = f"{g['n']} {g['u']}"
            elif what == "rank_gpu":
                d.setdefault("rank_gpu", {})[g["r"]] = int(g["g"])
            elif what == "engine_version":
                d["engine_version"] = g["v"]
            ls.append(r.first)
            break
    if not ls:
        return
    parts = [f"engine {d['engine_size']}" if "engine_size" in d else ""]
    if "kv_cache" in d:
        parts.append(f"KV cache {d['kv_cache']}" + (f" ({d['kv_cache_tokens']} tokens)" if "kv_cache_tokens" in d
                                                     else ""))  # fmt: skip
    elif "kv_cache_tokens" in d:
        parts.append(f"KV cache {d['kv_cache_tokens']} tokens")
    for k in ("blocks_per_sequence", "tokens_per_block", "primary_blocks"):
        if k in d:
            parts.append(f"{k.replace('_', ' ')} {d[k]}")
    for k, v in d.get("model", {}).items():
        if k in ("maxBatchSize", "maxNumTokens", "maxSequenceLen", "maxInputLen", "maxNumSequences"):
            parts.append(f"{k} {v}")
    if "context_memory" in d:
        parts.append(f"execution context {d['context_memory']}")
    if "rank_gpu" in d:
        parts.append(", ".join(f"rank {r} on GPU {g}" for r, g in d["rank_gpu"].items()))
    msg = "TensorRT-LLM runtime: " + (", ".join(p for p in parts if p) or "engine " + d.get("engine_version", ""))
    yield Hit("trtllm_runtime", "performance", "info", msg, ls[0], (), d, read=tuple(ls))


RULES = (rule_triton, rule_trtllm_runtime)
KINDS = {
    "triton_model": ("build", "triton"),  # info (high: failed to load): state, version, backend, engine, instances
    "triton_server_options": ("build", "triton"),  # info: the server options table, key / value
    "triton_model_status": ("build", "triton"),  # info (high: a model not READY): model / version / status rows
    "trtllm_runtime": ("performance", "trtllm_runtime"),  # info: engine size, KV cache bytes / tokens / blocks
}
