"""How numbers and names are shown in the report, the terminal summary and JUnit."""

from __future__ import annotations

import math
from typing import Any

from markupsafe import Markup, escape

from trtverify.compare.checks import CheckResult


def fmt(value: Any) -> str:
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


def num(value: Any) -> float | None:
    """A results.json number (non-finite ones are the strings 'nan', 'inf', '-inf') as a float; None if not a number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value in ("nan", "inf", "-inf"):
        return float(value)
    return None


def sort_value(value: Any) -> str:
    """A cell's numeric sort key for the table script: JS Number() reads it; '' (nan, missing) sorts last."""
    v = num(value)
    if v is None or math.isnan(v):
        return ""
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(v)


def margin(check: CheckResult) -> str:
    """How far a check's value is past its limit (failed) or from it (passed)."""
    v, t, op = num(check.value), num(check.threshold), check.op
    if v is None or t is None or op not in ("<=", ">="):
        return ""
    if not math.isfinite(v):
        return "value not finite"
    over = v - t if op == "<=" else t - v  # > 0: beyond the limit
    if over <= 0:
        return f"headroom {fmt(-over)}"
    text = f"{'over' if op == '<=' else 'under'} by {fmt(over)}"
    if op == "<=" and t > 0:
        text += f" ({v / t:.3g}× the limit)"
    elif op == ">=" and check.metric.startswith("cosine") and t < 1:
        text += f" (1 − cosine {(1 - v) / (1 - t):.3g}× the allowed)"
    return text


def fmt_metric(metric: str, value: Any) -> str:
    """_fmt, with a cosine close to 1 shown to two significant digits of 1 - cosine (0.99999983, not 1)."""
    v = num(value)
    if metric == "cosine" and v is not None and 0.99 < v < 1:
        return f"{v:.{min(12, 1 - math.floor(math.log10(1 - v)))}f}"
    return fmt(value)


def breakable(name: Any) -> Markup:
    """A name, escaped, with line-break opportunities after its path separators ('/features/<wbr>block1/<wbr>...')."""
    return Markup(str(escape(fmt(name))).replace("/", "/<wbr>").replace(".", ".<wbr>"))


def pow10(e: float) -> str:
    """10**e for a histogram edge: 1e-5, 3.2e-5, 1, 3.2."""
    k = math.floor(e)
    mant = f"{10.0 ** (e - k):.2g}"
    return mant if k == 0 else f"{mant}e{k}"
