"""Logger prefixes that no dialect of lines.py names, read generically: the level they state and the message after
them. Any program may log through these libraries, so they are formats, not tools:

- glog / absl (C++ servers and backends): `I0829 03:48:41.018076 1161 file.cc:46] message`, also pasted with a
  list marker or bold markers before it (`* E0530 ...`, `**I0530 ...`);
- GStreamer's debug log (any GStreamer element): `0:00:04.959025154 20780 0x7f4c0022d0 WARN  category
  file.c:635:function:<object> message`;
- a level word, then a time, then `file:line]`: `WARNING 2026-09-01 10:06:30.900 file.py:25] message`;
- Python logging's dashed format: `2022-03-05 23:28:34,549 - name - ERROR - message`;
- an application's own: a time, then bracketed tags, one its level: `2026-11-20 09:15:48.015 [svc] [error] message`.

`split(line)` returns (level, message) with level one of error | warning | info | verbose, or None where the line
carries none of these prefixes (the message is then the line, stripped).
"""

from __future__ import annotations

import re

_GLOG = re.compile(r"^[*\s]*(?P<sev>[IWEF])\d{4} \d\d:\d\d:\d\d(?:\.\d+)?\s+\d+ [\w./-]+:\d+\]\s?")
_GST = re.compile(
    r"^[*\s]*\d+:\d\d:\d\d\.\d+\s+\d+\s+0x[0-9a-fA-F]+\s+(?P<sev>ERROR|WARN|FIXME|INFO|DEBUG|LOG|TRACE|MEMDUMP)\s+"
    r"\S+\s+[\w./-]+:\d+:[^:\s]*:(?:<[^>]*>)?\s?"
)
_LEVEL_TIME = re.compile(
    r"^(?P<sev>ERROR|WARNING|WARN|INFO|DEBUG|CRITICAL|FATAL)\s+\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\s+"
    r"(?:[\w./-]+:\d+\]\s?)?"
)
# Python logging's `%(asctime)s - %(name)s - %(levelname)s - `: `2022-03-05 23:28:34,549 - mmdeploy - ERROR - `
_DASHED = re.compile(r"^\d[\d/:., -]{6,30}? - [\w.\[\]-]+ - (?P<sev>ERROR|WARNING|WARN|INFO|DEBUG|CRITICAL|FATAL) - ")
# an application's own logger: a time, bracketed tags, one its level: `2026-11-20 09:15:48.015 [svc] [error] `
_STAMPED = re.compile(
    r"^\[?\d{4}[-/]\d\d[-/]\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\]?\s+(?P<tags>(?:\[[^\]\s]{1,30}\]\s*)+)"
)
_TAG_LEVEL = re.compile(r"\[(?P<sev>error|err|fatal|critical|warn|warning|info|debug|trace|verbose)\]", re.I)
_LEVEL = {
    "I": "info", "W": "warning", "E": "error", "F": "error", "ERROR": "error", "WARN": "warning",
    "FIXME": "warning", "INFO": "info", "DEBUG": "verbose", "LOG": "verbose", "TRACE": "verbose",
    "MEMDUMP": "verbose", "WARNING": "warning", "CRITICAL": "error", "FATAL": "error", "ERR": "error",
    "VERBOSE": "verbose",
}  # fmt: skip


def opens_record(line: str) -> bool:
    """The line opens with a glog or GStreamer prefix: a new message, never the wrapped end of the one before."""
    return bool(line[:1] in "IWEF*0123456789" and (_GLOG.match(line) or _GST.match(line)))


def split(line: str) -> tuple[str | None, str]:
    """(level, message) of a line that opens with one of the prefixes above; (None, the line stripped) otherwise."""
    text = line.strip()
    if not text:
        return None, text
    head = text[:2]
    if head[0] in "IWEF*" or head[0].isdigit():
        for rx in (_GLOG, _GST, _DASHED):
            m = rx.match(text)
            if m:
                msg = text[m.end() :].strip().strip("*").strip()
                if len(msg) > 1 and msg[0] == msg[-1] == '"':  # newer servers quote the whole message
                    msg = msg[1:-1]
                return _LEVEL[m["sev"]], msg
    if head[0] in "EWIDCF":
        m = _LEVEL_TIME.match(text)
        if m:
            return _LEVEL[m["sev"]], text[m.end() :].strip()
    if head[0].isdigit() or head == "[2" or head == "[1":
        m = _STAMPED.match(text)
        tag = _TAG_LEVEL.search(m["tags"]) if m else None
        if m and tag:
            return _LEVEL[tag["sev"].upper()], text[m.end() :].strip()
    return None, text
