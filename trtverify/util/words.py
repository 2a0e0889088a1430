"""Words in what trtverify prints: a count with its noun (`1 tensor`, `3 tensors`), and a long message cut at a
word, marked as cut."""

from __future__ import annotations

import re

_ES = re.compile(r"(?:s|x|z|ch|sh)$")


def plural(word: str, n: float | None) -> str:
    """`word` as it goes with n: tensor -> tensors, batch -> batches, (a phrase: its last word) layer group ->
    layer groups. Nouns whose plural is not made that way are given as `singular|plural`: `is|are`."""
    if "|" in word:
        one, many = word.split("|", 1)
        return one if n == 1 else many
    if n == 1:
        return word
    if _ES.search(word):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in ("a", "e", "o", "u", ""):
        return word[:-1] + "ies"
    return word + "s"


def count(n: int | None, word: str) -> str:
    """`1 tensor`, `3 tensors`, `0 tensors` (the noun by `plural`); `? tensors` where n is unknown."""
    return f"? {plural(word, 2)}" if n is None else f"{n} {plural(word, n)}"


def shorten(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: whole where it fits, else cut after the last sentence that fits
    (where that keeps over half of it), else after the last whole word, ' ...' saying that more followed."""
    text = text.strip()
    if len(text) <= limit:
        return text
    room = text[: max(limit - 4, 1)]
    ends = [m.end() for m in re.finditer(r"[.;!?](?=\s)", room)]
    if ends and ends[-1] >= limit // 2:
        return room[: ends[-1]] + " ..."
    words = [m.start() for m in re.finditer(r"\s", room)]
    cut = room[: words[-1]] if words and words[-1] >= limit // 2 else room
    return cut.rstrip(" ,;:\n") + " ..."
