"""A JSON reader for captures of several GB: one pass over the file that keeps its structure and leaves its bulk where
it is.

`skeleton(path)` parses the file in chunks of 1 MiB. Objects, keys, small values and short lists become what
`json.load` makes of them; a string or a list of numbers (or booleans) longer than INLINE_MAX bytes (a Polygraphy
array's base64, trtexec's or KServe's values) becomes a `Span`: its place in the file, read back when asked for
(`Span.text()`, `numbers(span, dtype)`), one at a time. So reading a capture holds its structure and at most one
chunk; a tensor costs memory only while it is decoded. trtexec writes non-finite floats bare (nan, -nan, inf, -inf,
as C++ streams print them): they are read too.

A file that is not JSON raises `StreamError` with what json would say (message, line, column) and whether the file
ended early (`truncated`).
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

INLINE_MAX = 4096  # bytes: a longer string or list of numbers stays in the file (a Span)
CHUNK = 1 << 20  # bytes read at once
NUMBERS_CHUNK = 8 << 20  # bytes of a number list converted at once
MAX_DEPTH = 200
BARE = re.compile(rb"(?<![\w\"])(-?)(nan|inf|infinity)(?![\w\"])", re.IGNORECASE)
_NUMBER = re.compile(rb"-?(?:0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)?")
_WORDS = {b"true": True, b"false": False, b"null": None, b"NaN": float("nan"), b"Infinity": float("inf")}
_BARE_WORD = re.compile(rb"-?(nan|inf|infinity)(?![\w])", re.IGNORECASE)
_LIST_STOP = re.compile(rb'[\[\]"{}]')
_WS = b" \t\r\n"
_FLATTEN = bytes.maketrans(b"[]", b"  ")  # nested lists: row-major order, brackets as blanks


class StreamError(ValueError):
    def __init__(self, msg: str, pos: int, truncated: bool):
        super().__init__(msg)
        self.msg, self.pos, self.truncated = msg, pos, truncated
        self.lineno, self.colno = 1, pos + 1

    def locate(self, path: Path) -> StreamError:
        """Line and column of `pos`, counted in one more pass over the file."""
        line, last_nl, done = 1, -1, 0
        with open(path, "rb") as f:
            while done < self.pos:
                block = f.read(min(CHUNK, self.pos - done))
                if not block:
                    break
                line += block.count(b"\n")
                nl = block.rfind(b"\n")
                if nl >= 0:
                    last_nl = done + nl
                done += len(block)
        self.lineno, self.colno = line, self.pos - last_nl
        return self


@dataclass(frozen=True)
class Span:
    """A value left in the file: bytes [offset, offset + length) of `path`, a string (with its quotes) or a list of
    numbers (with its brackets)."""

    path: Path
    offset: int
    length: int

    def raw(self) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read(self.length)
        if len(data) != self.length:
            raise StreamError("the file changed since it was read", self.offset + len(data), True)
        return data

    def text(self) -> bytes:
        """A string span's content as bytes; escapes resolved (json) only where the file has any."""
        data = self.raw()
        if b"\\" not in data:
            return data[1:-1]
        try:
            return json.loads(data).encode("utf-8", "surrogatepass")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise StreamError(f"a bad string ({exc})", self.offset, False) from None


def numbers(value: Any, dtype: str) -> np.ndarray:
    """A list of numbers (a Python list, or a Span of one, nested lists flattened in row-major order) as an array of
    `dtype`. A Span of floats is converted chunk by chunk, never as Python floats; a Span of integers or booleans is
    parsed by json, that one list alone. ValueError/TypeError when the list holds other things than numbers."""
    if not isinstance(value, Span):
        return np.asarray(value, dtype=dtype)
    if np.dtype(dtype).kind != "f":
        return np.asarray(_loads(value.raw()), dtype=dtype).reshape(-1)
    try:
        return _float_span(value, dtype)
    except ValueError:
        if b"[" not in value.raw()[1:]:
            raise
        return np.asarray(_loads(value.raw()), dtype=dtype).reshape(-1)  # nested with empty lists: json says


def _float_span(value: Span, dtype: str) -> np.ndarray:
    parts: list[np.ndarray] = []
    with open(value.path, "rb") as f:
        f.seek(value.offset + 1)
        left, carry = value.length - 2, b""  # the bytes between the outer brackets
        while left > 0:
            block = f.read(min(left, NUMBERS_CHUNK))
            if not block:
                raise ValueError("the file ended inside the list")
            left -= len(block)
            data = (carry + block).translate(_FLATTEN)
            if left > 0:  # up to the last comma now, the rest with the next block
                cut = data.rfind(b",")
                if cut < 0:
                    carry = data
                    continue
                data, carry = data[:cut], data[cut + 1 :]
            elif not parts and not data.strip(_WS):
                break  # an empty list
            parts.append(_floats(data.split(b",")))
    flat = np.concatenate(parts) if parts else np.zeros(0, np.float64)
    if np.dtype(dtype) == flat.dtype:
        return flat
    with np.errstate(over="ignore"):  # a value beyond the stated type's range is inf there, as the tool computed it
        return flat.astype(dtype)


def _floats(items: list[bytes]) -> np.ndarray:
    longest = max(map(len, items))
    if longest > 64:
        raise ValueError(f"an item of {longest} characters is not a number")
    return np.array(items, dtype=bytes).astype(np.float64)


def _loads(data: bytes) -> Any:
    try:
        return json.loads(BARE.sub(lambda m: b"NaN" if m.group(2).lower() == b"nan" else m.group(1) + b"Infinity",
                                   data))  # fmt: skip
    except json.JSONDecodeError as exc:
        raise ValueError(f"not a list of numbers ({exc.msg})") from None
    except RecursionError:
        raise ValueError("lists nested too deep") from None


class _Parser:
    def __init__(self, path: Path, f: IO[bytes], inline_max: int):
        self.path, self.f, self.inline_max = path, f, inline_max
        self.data, self.start, self.eof = b"", 0, False

    def more(self, keep: int) -> bool:
        """Read the next chunk, keeping the bytes from offset `keep` on."""
        if self.eof:
            return False
        block = self.f.read(CHUNK)
        if not block:
            self.eof = True
            return False
        cut = min(max(0, keep - self.start), len(self.data))
        self.data = self.data[cut:] + block
        self.start += cut
        return True

    def at(self, pos: int, ahead: int = 1) -> bytes:
        """The bytes at pos (up to `ahead` of them, fewer at the end of the file); bytes before pos may be dropped."""
        while pos + ahead > self.start + len(self.data) and self.more(pos):
            pass
        return self.data[pos - self.start : pos - self.start + ahead]

    def skip_ws(self, pos: int, keep: int | None = None) -> int:
        """The first non-blank offset from pos on; bytes before it (before `keep`, if given) may be dropped."""
        while True:
            rel = pos - self.start
            while rel < len(self.data) and self.data[rel] in _WS:
                rel += 1
            pos = self.start + rel
            if rel < len(self.data) or not self.more(pos if keep is None else keep):
                return pos

    def fail(self, msg: str, pos: int) -> StreamError:
        return StreamError(msg, pos, self.eof and pos >= self.start + len(self.data))

    def value(self, pos: int, depth: int = 0) -> tuple[Any, int]:
        pos = self.skip_ws(pos)
        c = self.at(pos)
        if not c:
            raise self.fail("Expecting value", pos)
        if depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH}", pos)
        if c == b"{":
            return self.obj(pos, depth)
        if c == b"[":
            got = self.number_list(pos)
            return got if got is not None else self.array(pos, depth)
        if c == b'"':
            return self.string(pos)
        return self.scalar(pos)

    def obj(self, pos: int, depth: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        pos = self.skip_ws(pos + 1)
        if self.at(pos) == b"}":
            return out, pos + 1
        while True:
            if self.at(pos) != b'"':
                raise self.fail("Expecting property name enclosed in double quotes", pos)
            key, pos = self.string(pos, inline=True)
            pos = self.skip_ws(pos)
            if self.at(pos) != b":":
                raise self.fail("Expecting ':' delimiter", pos)
            out[key], pos = self.value(pos + 1, depth + 1)
            pos = self.skip_ws(pos)
            c = self.at(pos)
            if c == b"}":
                return out, pos + 1
            if c != b",":
                raise self.fail("Expecting ',' delimiter", pos)
            pos = self.skip_ws(pos + 1)

    def array(self, pos: int, depth: int) -> tuple[list[Any], int]:
        out: list[Any] = []
        pos = self.skip_ws(pos + 1)
        if self.at(pos) == b"]":
            return out, pos + 1
        while True:
            item, pos = self.value(pos, depth + 1)
            out.append(item)
            pos = self.skip_ws(pos)
            c = self.at(pos)
            if c == b"]":
                return out, pos + 1
            if c != b",":
                raise self.fail("Expecting ',' delimiter", pos)
            pos += 1

    def string(self, pos: int, inline: bool = False) -> tuple[Any, int]:
        """The string at pos (its opening quote): a str, or a Span when longer than INLINE_MAX (unless `inline`)."""
        keep, j = pos, pos + 1
        while True:
            rel = self.data.find(b'"', j - self.start)
            if rel < 0:
                k = len(self.data)
                while k > j - self.start and self.data[k - 1] == 0x5C:  # a trailing run of backslashes stays
                    k -= 1
                j = self.start + k
                if not inline and j - pos > self.inline_max:
                    keep = j
                if not self.more(keep):
                    raise StreamError("Unterminated string starting at", pos, True)
                continue
            slashes = 0
            while rel - slashes - 1 >= 0 and self.start + rel - slashes - 1 > pos and \
                    self.data[rel - slashes - 1] == 0x5C:  # fmt: skip
                slashes += 1
            if slashes % 2:
                j = self.start + rel + 1
                continue
            end = self.start + rel + 1
            if keep != pos or end - pos > self.inline_max and not inline:
                return Span(self.path, pos, end - pos), end
            try:
                return json.loads(self.data[pos - self.start : end - self.start]), end
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise self.fail(f"Invalid string ({getattr(exc, 'msg', exc)})", pos) from None

    def number_list(self, pos: int) -> tuple[Any, int] | None:
        """A list holding only numbers (or lists of them) at pos: its list, or a Span when long; None for any other
        list (one holding strings or objects), found out before INLINE_MAX bytes."""
        after = self.skip_ws(pos + 1, keep=pos)
        first = self.data[after - self.start : after - self.start + 1]
        if not first or first not in b"-0123456789[]nNiItf":
            return None
        keep, j, depth = pos, pos, 0
        while True:
            m = _LIST_STOP.search(self.data, j - self.start)
            if m is None:
                j = self.start + len(self.data)
                if j - pos > self.inline_max:
                    keep = j
                if not self.more(keep):
                    raise StreamError("Unterminated list starting at", pos, True)
                continue
            q, c = self.start + m.start(), m.group()
            if c in b'"{}':
                if keep != pos:  # dropped already: read again from pos
                    self.f.seek(pos)
                    self.data, self.start, self.eof = b"", pos, False
                return None
            depth += 1 if c == b"[" else -1
            if depth > MAX_DEPTH:
                raise self.fail(f"nested deeper than {MAX_DEPTH}", q)
            j = q + 1
            if depth == 0:
                if keep != pos or j - pos > self.inline_max:
                    return Span(self.path, pos, j - pos), j
                try:
                    return _loads(self.data[pos - self.start : j - self.start]), j
                except ValueError:
                    return None  # not numbers after all: parsed item by item, which says where

    def scalar(self, pos: int) -> tuple[Any, int]:
        head = self.at(pos, 64)
        m = _NUMBER.match(head)
        if m and m.end() < len(head) or m and self.eof:
            text = m.group()
            return (float(text) if m.group(1) or m.group(2) else int(text)), pos + m.end()
        for word, val in _WORDS.items():
            if head.startswith(word):
                return val, pos + len(word)
        if head.startswith(b"-Infinity"):
            return float("-inf"), pos + 9
        b = _BARE_WORD.match(head)
        if b:
            word = b.group().lower()
            return float(word.replace(b"inity", b"")), pos + b.end()
        raise self.fail("Expecting value", pos)


def skeleton(path: Path, in_file: bool = True) -> Any:
    """The JSON document at `path`, long strings and long lists of numbers left in the file as Spans (or, not
    `in_file`, every value read: json.load's result, bare nan and inf read too)."""
    with open(path, "rb") as f:
        p = _Parser(Path(path), f, INLINE_MAX if in_file else sys.maxsize)
        doc, pos = p.value(0)
        pos = p.skip_ws(pos)
        if p.at(pos):
            raise p.fail("Extra data", pos)
    return doc


__all__ = ["INLINE_MAX", "Span", "StreamError", "numbers", "skeleton"]
