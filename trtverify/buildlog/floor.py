"""A floor under every error and warning: each log record its tool marks as an error or a warning (a logger
prefix such as `[E]`, `[W]`, `ERROR:`; or, on a line without one, `ERROR:`, `WARNING:`, `Error[9]:`, an
assertion failure, an abort, a Python traceback's closing line) becomes at least a generic finding, where no
family rule reported it. Records are grouped by message template (numbers, hex, paths and quoted names taken
out), so a warning repeated for 300 layers is one finding with 300 lines and the names in them.

Severity: an error or an abort is `high`; a warning is `info` (reported, never a gate by default: `fail_on:
[log_warning]` makes it one). The tool's own level is in `detail.log_severity`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from trtverify.buildlog import prefixes
from trtverify.buildlog.entities import QUOTED, names
from trtverify.buildlog.findings import Hit
from trtverify.buildlog.lines import LogRecord
from trtverify.util.words import shorten

# on lines without a logger prefix: what marks an error, an abort or a warning, as the tools write them
_ABORT = re.compile(
    r"Assertion [`'\"]?.+[`'\"]? failed|\bassertion failed\b|\bAbort(?:ed)?\b(?: \(core dumped\))?|"
    r"terminate called after throwing|Segmentation fault|core dumped|Fatal Python error|\bCUDA error\b.*: "
    r"|\b[DQ]?CHECK(?:_[A-Z]{2})?\(.*\) failed|\bCheck failed: "  # a glog / absl check: `DCHECK(fc1_ && fc2_) failed`
)
# (a level inside a logger's own brackets: `E onnxruntime: [2024-09-20 12:15:43   ERROR] ...`)
_ERROR = re.compile(
    r"^(?:\S+ )?(?:ERROR|Error|error)(?:\[\d+\])?:|^E\d{4} |\bError\[\d+\]:|^\w*(?:Error|Exception): \S|"
    r"^\[ERROR\]|^(?:FAILED|FAIL)\b|\[[\d/: .-]*\s(?:ERROR|INTERNAL_ERROR)\]|\bError Code:? \d+:"
    # any application's logger: a level word after a time, `level=error` (a bracketed level: _LEVEL_TAG)
    r"|^\S*\d\d:\d\d:\d\d\S*\s+(?:ERROR|FATAL|CRITICAL|error|fatal)\b|\blevel=(?:error|fatal)\b"
    # a status code a library prints with its message: `[SomeRuntimeError] : 1 : FAIL : ...`, `EP_FAIL : ...`
    r"|\[\w*Error\] : \d+ : [A-Z_]+ :|^\w*: \[\w*Error\]|^[A-Z][A-Z0-9]*_?(?:FAIL|ERROR|INVALID|EXCEPTION)\w* : "
)
# a line with no logger that only says it failed, in words: `Failed to build CUDA engine on x.cfg`,
# `Building engine failed`, `... error: something` (`Unable to import ...`, `Could not ...` alone are notices that
# a tool prints and carries on: an event, events.py)
_SAYS_FAILED = re.compile(r"^[Ff]ailed to \w|^[A-Z]\w*(?: \w+){0,4} failed[.!]?$|\b[Ee]rror: [A-Za-z]")
_WARNING = re.compile(
    r"^(?:\S+ )?(?:WARNING|Warning|WARN|warning)(?:\[\d+\])?:|^W\d{4} |^\[WARNING\]|\bUserWarning: |"
    r"\[[\d/: .-]*\sWARNING\]"
    r"|^\S*\d\d:\d\d:\d\d\S*\s+(?:WARN|WARNING|warn|warning)\b|\blevel=warn(?:ing)?\b"
)
# an application logger's level in brackets among the line's first 100 characters: `... [detsvc] [error] ...`
_LEVEL_TAG = re.compile(
    r"\[(?:(?P<e>error|err|ERR|Error|fatal|FATAL|Fatal|critical|CRITICAL)|(?P<w>warn|warning|Warn|Warning|WARN))\]"
)

_TEMPLATE = (
    (QUOTED, "'<name>'"),
    (re.compile(r"(?:/[\w.+-]+){2,}"), "<path>"),
    (re.compile(r"0x[0-9a-fA-F]+"), "<hex>"),
    (re.compile(r"\([A-Z][A-Z0-9_]{2,}\)"), "(<op>)"),  # a layer's type: `'/model.23/Concat_6' (CONCATENATION)`
    (re.compile(r"(?<![A-Za-z0-9.])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"), "<n>"),
)
MESSAGE = 300  # characters of a message kept (cut after a sentence or a word, marked " ...")


def level(record: LogRecord) -> str | None:
    """'error', 'abort' or 'warning' where the record's tool marks it so; else None."""
    if record.severity in ("error", "internal_error"):
        return "abort" if _ABORT.search(record.text) else "error"
    if record.severity == "warning":
        return "warning"
    if record.severity is not None or record.dialect in ("blank", "elision"):
        return None
    said, text = prefixes.split(record.text)  # glog, GStreamer, level-time-source prefixes: their level
    if said in ("error", "warning"):
        return "abort" if _ABORT.search(text) else said
    if said is not None:
        return None
    if _ABORT.search(text):
        return "abort"
    if _ERROR.search(text):
        return "error"
    if _WARNING.search(text):
        return "warning"
    tag = _LEVEL_TAG.search(text, 0, 100) if "[" in text[:100] else None
    if tag:
        return "error" if tag["e"] else "warning"
    if _SAYS_FAILED.search(text):
        return "error"
    return None


def template(text: str) -> str:
    """The message with what varies between repeats taken out: quoted names, names after `layer` / `tensor` /
    `node` ... (entities.names: `Missing scale ... for tensor encoder.layer.2.bias_output`), paths, hex and numbers.
    (Drain's grouping, measured in bench/floor_grouping_drain.py, joined those names; this does it without a miner.)"""
    for name in sorted(names(text), key=len, reverse=True):
        if len(name) > 2:
            text = text.replace(name, "<name>")
    for rx, repl in _TEMPLATE:
        text = rx.sub(repl, text)
    return re.sub(r"\s+", " ", text).strip()[:MESSAGE]


def _marked(records: Iterable[LogRecord]) -> Iterator[tuple[LogRecord, str]]:
    """(record, level) of every marked record; an unmarked record's continuation lines are looked at one by one
    (an abort printed right after a verbose line is joined to it as a wrapped line)."""
    for r in records:
        how = level(r)
        if how is not None:
            yield r, how
            continue
        if r.severity not in (None, "info", "verbose") or r.last == r.first:
            continue
        parts = r.text.split("\n")
        if len(parts) > 1:  # continuation lines kept apart: each is looked at on its own line
            for i, part in enumerate(parts[1:], 1):
                line = LogRecord(r.first + i, r.first + i, "unknown", None, part)
                how = level(line)
                if how is not None:
                    yield line, how
        elif _ABORT.search(r.text):  # wrapped lines joined into one text: an abort in them, on its last line
            yield LogRecord(r.last, r.last, "unknown", None, r.text), "abort"


def hits(records: Iterable[LogRecord], covered: set[int]) -> Iterator[Hit]:
    """A generic hit for each marked record none of whose lines a rule reported (`covered`: reported lines)."""
    for r, how in _marked(records):
        if any(line in covered for line in range(r.first, r.last + 1)):
            continue
        text = prefixes.split(r.text)[1] if r.severity is None else r.text.strip()
        shape = template(text)
        kind = "log_warning" if how == "warning" else "log_error"
        yield Hit(
            kind=kind,
            category="build",
            severity="info" if how == "warning" else "high",
            message=shorten(text, MESSAGE),
            line=r.first,
            layers=tuple(names(text)[:8]),
            detail={"log_severity": how, "template": shape},
            key=f"{kind}:{shape}",
        )
