"""Polygraphy's own output in a log: `polygraphy run` comparison results and `polygraphy debug` summaries.
Kinds: config.findings.POLYGRAPHY_KINDS.

Message families as Polygraphy 0.2x-0.5x prints them (prefix `[I] `/`[E] `, optional `(HH:MM:SS) ` and
`[file.py:N] `, indentation; multi-line messages go on indented lines). `polygraphy run`: `Accuracy
Comparison | A vs. B`, `Iteration: N`, per output `Comparing Output: 'x' (dtype=.., shape=..) with ..`
(0.29-0.3x add `| Tolerance: [abs=.., rel=..] | Checking elemwise error`), runner values (`Runner: A |
Stats: ..` in 0.2x, `A: x | Stats: ..` later), the error (0.2x: `Required tolerances: [atol=..] OR [rtol=..,
atol=..] OR [..] | Mean Error: Absolute=.., Relative=..`; later `Error Metrics: x`, `Minimum Required
Tolerance: elemwise error | [abs=..] OR [rel=..]`, `Absolute/Relative Difference | Stats: ..`, p90-p99 in
the newest), the verdict `PASSED|FAILED [| Output: 'x'] | Difference ... tolerance (rtol=.., atol=..)` (or
`(rel=.., abs=..)`, L2/cosine/PSNR/shape reasons), per iteration `FAILED | Mismatched outputs: [..]`, per
runner pair `Accuracy Summary | A vs. B | Passed: p/t iterations | Pass Rate: r%`. `polygraphy debug`:
`RUNNING | Iteration N`, `PASSED|FAILED | Iteration N [| Duration Ds]`, `Finished N iteration(s) | Passed:
p/t | Pass Rate: r%`; precision: `Using float32 as higher precision`, `Marking layer(s): {..} to run in ..
precision`, `To achieve acceptable accuracy, try running the first N layer(s) in higher precision` or `Could
not find a configuration that satisfied accuracy requirements.`; reduce: `Reducing model outputs`, `Minimum
Bad/Good Model:` with `Name: m | ONNX Opset: N` and `---- N Node(s) ----`. Non-finite numbers (`mean=nan`)
are kept as the strings "nan", "inf", "-inf".
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from trtverify.buildlog.findings import Hit, Rule
from trtverify.buildlog.lines import LogRecord

_NUM = r"[-+]?(?:nan|inf(?:inity)?|(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
_Q = "['`\"]"
# what Polygraphy's logger may put before a message once lines.py took the `[I] ` letter off
_LEAD = re.compile(  # + a pasted `> ` and another logger's date/time in front
    r"^(?:\[[VIWEFXSU!]\]\s*|\(\d{1,2}:\d{2}:\d{2}\)\s*|\[[^\]\s]*\.py:\d+\]\s*|>\s*"
    r"|\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\s*|\[\d{1,2}/\d{1,2}/\d{4}-\d{1,2}:\d\d:\d\d\]\s*)+"
)


def _num(s: str) -> float | str:
    try:
        v = float(s)
    except ValueError:
        return s
    return v if math.isfinite(v) else str(v).lower()


def _items(records: list[LogRecord]) -> list[tuple[int, str]]:
    """(line, message) for every non-blank physical part of every record, logger prefixes taken off."""
    out = []
    for r in records:
        if r.dialect in ("blank", "elision"):
            continue
        for i, part in enumerate(r.text.split("\n")):
            text = re.sub(r"\s+", " ", _LEAD.sub("", part.strip())).strip()
            if text:
                out.append((min(r.first + i, r.last), text))
    return out


_STAT = re.compile(r"(?P<k>[a-z][\w-]*)=(?P<v>" + _NUM + r")(?:\s*at\s*\((?P<at>[^)]*)\))?", re.I)
_STAT_NAMES = {"std-dev": "std", "avg-magnitude": "avg_magnitude"}


def _stats(text: str) -> dict[str, Any]:
    d: dict[str, Any] = {}
    for m in _STAT.finditer(text):
        key = _STAT_NAMES.get(m.group("k").lower(), m.group("k").lower().replace("-", "_"))
        d[key] = _num(m.group("v"))
        if m.group("at") is not None:
            d[key + "_at"] = _shape(m.group("at"))
    return d


def _shape(text: str) -> list[Any]:
    parts = [x.strip() for x in text.split(",") if x.strip()]
    return [int(x) if re.fullmatch(r"-?\d+", x) else x.strip("'\"") for x in parts]


def _tol(text: str) -> dict[str, Any]:
    """`rtol=1e-05, atol=1e-05` / `abs=1e-05, rel=1e-05` -> {"rtol": .., "atol": ..}."""
    names = {"rtol": "rtol", "rel": "rtol", "atol": "atol", "abs": "atol"}
    return {names[k]: _num(v) for k, v in re.findall(r"\b(rtol|rel|atol|abs)=(" + _NUM + ")", text)}


# --- polygraphy run: comparisons ------------------------------------------------------------------

_HEADER = re.compile(r"Accuracy Comparison \| (?P<a>.+?) vs\.? (?P<b>.+?)$")
_SUMMARY = re.compile(
    r"Accuracy Summary \| (?P<a>.+?) vs\.? (?P<b>.+?) \| Passed: (?P<p>\d+) ?/ ?(?P<t>\d+)(?: iter\w*)?"
    r"(?: \| Pass ?(?:Rate:? ?(?P<r>" + _NUM + r") ?%?)?)?"
)
_RATE_TAIL = re.compile(r"^(?:iter\w* ?)?(?:\| ?)?(?:Pass ?)?Rate: ?(?P<r>" + _NUM + r") ?%$")
_ITERATION = re.compile(r"^Iteration:? (?P<i>\d+)$")
_COMPARING = re.compile(r"Comparing Output: " + _Q + r"(?P<name>.*?)" + _Q + r"(?P<rest>.*)$")
_DTYPE_SHAPE = re.compile(
    r"^ ?\((?:dtype=(?P<dtype>[^,)]+),? ?)?(?:shape=(?:torch\.Size\()?[(\[](?P<shape>[^)\]]*)[)\]])?"
)
_TOLERANCE = re.compile(r"(?<!Required )Tolerance: \[(?P<t>[^\]]*)\](?: \| Checking (?P<check>\w+) error)?")
_REQUIRED = re.compile(r"Minimum Required Tolerance: (?P<check>\w+) error \| (?P<t>\[.*?\](?: OR \[.*?\])*)")
_REQUIRED_OLD = re.compile(r"Required tolerances: (?P<t>\[.*?\](?: OR \[.*?\])*)(?P<rest>.*)$")
_MEAN_ERROR = re.compile(r"Mean Error: Absolute=(?P<a>" + _NUM + r"), Relative=(?P<r>" + _NUM + ")")
_RUNNER_OLD = re.compile(r"^Runner: (?P<runner>.+?) *\| Stats: (?P<s>.*)$")
_RUNNER_NEW = re.compile(r"^(?P<runner>\S+?): (?P<out>.+?) *\| Stats: (?P<s>.*)$")
_DIFF = re.compile(r"^(?P<which>Absolute|Relative) Difference \| Stats: (?P<s>.*)$")
_METRICS = re.compile(r"(?:^|\] )Error Metrics: (?P<name>.+)$")  # a paste's list marker may precede `[I]`
_VERDICT = re.compile(r"^(?P<v>PASSED|FAILED) \| (?:Output: " + _Q + r"(?P<name>.*?)" + _Q + r" \| )?(?P<why>.+)$")
_NOT_OUTPUT_VERDICT = re.compile(r"^(?:Iteration|Command|Runtime|Output|Errors detected|Value:|Mismatched|All outputs)")
_ITER_RESULT = re.compile(r"^(?:FAILED \| Mismatched outputs|PASSED \| All outputs matched \| Outputs): \[(?P<n>.*)\]")


@dataclass
class _Output:
    line: int
    name: str | None
    runners: list[str]
    iteration: int | None
    data: dict[str, Any] = field(default_factory=dict)
    status: str | None = None  # PASS / FAIL
    verdict_line: int | None = None
    lines: list[int] = field(default_factory=list)  # every line the block read
    message: str = ""


@dataclass
class _Summary:
    line: int
    runners: list[str]
    passed: int
    total: int
    rate: float | str | None
    message: str
    outputs: list[_Output] = field(default_factory=list)


def _required(tol_text: str) -> dict[str, Any]:
    """The required tolerances: `[abs=a] OR [rel=r]` (0.29+), or 0.2x's three options, where atol is the one
    asked alone and rtol the largest one asked; the options themselves go to "required_options"."""
    options = [_tol(x) for x in re.findall(r"\[([^\]]*)\]", tol_text)]
    d: dict[str, Any] = {"required": {}}
    for o in options:
        if set(o) == {"atol"}:
            d["required"]["atol"] = o["atol"]
        elif set(o) == {"rtol"}:
            d["required"]["rtol"] = o["rtol"]
    rtols = [o["rtol"] for o in options if isinstance(o.get("rtol"), float)]
    if "rtol" not in d["required"] and len(options) > 2 and rtols:
        d["required"]["rtol"] = max(rtols)
    if len(options) > 2:
        d["required_options"] = options
    return d


def _scan_compare(items: list[tuple[int, str]]) -> tuple[list[_Output], list[_Summary]]:
    outs: list[_Output] = []
    summaries: list[_Summary] = []
    pair: list[str] = []
    iteration: int | None = None
    cur: _Output | None = None
    group_start = 0  # index in outs where the current comparison / iteration began

    def block(line: int) -> _Output:
        nonlocal cur
        if cur is None or cur.status is not None:
            cur = _Output(line, None, list(pair), iteration)
            outs.append(cur)
        cur.lines.append(line)
        return cur

    for k, (line, t) in enumerate(items):
        if m := _HEADER.search(t):
            pair, iteration, cur, group_start = [m.group("a"), m.group("b")], None, None, len(outs)
        elif m := _SUMMARY.search(t):
            rate: float | str | None = _num(m.group("r")) if m.group("r") else None
            if rate is None and k + 1 < len(items) and (tail := _RATE_TAIL.match(items[k + 1][1])):
                rate = _num(tail.group("r"))  # `| Pass` / `Rate: 0.0%` wrapped onto the next line
                t = f"{t} {items[k + 1][1]}"
            runners = [m.group("a"), m.group("b")]
            summaries.append(_Summary(line, runners, int(m.group("p")), int(m.group("t")), rate, t))
            cur = None
        elif m := _ITERATION.match(t):
            iteration, cur, group_start = int(m.group("i")), None, len(outs)
        elif m := _COMPARING.search(t):
            cur = None
            o = block(line)
            o.name = m.group("name")
            if (ds := _DTYPE_SHAPE.match(m.group("rest"))) and ds.group("dtype"):
                o.data["dtype"] = ds.group("dtype").strip()
            if ds and ds.group("shape") is not None:
                o.data["shape"] = _shape(ds.group("shape"))
            if tm := _TOLERANCE.search(m.group("rest")):
                o.data["tolerance"] = _tol(tm.group("t"))
                o.data["tolerance_as_written"] = tm.group("t")
                if tm.group("check"):
                    o.data["check"] = tm.group("check")
        elif m := _REQUIRED.search(t):
            o = block(line)
            o.data.update(_required(m.group("t")), check=m.group("check"), required_as_written=m.group("t"))
        elif m := _REQUIRED_OLD.search(t):
            o = block(line)
            o.data.update(_required(m.group("t")))
            if me := _MEAN_ERROR.search(m.group("rest")):
                o.data.setdefault("abs_diff", {})["mean"] = _num(me.group("a"))
                o.data.setdefault("rel_diff", {})["mean"] = _num(me.group("r"))
        elif m := _TOLERANCE.search(t):
            o = block(line)
            o.data["tolerance"] = _tol(m.group("t"))
            o.data["tolerance_as_written"] = m.group("t")
            if m.group("check"):
                o.data["check"] = m.group("check")
        elif m := _DIFF.match(t):
            o = block(line)
            o.data.setdefault("abs_diff" if m.group("which") == "Absolute" else "rel_diff", {}).update(
                _stats(m.group("s"))
            )
        elif (m := _RUNNER_OLD.match(t)) or (m := _RUNNER_NEW.match(t)):
            o = block(line)
            runner = m.group("runner").strip()
            if "out" in m.groupdict() and o.name is None:
                o.name = m.group("out")
            if runner not in o.runners and len(o.runners) < 2:
                o.runners.append(runner)
            o.data.setdefault("runner_stats", {})[runner] = _stats(m.group("s"))
        elif m := _METRICS.search(t):
            o = block(line)
            o.name = o.name or m.group("name")
        elif (m := _VERDICT.match(t)) and not _NOT_OUTPUT_VERDICT.match(m.group("why")):
            o = block(line)
            o.name = m.group("name") if m.group("name") is not None else o.name
            o.status, o.verdict_line = ("PASS" if m.group("v") == "PASSED" else "FAIL"), line
            o.message = t if m.group("name") is not None or not o.name else f"{o.name}: {t}"
            if "tolerance" not in o.data and _tol(m.group("why")):
                o.data["tolerance"] = _tol(m.group("why"))
            cur = None
        elif m := _ITER_RESULT.match(t):
            names = re.findall(r"'([^']*)'", m.group("n"))
            for o in outs[group_start:]:
                if o.status is None and o.name in names:
                    o.status, o.verdict_line, o.message = ("FAIL" if t.startswith("F") else "PASS"), line, t
            cur = None
    return outs, summaries


def _attach(outs: list[_Output], summaries: list[_Summary]) -> None:
    """Each output to the Accuracy Summary of its runner pair (or, runners unknown, the next summary)."""
    for o in outs:
        match = [s for s in summaries if o.runners and set(o.runners) <= set(s.runners)]
        after = [s for s in (match or summaries) if s.line >= o.line]
        s = after[0] if after else (match[-1] if match else None)
        if s is None:
            continue
        s.outputs.append(o)
        o.runners = list(s.runners)


def _output_detail(o: _Output, s: _Summary | None) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if o.runners:
        d["runners"] = list(o.runners)
    if o.name is not None:
        d["output"] = o.name
    d.update(o.data)
    if o.iteration is not None:
        d["iteration"] = o.iteration
    if s is not None:
        d["iterations"] = {"passed": s.passed, "total": s.total}
        if s.rate is not None:
            d["pass_rate"] = s.rate
    return d


def rule_polygraphy_compare(records: list[LogRecord]) -> Iterator[Hit]:
    """One hit per output compared with a verdict (`polygraphy_compare_failed` / `_passed`); an Accuracy
    Summary whose outputs show no verdict stands for them."""
    outs, summaries = _scan_compare(_items(records))
    _attach(outs, summaries)
    owner = {id(o): s for s in summaries for o in s.outputs}
    hits: list[Hit] = []
    for s in summaries:
        unknown = [o for o in s.outputs if o.status is None]
        d = {"runners": list(s.runners), "iterations": {"passed": s.passed, "total": s.total}}
        d.update({"pass_rate": s.rate} if s.rate is not None else {})
        if s.passed == s.total > 0:
            for o in unknown:  # every iteration passed: so did every output compared
                o.status, o.verdict_line, o.message = "PASS", s.line, s.message
            if not s.outputs:
                hits.append(Hit("polygraphy_compare_passed", "comparison", "info", s.message, s.line, (), d))
        elif s.passed < s.total and not any(o.status == "FAIL" for o in s.outputs):
            names = tuple(dict.fromkeys(o.name for o in unknown if o.name))
            d.update(verdict_from="accuracy_summary", **({"outputs_without_verdict": list(names)} if names else {}))
            hits.append(Hit("polygraphy_compare_failed", "comparison", "high", s.message, s.line, names, d))
    for o in outs:
        measured = o.data.get("required") or {"abs_diff", "rel_diff", "runner_stats"} & set(o.data)
        if (o.status is None or o.verdict_line is None) and id(o) not in owner and measured:
            # a comparison pasted without its verdict: the numbers it reports, and that the verdict is not there
            detail = dict(_output_detail(o, None), verdict="not in the log")
            layers = (o.name,) if o.name else ()
            said = [f"tolerance [{o.data['tolerance_as_written']}]" if "tolerance_as_written" in o.data else ""]
            said += [f"minimum required {o.data['required_as_written']}" if "required_as_written" in o.data else ""]
            said += ["cut before the error metrics" if not {"abs_diff", "rel_diff"} & set(o.data) else ""]
            said_s = "".join(f"; {x}" for x in said if x)
            message = (f"Polygraphy compared '{o.name}'{said_s}; its numbers are in the log, its PASSED/FAILED "
                       "verdict is not")  # fmt: skip
            last = max(o.line, *o.lines)
            hits.append(Hit("polygraphy_compare_no_verdict", "comparison", "info", message, o.line, layers, detail,
                            span=(o.line, last)))  # fmt: skip
            continue
        if o.status is None or o.verdict_line is None:
            continue
        failed = o.status == "FAIL"
        kind = "polygraphy_compare_failed" if failed else "polygraphy_compare_passed"
        detail = _output_detail(o, owner.get(id(o)))
        layers = (o.name,) if o.name else ()
        span = (min(o.line, o.verdict_line), max(o.verdict_line, *o.lines, o.line))
        hits.append(Hit(kind, "comparison", "high" if failed else "info", o.message, o.verdict_line, layers, detail,
                        span=span))  # fmt: skip
    if not hits:
        return
    listing = []
    for o in outs:
        row = {"output": o.name, "status": o.status or "unknown", "line": o.verdict_line or o.line}
        row.update({k: v for k, v in _output_detail(o, owner.get(id(o))).items() if k != "output"})
        listing.append(row)
    hits.sort(key=lambda h: h.line)
    seen: set[str] = set()
    for h in hits:
        if h.kind not in seen and listing:
            seen.add(h.kind)
            h.detail["outputs"] = listing
        yield h


RULES: tuple[Rule, ...] = (rule_polygraphy_compare,)
