"""Helpers shared by the tool-console rules (trtverify/buildlog/tools/): the record's first line with a Python
logger's name taken off, durations and sizes as the tools print them."""

from __future__ import annotations

import re

from trtverify.buildlog.lines import LogRecord

# what another logger may leave before a message (a Python `logging` name, a `[file.py:N]`, a time)
_LEAD = re.compile(r"^(?:\[[\w./:-]+\.py:\d+\]\s*|\(\d{1,2}:\d\d:\d\d\)\s*|\[MemUsageStats\]\s*)+")


def first_line(r: LogRecord) -> str:
    return _LEAD.sub("", r.text.split("\n", 1)[0].strip())


def lines_of(r: LogRecord) -> list[tuple[int, str]]:
    """(physical line, text) of each line of a record; a record's continuation lines follow its first."""
    return [(min(r.first + i, r.last), part.strip()) for i, part in enumerate(r.text.split("\n"))]


_HMS = re.compile(r"(?:(?P<d>\d+) days?, )?(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+(?:\.\d+)?)")


def hms_seconds(text: str) -> float | None:
    """`00:01:47`, `0:00:00.821156`, `1 day, 2:03:04` -> seconds."""
    m = _HMS.fullmatch(text.strip())
    if not m:
        return None
    return int(m["d"] or 0) * 86400 + int(m["h"] or 0) * 3600 + int(m["m"]) * 60 + float(m["s"])


_UNITS = {"b": 1, "bytes": 1, "byte": 1, "kb": 1e3, "kib": 1024, "mb": 1e6, "mib": 1 << 20, "gb": 1e9,
          "gib": 1 << 30, "tb": 1e12, "tib": 1 << 40}  # fmt: skip


def to_bytes(number: str, unit: str | None) -> int:
    """A size as printed (`2.00 GiB`, `4229MB`, `1073741824 bytes`) in bytes; TensorRT's `MB` is MiB."""
    u = (unit or "bytes").lower()
    scale = _UNITS.get(u, 1)
    if u == "mb":
        scale = 1 << 20  # TensorRT and TensorRT-LLM print MiB figures as MB
    return int(float(number) * scale)
