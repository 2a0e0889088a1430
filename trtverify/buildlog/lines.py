"""Split a TensorRT build log into records: one logger message each.

Every physical line is matched against DIALECTS (one table of prefix regexes); a line that
opens with a known prefix starts a record, an indented or terminal-wrapped line with no
prefix continues the record before it, `...` elisions stand alone, and anything else is an
"unknown" record (kept and counted). ANSI escapes, carriage returns and trailing spaces are
dropped first. Nothing here raises on any input text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from trtverify.buildlog import prefixes

SEVERITIES = ("verbose", "info", "warning", "error", "internal_error")

_SEV_WORDS = {
    "V": "verbose",
    "X": "verbose",
    "!": "internal_error",
    "VERBOSE": "verbose",
    "DEBUG": "verbose",
    "GRAPH": "verbose",
    "D": "verbose",
    "I": "info",
    "INFO": "info",
    "W": "warning",
    "WARNING": "warning",
    "WARN": "warning",
    "E": "error",
    "ERROR": "error",
    "F": "internal_error",
    "INTERNAL_ERROR": "internal_error",
    "INTERNAL ERROR": "internal_error",
}

_TS = r"\[\d{1,2}/\d{1,2}/\d{4}-\d{1,2}:\d{2}:\d{2}\]"
_SEVW = r"VERBOSE|INFO|WARNING|WARN|ERROR|INTERNAL_ERROR|INTERNAL ERROR|DEBUG"

# (dialect, regex): the regex must match at the start of the (left-stripped) line and have a
# group named "sev"; the message is what follows the match. First match wins.
DIALECTS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(rx))
    for name, rx in [
        (
            "onnxruntime",
            r"(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ )?\[(?P<sev>[VIWEF]):onnxruntime:[^\]]*\]\s*"
            r"(?:\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (?P<sev2>" + _SEVW + r")\]\s*)?",
        ),
        (
            "tftrt",
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: (?P<sev>[VIWEF]) (?:[\w./-]+:\d+\] )"
            r"(?:DefaultLogger |TF-TRT Warning: |TensorRT: )?",
        ),
        # TensorRT-LLM's Python logger (`[TRT-LLM] [I] `, `[TRT-LLM] [rank0] [W] `) and C++ runtime
        # (`[TensorRT-LLM][ERROR] `, `[TensorRT-LLM][INFO] `)
        ("trtllm", r"(?:" + _TS + r" )?\[TRT-LLM\](?:\s*\[[^\]]*\])*?\s*\[(?P<sev>[VIWEF])\]\s"),
        ("trtllm", r"(?:" + _TS + r" )?\[TensorRT-LLM\](?:\[[^\]]*\])*?\[(?P<sev>" + _SEVW + r")\]\s?"),
        # ModelOpt's ONNX console (`2026-11-27 01:54:47,277 - [modelopt][onnx] - INFO - `)
        # (the time may be missing: modelopt/onnx/logging_config.py prints its own fallback lines without one)
        (
            "modelopt",
            r"(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ - )?\[modelopt\](?:\[[\w.]+\])? - (?P<sev>" + _SEVW + r") - ",
        ),
        ("modelopt", r"(?P<sev>" + _SEVW + r"):modelopt[\w.]*:"),  # Python logging's default format
        ("trtexec", _TS + r" \[(?P<sev>[VIWEF])\] (?:\[TRT\] )?"),
        # an application's Python logging around TensorRT (`[2025-10-28 12:21:44] [rtx_demo.utils.engine] [INFO] `)
        ("pylogging", r"\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\] \[[\w.-]+\] \[(?P<sev>" + _SEVW + r")\] "),
        ("python", r"(?:" + _TS + r" )?\[TRT\] \[(?P<sev>[VIWEF])\] "),
        ("python", r"\[TensorRT\] (?P<sev>" + _SEVW + r"): "),
        ("trtexec", r"\[(?P<sev>[VIWEF])\] \[TRT\] "),
        # jetson-inference's tensorNet (`#define LOG_TRT "[TRT]    "`): TensorRT's messages, severity in colour only
        ("jetson", r"\[TRT\] {2,}(?P<sev>)(?=\S)"),
        ("polygraphy", r"\[(?P<sev>[VIWEFX!])\] "),
        ("deepstream", r"(?P<sev>" + _SEVW + r"): \[TRT\]:? "),
        ("torch_tensorrt", r"(?P<sev>" + _SEVW + r"|GRAPH): \[Torch-TensorRT[^\]]*\] - "),
        ("torch_tensorrt", r"(?P<sev>" + _SEVW + r"):torch_tensorrt[\w.]*(?: \[[^\]]*\])?:"),
        ("rtx", r"\[(?P<sev>" + _SEVW + r")\] "),
        ("plain", r"(?P<sev>" + _SEVW + r"): "),
    ]
)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Za-z0-9]|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c\x1d\x1f\x7f]")
_ELISION = re.compile(r"^\s*(?:\.\.\.+|…|\[\.\.\.\])\s*(?:more|\(?truncated\)?|omitted)?\s*\.*$", re.I)
# An unprefixed line that starts a new structured item rather than continuing the last one.
_ITEM_START = re.compile(r"^(?:Layer\(|Name: |-{3,}|\*{3,}|={3,}|>{3,}|Tactic|Fastest|&&&&)")
_ONNX_ERROR_CODE = re.compile(r"^\[\d{1,2}\] \S")
_WRAP_WIDTHS = frozenset({80, 100, 120, 128, 132, 150, 160, 180, 200, 220, 240, 250, 256})


@dataclass(frozen=True)
class LogRecord:
    """One logger message. `first`/`last` are 1-based physical line numbers."""

    first: int
    last: int
    dialect: str  # a DIALECTS name, "unknown", "elision" or "blank"
    severity: str | None  # one of SEVERITIES, None where the line carries none
    text: str


def clean_line(line: str) -> str:
    return _ANSI.sub("", line).replace("\r", "").rstrip()


def match_prefix(line: str) -> tuple[str, str | None, str] | None:
    """(dialect, severity, message) of a line that opens with a known logger prefix."""
    body = line.lstrip()
    for name, rx in DIALECTS:
        m = rx.match(body)
        if m:
            groups = m.groupdict()
            word = groups.get("sev2") or groups.get("sev") or ""
            msg = body[m.end() :]
            if msg.startswith("[TRT] "):
                msg = msg[6:]
            return name, _SEV_WORDS.get(word.upper()), msg.strip()
    return None


def _is_wrap(prev_raw: str, line: str) -> bool:
    """A terminal or paste wrap: the last line broke mid-token and this one carries on."""
    if not prev_raw or not line or line[0].isspace() or _ITEM_START.match(line) or prefixes.opens_record(line):
        return False
    if len(prev_raw) in _WRAP_WIDTHS and not prev_raw.endswith((".", ":")):
        return True
    return len(prev_raw) >= 200 and prev_raw[-1].isalnum() and (line[0].islower() or line[0].isdigit())


def split_records(text: str) -> list[LogRecord]:
    records: list[LogRecord] = []
    cur: dict[str, Any] | None = None  # the open record: continuations join it
    prev_raw = ""

    def close() -> None:
        nonlocal cur
        if cur is not None:
            records.append(LogRecord(cur["first"], cur["last"], cur["dialect"], cur["severity"], cur["text"]))
        cur = None

    for no, raw in enumerate(text.split("\n"), start=1):
        line = clean_line(raw)
        if not line.strip():
            close()
            records.append(LogRecord(no, no, "blank", None, ""))
            prev_raw = ""
            continue
        if _ELISION.match(line):
            close()
            records.append(LogRecord(no, no, "elision", None, line.strip()))
            prev_raw = ""
            continue
        hit = match_prefix(line)
        if hit is not None:
            close()
            dialect, sev, msg = hit
            cur = {"first": no, "last": no, "dialect": dialect, "severity": sev, "text": msg}
        elif cur is not None and (line[0].isspace() and not _ITEM_START.match(line.lstrip())):
            cur["text"] += "\n" + line.strip()
            cur["last"] = no
        elif cur is not None and _ONNX_ERROR_CODE.match(line) and cur["text"].rstrip().endswith(":"):
            cur["text"] += "\n" + line.strip()  # onnx-tensorrt: `ERROR: file:N In function f:` then `[8] what`
            cur["last"] = no
        elif cur is not None and _is_wrap(prev_raw, line):
            cur["text"] += line
            cur["last"] = no
        else:
            close()
            cur = {"first": no, "last": no, "dialect": "unknown", "severity": None, "text": line.strip()}
        prev_raw = line
    close()
    _settle_bare_letters(records)
    return records


def _settle_bare_letters(records: list[LogRecord]) -> None:
    """Bare `[I] ...` lines are trtexec / C++ sample app lines when the log also holds
    `[I] [TRT]` lines or trtexec's `RUNNING TensorRT.trtexec` banner; they are Polygraphy's own only otherwise."""
    banner = any(r.text.startswith(("&&&& RUNNING TensorRT.trtexec", "RUNNING TensorRT.trtexec")) for r in records[:50])
    if banner or any(r.dialect == "trtexec" for r in records):
        for i, r in enumerate(records):
            if r.dialect == "polygraphy":
                records[i] = LogRecord(r.first, r.last, "trtexec", r.severity, r.text)
