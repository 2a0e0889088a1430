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

_W = r"[A-Za-z_][\w.\[\]{}()/<>-]*"  # a key's first word: an identifier, `model_repository_path[0]`, `cmdline{0}`
_KEY = rf"(?P<k>{_W}(?: [\w.\[\]()-]+){{0,{KEY_WORDS - 1}}})"
_GROUP = r"\[[^\]\n]{0,200}\]|\([^)\n]{0,200}\)|\{[^}\n]{0,200}\}"  # kept whole: `[1, 3, 224, 224]`
_VAL = rf"(?P<v>\"[^\"\n]*\"|'[^'\n]*'|(?:{_GROUP}|[^\s,;|'\"\[({{])(?:{_GROUP}|[^,;|\n\[({{])*?)"
_END = r"(?=\s*(?:[,;|]|\*\*|$)|\s+[\w.-]+=[^=\s]|\s+[A-Za-z_][\w.-]*:\s)"  # or the next `key=` / `key: `
_COLON = re.compile(rf"{_KEY}\s?:[ \t]+(?![\\/]|[\w.-]+ ?=[^=]){_VAL}{_END}")
_EQUALS = re.compile(rf"{_KEY}\s*=\s*(?!=){_VAL}{_END}")
_FLAG = re.compile(r"(?:^|\s)(?P<k>--[A-Za-z][\w-]*|-[A-Za-z])(?:=|\s+)(?P<v>\"[^\"]*\"|'[^']*'|[^\s\"'-]\S*)")
_SET = re.compile(r"\b[Ss]et(?:ting)? (?P<k>[\w.-]+) to (?P<v>[^\s,;]+?)\.?(?=[\s,;]|$)")
_JSON = re.compile(r"\"(?P<k>[\w.-]{1,60})\"\s*:\s*(?P<v>\"[^\"\n]{0,160}\"|-?[\d.]+(?:[eE][+-]?\d+)?|true|false|null)")
_COUNT = re.compile(rf"(?P<k>{_W}(?: [\w.-]+){{0,{KEY_WORDS - 1}}}) \((?P<v>\d+)\)")
_TABLE_RULE = re.compile(r"^\+[-=+]+\+$")
_DIGITS = re.compile(r"\d+")
_LEADING = re.compile(r"^(?:(?:of|in|on|for|to|the|a|an|and|with|from|at|by|is|are)\s+)+")  # `of blocks in ...`


def _value(v: str) -> str:
    v = v.strip().rstrip(".")
    return v if len(v) <= VALUE else v[: VALUE - 4] + " ..."


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
    if "et" in body:
        found += _SET.finditer(body)
    if '"' in body:
        found += _JSON.finditer(body)
    if ":" in body:
        found += (m for m in _COLON.finditer(body) if not m["v"].startswith("//"))  # not a URL's scheme
    if "=" in body:
        found += _EQUALS.finditer(body)
    if "(" in body:
        found += _COUNT.finditer(body)
    for m in found:
        key = m["k"].strip()
        key = _LEADING.sub("", key) or key
        start = m.start("k") + m["k"].find(key) if m.re is not _SET else m.start()
        yield key, m["v"], body[start : m.end("v")]


def scan(records: Iterable[LogRecord]) -> tuple[list[tuple[str, str, str, int]], int]:
    """([(key, value, the pair as written, 1-based line)] of the first SETTINGS distinct pairs, how many more were
    stated).

    Verbose records are skipped (a builder's trace, not its settings), and so is a key whose words, digits aside,
    come back with more than TRACE values (`Importing initializer: onnx::Conv_193`, one per weight): a trace
    again. Table rows are kept whatever they repeat."""
    first: dict[tuple[str, str], tuple[str, int]] = {}  # (key, value) -> (as written, line), in the order stated
    values: dict[str, int] = {}  # key with its digits taken out -> distinct values seen
    rows: set[tuple[str, str]] = set()
    for r in records:
        if r.severity == "verbose" or r.dialect in ("blank", "elision"):
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
