"""Polygraphy's own output in a log: `polygraphy run` comparison results and `polygraphy debug` summaries.
Kinds: config.findings.POLYGRAPHY_KINDS."""

from __future__ import annotations

from trtverify.buildlog.findings import Rule

RULES: tuple[Rule, ...] = ()
