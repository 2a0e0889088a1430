"""Named noise classes: logger messages that carry no finding, recognised as what they are. A line with a logger
prefix counts as recognised when it feeds a finding or falls in one of these classes (docs/buildlog.md lists
them); anything else is counted unrecognised, whatever its prefix. Each class is a message family, matched on
the message with its logger prefix taken off; only info, verbose and unprefixed messages are classed as noise
(errors and warnings always become findings: floor.py)."""

from __future__ import annotations

import re

from trtverify.buildlog.lines import LogRecord

_CLASSES: dict[str, str] = {
    # trtexec's section banners (`=== Build Options ===`); the `Key: value` lines under them: see noise_classes
    "options_echo": r"^=== [\w ()/.-]+ ===$",
    "device_info": r"^(?:Selected Device|Compute Capability|SMs|Device Global Memory|Shared Memory per SM|Memory Bus"
    r" Width|Application Compute Clock Rate|Application Memory Clock Rate|Device:|GPU:|CUDA lazy loading)",
    # memory reports: [MemUsageChange], per-stage CPU/GPU deltas, persistent and activation memory
    "memory_report": r"MemUsage|[Mm]emory usage|Total (?:Host|Device|Activation|Weights?|Scratch)[\w ]*Memory|"
    r"CPU \+-?\d+|GPU \+-?\d+|memory pool|[Pp]eak memory|Allocated .*bytes|bytes? of (?:device )?memory",
    # progress of a tool: starting, loading, parsing, building, serializing, saving, timing runs
    "progress": r"^(?:Start(?:ing|ed)?|Finish(?:ed|ing)|Build(?:ing)?|Load(?:ing|ed)|Pars(?:ing|ed)|Serializ|"
    r"Deserializ|Sav(?:ing|ed)|Writ(?:ing|ten)|Creat(?:ing|ed)|Running|Done|Completed|Succe(?:ss|eded)|Warm ?up|"
    r"Timing|Set(?:ting)? |Using |Init(?:ializ)?|Engine (?:built|deserialized|loaded|generation)|Local timing|"
    r"Detected \d+ (?:inputs?|outputs?)|Input filename|ONNX IR version|Opset version|Producer (?:name|version)|"
    r"Domain|Model version|Doc string|Graph construction|Constructing optimization profile|Global timing|"
    r"Activating and starting inference|Inference|Trace averages|Averages over|Explanations of the performance)",
    # the builder's own chatter at verbose level: tactics timed, formats tried, fusions, graph passes
    "builder_verbose": r"^(?:Tactic|Timing Runner|Fastest Tactic|Autotuning|>+ ?Chose|-+ Timing|Deleting timing|"
    r"Layer\(|Registering|Applying|Running:|After |Removing|Fusing|Eliminating|Swap|Constant folding|Original:|"
    r"QDQ graph optimizer|Adding reformat|Formats and tactics|\*+ Autotuning|=+ Computing costs|Skipping tactic|"
    r"Engine Layer Information|Layers? (?:\w+ )?(?:information|info)|Reformatting|Name: |Tensor |Importing|"
    r"Searching for|Found|Marking|Setting up|Calibration|Total number of|Graph optimization|Timing cache|"
    r"Builder timing|Per-layer|Plugin creator|Successfully created plugin|Multi-head)",
    # the ONNX parser's verbose trace of each node it imports
    "onnx_import": r"^(?:Static check for parsing node|Parsing node|Searching for input|Registering (?:layer|tensor)|"
    r"Importing initializer|Adding network input|Convolution (?:input|output) dimensions|Original shape|"
    r"Using kernel|\S+ \[\w+\] (?:inputs|outputs): \[)",
    # a verbose dump of the network's graph: `CONVOLUTION name`, `Output 0`, tab-separated dimensions
    "graph_dump": r"^(?:[A-Z][A-Z_]+ \S+|(?:Input|Output) \d+|-?\d+(?:\t-?\d+)*|[A-Z ]+ (?:CHECKS|NODES))$",
    # a tool's banner and command line, and Polygraphy's run bookkeeping
    "banner": r"^(?:&&&&|RUNNING \||PASSED \||FAILED \||Loaded|TensorRT(?:-RTX)? version|\[TensorRT v|Polygraphy|"
    r"onnxrt-runner|trt-runner|Saving (?:inference|outputs|inputs)|Writing|Loading (?:inference|inputs|outputs))",
    # figures a performance or comparison finding read from its first line on (a summary's rows, stats rows)
    "figures": r"^(?:Throughput|Latency|Enqueue Time|H2D Latency|GPU Compute Time|D2H Latency|Total Host Walltime|"
    r"Total GPU Compute Time|Host Latency|GPU Compute|min|max|mean|median|percentile|[-+]?\d[\d.eE+-]*\s*(?:ms|s|qps)"
    r"|Stats:|Error Metrics|Minimum Required|Absolute Difference|Relative Difference|Bin Range|-+ Histogram"
    r"|\(?[-+\d.eE]+\s*,\s*[-+\d.eE]+\)?\s*\|)",
}
CLASSES: dict[str, re.Pattern[str]] = {name: re.compile(rx) for name, rx in _CLASSES.items()}
_LEAD = re.compile(r"^(?:\[[^\]]*\]\s*|\(\d{1,2}:\d\d:\d\d\)\s*)*")


_OPTION_LINE = re.compile(r"^(?:[A-Z][\w ()/.%-]{0,48}|\w+ [Ss]hapes?)\s*:(?:\s|$)")


def noise_class(record: LogRecord) -> str | None:
    """The noise class of an info, verbose or unprefixed record, or None."""
    if record.severity not in (None, "info", "verbose"):
        return None
    text = _LEAD.sub("", record.text.split("\n", 1)[0].strip()).strip()
    if not text:
        return "blank"
    return next((name for name, rx in CLASSES.items() if rx.search(text)), None)


def noise_classes(records: list[LogRecord]) -> dict[int, str]:
    """First line -> noise class of every record in one; the `Key: value` lines right under a trtexec section banner
    (`=== Model Options ===`, `=== Device Information ===`, ...) are `options_echo` until a line of another shape."""
    out: dict[int, str] = {}
    in_section = False
    for r in records:
        name = noise_class(r)
        text = _LEAD.sub("", r.text.split("\n", 1)[0].strip()).strip()
        if name == "options_echo":
            in_section = True
        elif in_section and r.severity in (None, "info", "verbose") and _OPTION_LINE.match(text):
            name = "options_echo"
        elif r.dialect != "blank":
            in_section = False
        if name is not None:
            out[r.first] = name
    return out
