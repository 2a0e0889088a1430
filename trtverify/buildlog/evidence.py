"""The evidence of a finding: its log lines as written (cut sensibly, never silently dropped) and the entities in
them (entities.py).

A line longer than LINE characters keeps its head and tail with `[... N chars ...]` between, cut at a space near
each end and never inside a quoted name; a finding on more than
HEAD + TAIL lines shows its first HEAD and last TAIL lines, with one `... N more lines (a-b)` entry between (the
finding's `lines` keeps every line number). Entities are read from the lines shown (a warning repeated for 300
layers names its layers in the finding's `layers`), so a finding's cost does not grow with its repeats.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from trtverify.buildlog import entities
from trtverify.buildlog.lines import clean_line, match_prefix
from trtverify.util.record import Record

LINE = 320  # characters of one evidence line kept (a GStreamer or glog line with its prefix runs to ~300)
HEAD, TAIL = 3, 2  # lines shown of a finding on many lines


class EvidenceLine(Record):
    """One line of a log, as written; or (line None) the count of the lines left out between the shown ones."""

    line: int | None = Field(description="1-based line number; None on the `... N more lines` entry")
    text: str = Field(description="the line as written (ANSI codes dropped; cut in the middle when long)")


def cut(text: str, limit: int = LINE) -> str:
    """`text` within `limit` characters: head and tail kept, `[... N chars ...]` in the middle."""
    if len(text) <= limit:
        return text
    head = limit - limit // 3 - 20
    tail = len(text) - limit // 3  # where the kept tail starts
    for m in entities.QUOTED.finditer(text):  # a quoted name is kept whole or left out whole
        if m.start() < head < m.end() and m.end() - m.start() <= 120:
            head = m.end() if m.end() < tail - 40 else m.start()
        if m.start() < tail < m.end() and m.end() - m.start() <= 120:
            tail = m.start()
    space = text.rfind(" ", head - 24, head)
    head = space if space > 0 and not _inside_quote(text, space) else head
    space = text.find(" ", tail, tail + 24)
    tail = space + 1 if space > 0 and not _inside_quote(text, space) else tail
    if tail <= head:
        return text
    return f"{text[:head]} [... {tail - head} chars ...] {text[tail:]}"


def _inside_quote(text: str, at: int) -> bool:
    return any(m.start() < at < m.end() for m in entities.QUOTED.finditer(text))


def message(line: str) -> str:
    """A line without its logger prefix (timestamp, severity): what entities are read from."""
    hit = match_prefix(line)
    return hit[2] if hit is not None else line.strip()


def evidence(numbers: tuple[int, ...], lines: Sequence[str]) -> tuple[list[EvidenceLine], dict[str, list[Any]]]:
    """(evidence lines, entities) of a finding on the 1-based `numbers` of a log split into `lines`."""
    valid = [n for n in dict.fromkeys(numbers) if 0 < n <= len(lines)]
    shown = valid if len(valid) <= HEAD + TAIL + 1 else valid[:HEAD] + valid[-TAIL:]
    texts = {n: clean_line(lines[n - 1]) for n in shown}
    out = [EvidenceLine(line=n, text=cut(texts[n])) for n in shown]
    if len(shown) < len(valid):
        left = valid[HEAD:-TAIL]
        out.insert(HEAD, EvidenceLine(line=None, text=f"... {len(left)} more lines ({left[0]}-{left[-1]})"))
    found = entities.extract("\n".join(message(texts[n]) for n in shown))
    return out, found
