"""The settings a log states, in the generic forms any program prints them (no tool's rules): `key: value`,
`key = value` / `key=value`, a command line's `--flag value` / `--flag=value` / `-f value`, `Set key to value`,
a table row `| key | value |`, a JSON member `"key": value`, and a count in brackets after its words
(`max tokens in paged KV cache (3731744)`). Each is (key, value as written, line); the first SETTINGS distinct
pairs are kept and the rest counted, so a verbose log cannot make the context explode.

The key is the words before the separator (at most KEY_WORDS of them, an identifier's characters), so
`Number of blocks in KV cache primary pool: 17210` keeps `blocks in KV cache primary pool`; a value stops at
`,` `;` `|` or the line's end, a quoted value is kept whole, and a value is cut at VALUE characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from trtverify.buildlog import prefixes
from trtverify.buildlog.lines import LogRecord

SETTINGS = 60  # (key, value) pairs kept per log; the rest counted in the context's left_out
KEY_WORDS = 6
VALUE = 160  # characters of a value kept
TRACE = 3  # a key (its digits aside) stated with more values than this is a trace, not a setting

_FIRST = re.compile(r"[A-Za-z_][\w.\[\]{}()/<>-]*$")  # a key's first word: `model_repository_path[0]`, `cmdline{0}`
_LATER = re.compile(r"[\w.\[\]()-]+")  # its other words
_GROUP = r"\[[^\]\n]{0,200}\]|\([^)\n]{0,200}\)|\{[^}\n]{0,200}\}"  # kept whole: `[1, 3, 224, 224]`
_VAL = rf"(?P<v>\"[^\"\n]*\"|'[^'\n]*'|(?:{_GROUP}|[^\s,;|'\"\[({{])(?:{_GROUP}|[^,;|\n\[({{])*?)"
_END = r"(?=\s*(?:[,;|]|\*\*|$)|\s+[\w.-]+=[^=\s]|\s+[A-Za-z_][\w.-]*:\s)"  # or the next `key=` / `key: `
# matched at the end of a key (the words before a separator are found by _key, not by a regex tried everywhere)
_COLON = re.compile(rf"\s?:[ \t]+(?![\\/]|[\w.-]+ ?=[^=]){_VAL}{_END}")
_EQUALS = re.compile(rf"\s*=\s*(?!=){_VAL}{_END}")
_COUNT = re.compile(r" \((?P<v>\d+)\)")
_FLAG = re.compile(r"(?:^|\s)(?P<k>--[A-Za-z][\w-]*|-[A-Za-z])(?:=|\s+)(?P<v>\"[^\"]*\"|'[^']*'|[^\s\"'-]\S*)")
_SET = re.compile(r"\b[Ss]et(?:ting)? (?P<k>[\w.-]+) to (?P<v>[^\s,;]+?)\.?(?=[\s,;]|$)")
_JSON = re.compile(r"\"(?P<k>[\w.-]{1,60})\"\s*:\s*(?P<v>\"[^\"\n]{0,160}\"|-?[\d.]+(?:[eE][+-]?\d+)?|true|false|null)")
_TABLE_RULE = re.compile(r"^\+[-=+]+\+$")
_DIGITS = re.compile(r"\d+")
_LEADING = re.compile(r"^(?:(?:of|in|on|for|to|the|a|an|and|with|from|at|by|is|are)\s+)+")  # `of blocks in ...`


def _value(v: str) -> str:
    v = v.strip().rstrip(".")
    return v if len(v) <= VALUE else v[: VALUE - 4] + " ..."


def _key(body: str, end: int, after: int) -> int | None:
    """Where the key ending at `end` starts: the most words before it (at most KEY_WORDS, none before `after`)
    that are an identifier's characters, the first from a letter on; None where there are none."""
    lo = max(after, end - 200)
    words = body[lo:end].split(" ")[-KEY_WORDS:]
    start = None
    at = end
    for i in range(len(words) - 1, -1, -1):
        w = words[i]
        at -= len(w)
        tail = _FIRST.search(w)
        if tail is not None and "]" in tail[0] and "[" not in tail[0]:  # `[MemUsageChange] ...`: a tag, not a key
            tail = _FIRST.search(w, at - at + w.rfind("]") + 1)
        if tail is not None:
            start = at + tail.start()
        if not _LATER.fullmatch(w):
            break
        at -= 1  # the space before it
    return start


def _separated(body: str, sep: str, rx: re.Pattern[str]) -> Iterator[tuple[str, str, str]]:
    """(key, value, as written) of each `key SEP value` in `body`, left to right, none overlapping."""
    last = 0
    i = body.find(sep)
    while i >= 0:
        if sep == ":" and body[i + 1 : i + 2] not in (" ", "\t"):
            i = body.find(sep, i + 1)
            continue
        end = i
        while end > last and body[end - 1] in " \t" and (sep != ":" or end == i):
            end -= 1  # `key : value` (one space), `key = value` (any)
        start = _key(body, end, last) if end > last else None
        m = rx.match(body, end) if start is not None else None
        if start is None or m is None or (sep == ":" and m["v"].startswith("//")):  # not a URL's scheme
            i = body.find(sep, i + 1)
            continue
        key = body[start:end]
        short = _LEADING.sub("", key) or key
        yield short, m["v"], body[start + len(key) - len(short) : m.end("v")]
        last = m.end()
        i = body.find(sep, last)


def _pairs(body: str) -> Iterator[tuple[str, str, str]]:
    """(key, value, the pair as written) of one message."""
    if body.startswith("|") and body.count("|") >= 3:  # a table row: the first cell names, the others are its values
        cells = [c.strip() for c in body.strip().strip("|").split("|")]
        if cells and cells[0] and any(cells[1:]) and not _TABLE_RULE.match(body):
            value = " | ".join(c for c in cells[1:] if c)
            yield cells[0], value, f"| {cells[0]} | {value} |"
        return
    found = []
    if " -" in body or body.startswith("-"):
        found += _FLAG.finditer(body)
    if "et " in body:
        found += _SET.finditer(body)
    if '"' in body:
        found += _JSON.finditer(body)
    for m in found:
        key = m["k"].strip()
        key = _LEADING.sub("", key) or key
        start = m.start("k") + m["k"].find(key) if m.re is not _SET else m.start()
        yield key, m["v"], body[start : m.end("v")]
    if ": " in body or ":\t" in body:
        yield from _separated(body, ":", _COLON)
    if "=" in body:
        yield from _separated(body, "=", _EQUALS)
    if " (" in body:
        for m in _COUNT.finditer(body):
            start = _key(body, m.start(), 0)
            if start is not None:
                key = body[start : m.start()]
                short = _LEADING.sub("", key) or key
                yield short, m["v"], body[start + len(key) - len(short) : m.end()]


def _header(records: list[LogRecord], n: int) -> bool:
    """A table's header row: between its top rule line (`+----+----+`, no row above it) and the next rule."""
    if not records[n].text.startswith("|") or n == 0 or n + 1 >= len(records):
        return False
    top = n < 2 or not records[n - 2].text.startswith("|")
    return bool(top and _TABLE_RULE.match(records[n - 1].text) and _TABLE_RULE.match(records[n + 1].text))


def scan(records: Iterable[LogRecord]) -> tuple[list[tuple[str, str, str, int]], int]:
    """([(key, value, the pair as written, 1-based line)] of the first SETTINGS distinct pairs, how many more were
    stated).

    Verbose records are skipped (a builder's trace, not its settings), and so is a key whose words, digits aside,
    come back with more than TRACE values (`Importing initializer: onnx::Conv_193`, one per weight): a trace
    again. Table rows are kept whatever they repeat."""
    first: dict[tuple[str, str], tuple[str, int]] = {}  # (key, value) -> (as written, line), in the order stated
    values: dict[str, int] = {}  # key with its digits taken out -> distinct values seen
    rows: set[tuple[str, str]] = set()
    records = list(records)
    for n, r in enumerate(records):
        if r.severity == "verbose" or r.dialect in ("blank", "elision") or _header(records, n):
            continue
        for i, line in enumerate(r.text.split("\n")):
            if r.severity is None and i == 0:
                line = prefixes.split(line)[1]
            for k, v, written in _pairs(line.strip()):
                pair = (k, _value(v))
                if not pair[1] or pair in first:
                    continue
                first[pair] = (_value(written), r.first + i)
                shape = _DIGITS.sub("0", pair[0])
                values[shape] = values.get(shape, 0) + 1
                if line.lstrip().startswith("|"):
                    rows.add(pair)
    kept = [
        (k, v, w, no) for (k, v), (w, no) in first.items() if (k, v) in rows or values[_DIGITS.sub("0", k)] <= TRACE
    ]
    return kept[:SETTINGS], max(0, len(kept) - SETTINGS) + len(first) - len(kept)
