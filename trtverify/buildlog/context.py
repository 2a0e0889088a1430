"""The context of any log, found by generic patterns rather than per-tool rules: the tools and their versions, the
GPU and its compute capability, the model files, the engine files written or read, input shapes and optimization
profiles, precision flags and batch sizes; each item with the 1-based line it came from.

Every pattern runs once over the whole text (a line number is looked up from the match's offset), so the cost is
a few regex scans of the log, whatever its length.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterator

from pydantic import Field

from trtverify.buildlog import entities, settings
from trtverify.buildlog.lines import LogRecord, clean_line, match_prefix, split_records
from trtverify.util.record import Record

FIGURES = 40  # figures kept per log (a verbose log states thousands: memory changes, timings)


class ContextItem(Record):
    """One thing the log states, and where."""

    value: str = Field(description="as written in the log (a version, a path, a shape, a flag, a number)")
    line: int = Field(description="1-based line it came from")
    detail: dict[str, str] = Field(
        default_factory=dict,
        description="what it is: tool (of a version), direction (of an engine file: written | read), "
        "compute_capability (of a GPU), input and role (of a shape: shape | min | opt | max)",
    )


class LogContext(Record):
    """What a log says it ran: tools, GPU, model and engine files, inputs, precision, batch size."""

    tools: list[ContextItem] = Field(default_factory=list, description="tool versions (detail.tool names the tool)")
    gpus: list[ContextItem] = Field(default_factory=list, description="GPU names or compute capabilities")
    models: list[ContextItem] = Field(default_factory=list, description="model files and checkpoint folders")
    engines: list[ContextItem] = Field(
        default_factory=list, description="engine files (.plan, .engine, .trt), written or read where the line says"
    )
    files: list[ContextItem] = Field(
        default_factory=list,
        description="other files written or read (timing and calibration caches, configs, plugin libraries, data)",
    )
    shapes: list[ContextItem] = Field(default_factory=list, description="input shapes and optimization profiles")
    precision: list[ContextItem] = Field(default_factory=list, description="precision flags and modes")
    batch_size: list[ContextItem] = Field(default_factory=list, description="batch sizes stated")
    figures: list[ContextItem] = Field(
        default_factory=list,
        description=f"times, memory and rates the log states (build and load times, peak memory, throughput, "
        f"latency), as written; detail.what: the words before it; the first {FIGURES} kept, the rest counted",
    )
    settings: list[ContextItem] = Field(
        default_factory=list,
        description=f"settings the log states in any generic form (`key: value`, `key=value`, `--flag value`, "
        f"`Set key to value`, `| key | value |`, JSON members): value as written, detail.key the words before it, "
        f"detail.written the pair as written; "
        f"the first {settings.SETTINGS} distinct pairs kept, the rest counted",
    )
    left_out: dict[str, int] = Field(default_factory=dict, description="items of a kind not kept, counted")

    def names(self) -> str:
        """Every value, one per line (what a reader could search)."""
        return "\n".join(i.value for items in dict(self).values() for i in items)


_DIGIT_DOT = re.compile(r"\d\.\d|v\d{4,6}\]|TRT-\d")
# the gates: words a line must hold for a pattern to be tried on it (str.find over the log, much faster than a
# regex tried at every offset); a gate only saves time, the pattern decides
_FILE_GATE = tuple(
    "." + e
    for e in "onnx pt pth pb safetensors tflite torchscript gguf uff caffemodel prototxt h5 keras ckpt nemo bin plan "
    "engine trt cache calib table json yaml yml so dll txt log npz npy csv pbtxt tar zip".split()
)
_SHAPE_GATE = ("nput", "INPUT", "rofile", "inding", "min", "opt", "max", "hapes")
_PREC_GATE = ("--", "recision", "mode", "BuilderFlag", "fp8", "FP8")
_BATCH_GATE = ("batch", "Batch", "BATCH")
_CKPT_GATE = ("_dir", "_path", "checkpoint", "model_name", "model_repository", "model-repository")
_GPU = re.compile(
    r"(?P<g>\b(?:NVIDIA|Tesla|Quadro|GeForce|TITAN|Jetson)\b(?: [\w-]+){1,5}?)"
    r"(?=\s*(?:$|[,.;:)\]|(\"']|with|GPU|\(|\d+\s?[MG]i?B))"
    r"|(?P<j>\b(?:AGX |NX )?(?:Orin|Xavier)(?: NX| Nano| AGX)?\b)"
    r"|(?:[Cc]ompute [Cc]apability|\bcc|\bSM)\s*[:=]?\s*(?P<cc>\d{1,2}\.\d)\b|\bsm_?(?P<sm>\d{2,3})\b",
    re.M,
)
_NOT_GPU = re.compile(r"(?i)corporation|driver|container|license|\bmay\b|\bis\b|\bare\b|\bthe\b")
_CHECKPOINT = re.compile(
    r"(?:--|\b)(?P<k>checkpoint_dir|ckpt_dir|model_dir|hf_model_dir|model_path|model_name_or_path|engine_dir"
    r"|output_dir|checkpoint|model_repository|model-repository)['\"]?\s*[=: ]\s*['\"]?"
    r"(?P<v>[^\s'\",()|]*\w[^\s'\",()|]*)"
)
_WRITE = re.compile(
    r"(?i)\b(?:sav(?:e|ed|ing)|writ(?:e|es|ing|ten)|wrote|serializ(?:e|ed|ing)(?! from)|export(?:ed|ing)?|"
    r"generat(?:e|ed|ing)|build(?:ing)?|built|creat(?:e|ed|ing)|output|dump(?:ed|ing)?)\b|--saveEngine|-o\b"
)
_READ = re.compile(
    r"(?i)\b(?:load(?:ed|ing|s)?|read(?:ing|s)?|deserializ(?:e|ed|ing|ation)|open(?:ed|ing)?|using|use|found|"
    r"from|look(?:ing)? for|(?:does not|doesn't) exist|not found|no such file|deseriali[sz]e)\b|--loadEngine"
)
_INPUT_WORDS = re.compile(r"(?i)\binputs?\b|profile|binding|\b(?:min|opt|max)\b|input_shape|(?:^|\s)\d+\s+INPUT\s")
# a node's inputs in the ONNX parser's verbose trace, a reformat layer's: not the network's
_NODE_TRACE = re.compile(
    r"\] inputs: \[|\w input dimensions|\] outputs: \[|LayerType:|Reformatting CopyNode|\bweights?\b|[Ww]eights \["
    r"|^Layer\(|Input Tensor \d+ to|Inputs: \[|\"Inputs\"|Stats: |\bat \("  # a layer's record; a statistic's index
)
_INPUT_NAME = re.compile(
    r"(?:Tensor:|network input:?|[Ii]nput(?: tensor)?:|binding:?|\{)\s*(?P<a>[\w./:-]+)"
    r"|(?:[Ii]nput|[Tt]ensor|binding)\s+['\"](?P<q>[^'\"\s]{1,120})['\"]"
    r"|(?P<b>[\w./:-]+)\s+\[(?:min|shape)="
    r"|--\w*[Ss]hapes=(?P<c>[\w./-]+):"
)
_SHAPE_ARG = re.compile(
    r"--(?P<role>shapes|minShapes|optShapes|maxShapes|input_shapes?|inputIOFormats)[= ](?P<v>\S+)"
    r"|\b(?P<r2>min|opt|max)(?:_shapes?|Shapes?)?\s*[=:]\s*(?P<s>\([^()\n]*\)|\[[^\[\]\n]*\]|\d+(?:x\d+)+)"
)
_P = (
    r"(?:torch\.|trt\.|DataType\.)?(?:fp32|fp16|bf16|fp8|int8|int4|nvfp4|w4a16\w*|w8a8\w*|float32|float16|bfloat16|"
    r"half|FP32|FP16|BF16|FP8|INT8|INT4|NVFP4|kFLOAT|kHALF|kINT8|FLOAT|HALF|TF32)\b"
)
_PRECISION = re.compile(
    r"--(?P<flag>fp16|bf16|fp8|int8|int4|best|stronglyTyped|noTF32|fp32)\b"
    r"|\b(?P<k>[Pp]recisions?|enabled_precisions|quantize_mode|quantization|quant_mode|mode|use_fp8|BuilderFlag"
    rf"|--precision)\b['\"]?\s*[:=.]?\s*[{{(\[]?\s*(?P<v>{_P}(?:\s*[+,]\s*{_P})*)"
    r"|\b(?P<ctx>Precision|precision): (?P<v2>[\w+]+)"
)
_BATCH = re.compile(
    r"(?i)(?:\b(?:max_|opt_|min_)?batch[_ ]?size|maxBatchSize|--batch)\b['\"]?\s*(?:[:=]\s*|of\s+|is\s+|\s)"
    r"(?P<v>\d+)\b"
)


_FIGURE_GATE = re.compile(
    r"\d\s?(?:ms|s|sec|secs|seconds|min|minutes|MiB|GiB|KiB|MB|GB|KB|bytes|qps|%)(?![\w/])|\d:\d\d:\d\d"
    r"|\d \((?:MiB|GiB|KiB|MB|GB|bytes|ms|s)\)"  # a unit in brackets after the figures: `GPU 53 (MiB)`
)
_FIGURE_WORDS = re.compile(
    r"(?i)\b(?:time|elapsed|took|completed|finished|duration|memory|peak|throughput|latency|qps|size|"
    r"allocat\w*|usage|mean|median|percentile|coverage|total|build|built|loaded|serializ\w*|workspace)\b"
)
_FIGURE = re.compile(
    r"(?<![\w.])(?P<v>\d+(?:\.\d+)?(?:[eE][+-]?\d+)?\s?(?:ms|s|sec|secs|seconds|min|minutes|MiB|GiB|KiB|MB|GB|KB|"
    r"bytes|qps|%)(?![\w/])|(?<![\d:-])(?<!\d )(?<!\dT)\d{1,3}:\d\d:\d\d(?:\.\d+)?(?![\d:])"
    r"|\d+(?:\.\d+)? \((?:MiB|GiB|KiB|MB|GB|bytes|ms|s)\))"
)
# a time stamp a logger puts first: `2026-11-20 09:15:47.877`, `[10/12/2024-15:46:16]`, `[2024-11-08 08:46:50.861]`
_STAMP = re.compile(r"^\[?\d{1,4}[-/]\d\d[-/]\d{2,4}[ T-]\d\d:\d\d:\d\d(?:[.,]\d+)?\]?\s*(?:\[[^\]\s]{1,30}\]\s*)*")


def evidence_message(line: str) -> str:
    """A line without its logger prefix."""
    hit = match_prefix(clean_line(line))
    return hit[2] if hit is not None else line.strip()


def _figures(ctx: LogContext, text: str, starts: list[int]) -> None:
    """Each figure with a unit (or a clock time) on a line that says what it is (time, memory, throughput ...)."""
    kept = 0
    last, after = 0, 0  # the line being read, where its last figure ended
    said: set[tuple[str, str]] = set()
    for g in _FIGURE_GATE.finditer(text):
        no = bisect_right(starts, g.start())
        if no == last:
            continue
        last, after = no, 0
        end = text.find("\n", g.start())
        line = text[starts[no - 1] : end if end >= 0 else len(text)]
        if not _FIGURE_WORDS.search(line):
            continue
        body = _STAMP.sub("", evidence_message(line))
        for m in _FIGURE.finditer(body):
            if kept >= FIGURES:
                ctx.left_out["figures"] = ctx.left_out.get("figures", 0) + 1
                continue
            words = body[after : m.start()].strip(" ,;:") or body[: m.start()]  # `in 105.6 s, 41.2 MiB`: all before
            what = " ".join(words.split()[-8:])[-80:]
            after = m.end()
            if (m["v"].strip(), what) in said:  # the same figure said again (`Using 59655MiB` on every line)
                continue
            said.add((m["v"].strip(), what))
            ctx.figures.append(ContextItem(value=m["v"].strip(), line=no, detail={"what": what} if what else {}))
            kept += 1


def _line_starts(text: str) -> list[int]:
    starts = [0]
    find = text.find
    i = find("\n")
    while i >= 0:
        starts.append(i + 1)
        i = find("\n", i + 1)
    return starts


def _add(items: list[ContextItem], seen: set[tuple[str, ...]], value: str, line: int, **detail: str) -> None:
    key = (value, *sorted(detail.items()))
    if value and key not in seen:
        seen.add((value, *sorted(detail.items())))
        items.append(ContextItem(value=value, line=line, detail=detail))


def _direction(line: str, at: int) -> str | None:
    """written | read where the line's words say so; the nearest word before the path wins."""
    before = line[:at]
    w = [m.end() for m in _WRITE.finditer(before)]
    r = [m.end() for m in _READ.finditer(before)]
    if w or r:
        return "written" if (w[-1] if w else -1) > (r[-1] if r else -1) else "read"
    after = line[at:]
    w2, r2 = _WRITE.search(after), _READ.search(after)
    if w2 or r2:
        return "written" if w2 and (not r2 or w2.start() < r2.start()) else "read"
    return None


def _input_name(before: str) -> dict[str, str]:
    """{"input": name} of the last input named before a shape on its line (`Tensor: X`, `{sample [min=`)."""
    found = [m for m in _INPUT_NAME.finditer(before)]
    if not found:
        return {}
    name = found[-1]["a"] or found[-1]["q"] or found[-1]["b"] or found[-1]["c"]
    return {"input": name} if name and not name.isdigit() else {}


def _gated(text: str, gate: re.Pattern[str] | tuple[str, ...], starts: list[int]) -> Iterator[tuple[int, str]]:
    """(1-based line, the line) of each line where the cheap `gate` matches (a regex, or words: any of them)."""
    if isinstance(gate, tuple):
        yield from _literal_lines(text, gate, starts)
        return
    last = 0
    for g in gate.finditer(text):
        no = bisect_right(starts, g.start())
        if no == last:
            continue
        last = no
        end = text.find("\n", g.start())
        yield no, text[starts[no - 1] : end if end >= 0 else len(text)]


def _literal_lines(text: str, words: tuple[str, ...], starts: list[int]) -> Iterator[tuple[int, str]]:
    """(line, text) of each line holding one of `words` (str.find: much faster than a regex alternation)."""
    found: set[int] = set()
    for w in filter(None, words):
        i = text.find(w)
        while i >= 0:
            found.add(bisect_right(starts, i))
            i = text.find(w, i + 1)
    for no in sorted(found):
        end = text.find("\n", starts[no - 1])
        yield no, text[starts[no - 1] : end if end >= 0 else len(text)]


def _lines_with(
    text: str, gate: re.Pattern[str] | tuple[str, ...], rx: re.Pattern[str], starts: list[int]
) -> Iterator[tuple[re.Match[str], int, str]]:
    """(match within its line, 1-based line, the line) of `rx` on each line the gate lets by."""
    for no, line in _gated(text, gate, starts):
        for m in rx.finditer(line):
            yield m, no, line


_GPU_WORDS = ("NVIDIA", "Tesla", "Quadro", "GeForce", "TITAN", "Jetson", "Orin", "Xavier", "apability", "sm_", "SM")
_TOOL_WORDS = (
    *"TensorRT tensorrt TRT- nvinfer ONNX onnx ORT CUDA cuda Cuda cuDNN CUDNN cudnn cuBLAS CUBLAS cublas river".split(),
    *"orch olygraphy odelopt odelOpt riton server_version eepStream eepstream etPack etpack L4T release".split(),
    *"opset Opset ensorFlow ensorflow ersion v1 v2 v3 v4 v5 v6 v7 v8 v9".split(),
    "TRT ",
)


def _tools(ctx: LogContext, seen: set[tuple[str, ...]], text: str, starts: list[int]) -> None:
    for no, line in _literal_lines(text, _TOOL_WORDS, starts):
        if not _DIGIT_DOT.search(line):
            continue
        for m in entities.VERSION.finditer(line):
            tool = next(entities.TOOL[k] for k, v in m.groupdict().items() if v is not None and k in entities.TOOL)
            _add(ctx.tools, seen, m["v"], no, tool=tool)
        for m in entities.TRT_NUMBER.finditer(line):
            _add(ctx.tools, seen, entities.trt_number(m["n"] or m["m"]), no, tool="TensorRT", written=m["n"] or m["m"])


def _shapes(ctx: LogContext, seen: set[tuple[str, ...]], text: str, starts: list[int]) -> None:
    for no, line in _gated(text, _SHAPE_GATE, starts):
        if _NODE_TRACE.search(line):
            continue
        for m in _SHAPE_ARG.finditer(line):
            name = _input_name(line[: m.start()])
            if m["v"]:
                _add(ctx.shapes, seen, m["v"], no, role=m["role"], **name)
            else:
                _add(ctx.shapes, seen, m["s"], no, role=m["r2"].lower(), **name)
        if not _INPUT_WORDS.search(line):
            continue
        for m in entities.SHAPE.finditer(line):
            if not any(i.value == m[0] for i in ctx.shapes):
                _add(ctx.shapes, seen, m.group(0), no, role="shape", **_input_name(line[: m.start()]))


def scan(text: str, records: list[LogRecord] | None = None) -> LogContext:
    """The context block of a log (its raw text; ANSI colour codes do not hide a value); `records`: the text's
    split_records, where the caller has them."""
    starts = _line_starts(text)
    ctx = LogContext()
    seen: set[tuple[str, ...]] = set()
    _tools(ctx, seen, text, starts)
    for no, line in _literal_lines(text, _GPU_WORDS, starts):
        for m in _GPU.finditer(line):
            if m["g"] and not _NOT_GPU.search(m["g"]):
                _add(ctx.gpus, seen, m["g"].strip(), no)
            elif m["j"]:
                _add(ctx.gpus, seen, m["j"], no)
            elif m["cc"] or m["sm"]:
                cc = m["cc"] or f"{m['sm'][:-1]}.{m['sm'][-1]}"
                _add(ctx.gpus, seen, m.group(0).strip(), no, compute_capability=cc)
    for m, no, line in _lines_with(text, _FILE_GATE, entities.FILE, starts):
        path = (m["f"] or "").rstrip(".,;:)'\"")
        if not path or line[m.start() - 1 : m.start()] == "[" and line[m.end() : m.end() + 1] == "]":
            continue  # a logger's name (`[rtx_demo.utils.engine]`), not a file
        ext = path.rsplit(".", 1)[-1].lower()
        if ext in ("plan", "engine", "trt"):
            how = _direction(line, m.start())
            _add(ctx.engines, seen, path, no, **({"direction": how} if how else {}))
        elif re.fullmatch(entities.MODEL_EXT, ext) and (ext != "bin" or "model" in path.lower()):
            _add(ctx.models, seen, path, no)
        elif re.fullmatch(entities.DATA_EXT, ext) or re.fullmatch(r"so(?:\.\d+)*", ext):
            how = _direction(line, m.start())
            _add(ctx.files, seen, path, no, **({"direction": how} if how else {}))
    for m, no, _ in _lines_with(text, _CKPT_GATE, _CHECKPOINT, starts):
        v = m["v"]
        if not re.search(r"[/\\.]", v) and not re.search(r"[=:]", m.group(0)[len(m["k"]) :]):
            continue  # `model_repository model_control ...`: a list of words, not a folder
        if "engine" in m["k"] and not re.search(r"\.(?:plan|engine|trt)$", v):
            _add(ctx.engines, seen, v, no, direction="written" if "output" in m["k"] else "folder")
        elif not re.search(r"\.(?:plan|engine|trt)$", v):
            _add(ctx.models, seen, v, no, folder=m["k"])
    _shapes(ctx, seen, text, starts)
    for m, no, _ in _lines_with(text, _PREC_GATE, _PRECISION, starts):
        v = m["flag"] and f"--{m['flag']}" or m["v"] or m["v2"]
        _add(ctx.precision, seen, v, no)
    for m, no, _ in _lines_with(text, _BATCH_GATE, _BATCH, starts):
        _add(ctx.batch_size, seen, m["v"], no)
    _figures(ctx, text, starts)
    found, more = settings.scan(split_records(text) if records is None else records)
    ctx.settings.extend(ContextItem(value=v, line=no, detail={"key": k, "written": w}) for k, v, w, no in found)
    if more:
        ctx.left_out["settings"] = more
    return ctx
