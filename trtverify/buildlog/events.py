"""Events on info lines, generically: a line no rule claims, at info level or with no level, whose verb says a state
change of a named thing (loaded, created, deserialized, built, serialized, saved, failed, not found, unavailable,
falling back, deprecated, could not, unable to ...) becomes a `log_event` finding (severity info), grouped by
message template like the floor's (floor.template) with its count, first and last line, and the names in it.

A thing is named when the line quotes a name, names one after `layer` / `model` / `instance` ... (an identifier:
digits, `_ . / :`), or says what changed in the words tools use for it (engine, model, plugin, library, file,
instance, provider, cache, context, backend, session, network, layer). The first EVENTS templates of a log are
reported; more are counted in the context's left_out (a long server log loads hundreds of models).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from trtverify.buildlog import prefixes
from trtverify.buildlog.entities import names
from trtverify.buildlog.findings import Hit
from trtverify.buildlog.floor import MESSAGE, template
from trtverify.buildlog.lines import LogRecord
from trtverify.util.words import shorten

EVENTS = 40  # event templates reported per log

_GATE = (
    "load", "Load", "creat", "Creat", "serializ", "Serializ", "built", "Built", "build", "Build", "saved", "Saved",
    "wrote", "written", "ailed", "not found", "unavailable", "UNAVAILABLE", "back", "deprecated", "ould not",
    "nable to", "annot", "can't", "placed", "generat",
)  # fmt: skip
_VERB = re.compile(
    r"\b(?:[Ll]oaded|[Ll]oading|[Uu]nloaded|[Uu]nloading|[Ll]oad new|[Cc]reated|[Cc]reating|"
    r"(?:[Tt]rying|[Ff]ailed) to (?:create|build|load|open|deserialize|find)|"
    r"[Dd]eserializ(?:ed|ing)|[Dd]eseriali[sz]e|[Bb]uilt|[Bb]uilding|[Ss]erializ(?:ed|ing)|[Ss]aved|[Ss]aving|wrote|"
    r"written|[Gg]enerating|[Ff]ailed|FAILED|not found|[Uu]navailable|UNAVAILABLE|[Ff]alling back|[Ff]all(?:s)? back|"
    r"[Ff]allback|deprecated|[Cc]ould not|[Uu]nable to|[Cc]annot|can't|placed on)\b"
)
_THING = re.compile(
    r"(?i)\b(?:engines?|models?|plugins?|librar(?:y|ies)|lib|files?|instances?|providers?|caches?|contexts?|"
    r"backends?|sessions?|networks?|layers?|servables?|checkpoints?|weights)\b"
)
_IDENT = re.compile(r"(?<![<\w/\\.])[A-Za-z][\w.-]*(?:_\w+|\d)[\w.-]*\b(?!>)")  # `resnet_0_0`, `yolo_93`, `model.plan`


def _named(text: str) -> bool:
    return bool(names(text) or _THING.search(text) or _IDENT.search(text))


def hits(records: Iterable[LogRecord], covered: set[int]) -> tuple[list[Hit], int]:
    """(a hit per event line none of whose lines a rule or the floor reported, event lines past EVENTS templates)."""
    out: list[Hit] = []
    shapes: set[str] = set()
    more = 0
    for r, text in _info(records, covered):
        m = _VERB.search(text)
        if m is None or not _named(text):
            continue
        named = names(text) or _IDENT.findall(text[m.end() :])[:1]  # `Created instance resnet_0_0 on GPU 0`
        shape = template(_IDENT.sub("<name>", text))
        if shape not in shapes and len(shapes) >= EVENTS:
            more += 1
            continue
        shapes.add(shape)
        out.append(
            Hit(
                kind="log_event",
                category="build",
                severity="info",
                message=shorten(text, MESSAGE),
                line=r.first,
                layers=tuple(named[:8]),
                detail={"event": m.group(0), "template": shape},
                key=f"log_event:{shape}",
            )
        )
    return out, more


def _info(records: Iterable[LogRecord], covered: set[int]) -> Iterator[tuple[LogRecord, str]]:
    """(record, its message) of each info or unlevelled record no rule reported, gated by cheap words."""
    for r in records:
        if r.severity not in (None, "info") or r.dialect in ("blank", "elision") or r.first in covered:
            continue
        first = r.text.split("\n", 1)[0]
        if not any(w in first for w in _GATE):
            continue
        level, text = prefixes.split(first) if r.severity is None else (None, first.strip())
        if level not in (None, "info") or len(text) < 8:
            continue
        yield r, text
