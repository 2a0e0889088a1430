"""Hits to findings: every rule's hits gathered, then folded by key (one finding per kind, or per message
template for the floor's), with every line and layer of its occurrences."""

from __future__ import annotations

from collections.abc import Sequence

from trtverify.buildlog.evidence import evidence
from trtverify.buildlog.findings import RULES, Finding, Hit, Rule
from trtverify.buildlog.lines import LogRecord
from trtverify.config.findings import SEVERITY_RANK


def fold(hits: list[Hit], lines: Sequence[str] = ()) -> list[Finding]:
    """One finding per key; with the log's `lines`, each with its evidence lines and their entities."""
    groups: dict[str, list[Hit]] = {}
    for h in hits:
        groups.setdefault(h.key or h.kind, []).append(h)
    out = []
    for group in groups.values():
        group.sort(key=lambda h: h.line)
        first = group[0]
        layers: list[str] = []
        for h in group:
            layers.extend(x for x in h.layers if x not in layers)
        detail = dict(first.detail)
        if len(group) > 1:
            detail["occurrences"] = [dict(h.detail, line=h.line) for h in group] if any(h.detail for h in group) else []
            if not detail["occurrences"]:
                del detail["occurrences"]
        numbers = tuple(h.line for h in group)
        if first.kind in ("log_warning", "log_error", "log_event") and len(group) > 1:  # the floor's template groups
            detail.update(first_line=numbers[0], last_line=numbers[-1])
        shown, found = evidence(numbers, lines) if lines else ([], {})
        out.append(
            Finding(
                kind=first.kind,
                category=first.category,
                severity=max((h.severity for h in group), key=lambda s: -SEVERITY_RANK[s]),
                message=first.message,
                lines=tuple(h.line for h in group),
                layers=tuple(layers),
                count=len(group),
                detail=detail,
                evidence=shown,
                entities=found,
            )
        )
    out.sort(key=lambda f: (SEVERITY_RANK[f.severity], f.lines[0], f.kind))
    return out


def gather(
    records: list[LogRecord],
    extra: list[Hit] = (),
    rules: Sequence[Rule] = RULES,  # type: ignore[assignment]
) -> list[Hit]:
    """Every rule's hits (before folding), `extra` first."""
    hits: list[Hit] = list(extra)
    for rule in rules:
        hits.extend(rule(records))
    return hits
