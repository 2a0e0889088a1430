"""The context block of a parsed log (buildlog/context.py) as terminal lines: what the log says it ran, shown
before its findings."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trtverify.buildlog.context import ContextItem, LogContext

_LABELS = (
    ("tools", "tools"),
    ("gpus", "GPU"),
    ("models", "model files"),
    ("engines", "engine files"),
    ("files", "other files"),
    ("shapes", "input shapes"),
    ("precision", "precision"),
    ("batch_size", "batch size"),
    ("figures", "figures"),
    ("settings", "settings"),
)
SHOWN = 6  # items of one kind on its line; the rest counted


def _item(key: str, item: ContextItem) -> str:
    d = item.detail
    if key == "tools":
        text = f"{d.get('tool', '?')} {item.value}"
    elif key in ("engines", "files") and d.get("direction"):
        text = f"{item.value} ({d['direction']})"
    elif key == "shapes":
        name = f"{d['input']} " if d.get("input") else ""
        role = f"{d['role']}=" if d.get("role") not in (None, "shape") else ""
        text = f"{name}{role}{item.value}"
    elif key == "gpus" and d.get("compute_capability") and d["compute_capability"] not in item.value:
        text = f"{item.value} (compute capability {d['compute_capability']})"
    elif key == "figures" and d.get("what"):
        text = f"{d['what']} {item.value}"
    elif key == "settings":
        text = d.get("written") or f"{d.get('key', '?')}={item.value}"
    else:
        text = item.value
    return f"{text} [line {item.line}]"


def context_lines(ctx: LogContext) -> list[str]:
    """`context:` then one line per kind the log states; `context: the log states none ...` where it states none."""
    out = []
    for key, label in _LABELS:
        items = getattr(ctx, key)
        if items:
            shown = ", ".join(_item(key, i) for i in items[:SHOWN])
            left = len(items) - SHOWN + ctx.left_out.get(key, 0)
            more = f", ... {left} more" if left > 0 else ""
            out.append(f"  {label}: {shown}{more}")
    if not out:
        return ["context: the log names no tool version, GPU, model or engine file, input shape or precision"]
    return ["context:", *out]
