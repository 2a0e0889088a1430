"""The sensitivity table's lines of the terminal summary (under the repair stage's lines)."""

from __future__ import annotations

from trtverify.repair.sensitivity import Sensitivity, Trial
from trtverify.util.words import count

SHOWN = 10  # rows of the node table shown in the terminal (all of them are in results.json and the report)


def _err(value: float | None, passes: bool | None) -> str:
    if passes is None:
        return "not tried"
    text = "non-finite" if value is None else f"{value:.4g}"
    return f"{text} passes" if passes else text


def _share(value: float | None) -> str:
    return "-" if value is None else f"{0.0 if abs(value) < 0.005 else value:.0%}"


def _row(r: Trial, width: int) -> str:
    return (
        f"            {r.rank:>4}  {r.name:<{width}}  {_err(r.kept_alone, r.kept_alone_passes):<18}"
        f"{_err(r.lowered_alone, r.lowered_alone_passes):<18}{_share(r.share_kept):>11} {_share(r.share_lowered):>7}"
    )


def sensitivity_lines(s: Sensitivity) -> list[str]:
    base = "non-finite" if s.baseline is None else f"{s.baseline:.4g}"
    out = [
        f"          sensitivity ({s.precision}; {s.error}: {base} with nothing kept, {s.floor:.4g} with every lowered "
        f"node kept; {count(s.trials, 'trial')}, {s.seconds:.1f} s):"
    ]
    shown = s.nodes[:SHOWN]
    width = max((len(r.name) for r in shown), default=4)
    if shown:
        head = f"{'kept alone':<18}{'lowered alone':<18}{'share: kept':>11} {'lowered':>7}"
        out.append(f"            {'rank':>4}  {'node':<{width}}  {head}")
        out += [_row(r, width) for r in shown]
    if len(s.nodes) > SHOWN:
        out.append(f"            ... {count(len(s.nodes) - SHOWN, 'more row')} in results.json and the report")
    if s.op_types:
        types = ", ".join(f"{r.name} {r.score:.0%}" for r in s.op_types)
        out.append(f"            op types (kept alone, lowered alone; larger share): {types}")
    verdict = {True: "passes", False: "fails", None: "not verified"}[s.exclude_passes]
    out.append(f"            exclusion list ({verdict}: {s.exclude_why}): {', '.join(s.exclude) or 'nothing'}")
    for tool, path in s.files.items():
        out.append(f"            {tool}: {path}")
    for name, why in s.unaddressable.items():
        out.append(f"            cannot be given by name: {name}: {why}")
    if s.not_tried:
        first = "; ".join(f"{k}: {v}" for k, v in list(s.not_tried.items())[:3])
        out.append(f"            not tried: {count(len(s.not_tried), 'entry')} ({first})")
    out.append(
        f"            {s.untried_lowered} of the {count(s.lowered, 'lowered node')} not in the table (no added error, "
        "or beyond the bound)"
    )
    return out
