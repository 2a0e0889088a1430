"""The HTML view of results.json (jinja2, autoescaped, self-contained: no network needed)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from trtverify.fsutil import atomic_write_text

_TEMPLATES = Path(__file__).parent / "templates"


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if value == 0:
            return "0"
        if abs(value) >= 1e4 or abs(value) < 1e-3:
            return f"{value:.3e}"
        return f"{value:.6g}"
    return str(value)


def render(results: dict[str, Any]) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        autoescape=True,  # tensor and node names are user data: always escaped
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = _fmt
    return env.get_template("report.html.j2").render(r=results)


def write_report(results: dict[str, Any], path: Path) -> Path:
    atomic_write_text(path, render(results))
    return path
