"""`polygraphy debug build / precision / reduce` summaries in a log (the message families are listed in
polygraphy.py's docstring): iterations, pass rate, the result, and reduce's minimal failing model with its nodes.
Kind: polygraphy_debug_summary (config.findings.POLYGRAPHY_KINDS)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from trtverify.buildlog.findings import Hit, Rule
from trtverify.buildlog.lines import LogRecord
from trtverify.buildlog.polygraphy import _NUM, _items, _num

# --- polygraphy debug ------------------------------------------------------------------------------

_CMD = re.compile(r"polygraphy\s+debug\s+(?P<sub>build|precision|reduce|repeat)\b")
_RUNNING = re.compile(r"^RUNNING \| Iteration (?P<i>\d+)")
_ITER_VERDICT = re.compile(r"^(?P<v>PASSED|FAILED) \| Iteration (?P<i>\d+)(?: \| Duration (?P<d>" + _NUM + r") ?s)?")
_FINISHED = re.compile(r"Finished (?P<n>\d+) iteration\(?s?\)? \| Passed: (?P<p>\d+) ?/ ?(?P<t>\d+)")
_DEBUG_SUMMARY = re.compile(r"^Debug Summary\b")
_PASSED = re.compile(r"Passed: ?(?P<p>\d+) ?/ ?(?P<t>\d+)")
_PASS_RATE = re.compile(r"Pass ?Rate: ?(?:(?P<r>" + _NUM + r") ?%|(?P<rp>\d+) ?/ ?(?P<rt>\d+))")
_EVENTS: list[tuple[str, re.Pattern[str]]] = [
    ("precision", re.compile(r"^Using (?P<v>\w+) as higher precision")),
    ("select", re.compile(r"^Selecting (?:first|last) (?P<v>\d+) layer\(s\) to run in higher precision")),
    ("marking", re.compile(r"^Marking layer\(s\): (?P<v>\{[^}]*\}|\[[^\]]*\]|set\(\)) to run in \w+ precision")),
    ("achieve", re.compile(r"try running the (?P<dir>first|last) (?P<v>\d+) layer\(s\) in higher precision")),
    ("no_config", re.compile(r"(?P<v>Could not find a configuration that satisfied accuracy requirements)")),
    ("reducing", re.compile(r"^(?:Finished )?[Rr]educing model (?P<v>inputs|outputs)")),
    ("model", re.compile(r"^Minimum (?P<v>Bad|Good) Model:")),
    ("no_good", re.compile(r"(?P<v>Could not find a minimal model close in size to the reduced model)")),
    ("bad_artifact", re.compile(r"^Moving \S+ to (?P<v>(?:\S*/)?bad/\S+)")),
]
_MODEL_NAME = re.compile(r"^Name: (?P<name>.*?) \| ONNX Opset: (?P<opset>\d+)")
_MODEL_COUNT = re.compile(r"^-+ (?P<n>\d+) (?P<what>Graph Input|Graph Output|Initializer|Node)\(s\) -+")
_COUNT_KEYS = {"Graph Input": "inputs", "Graph Output": "outputs", "Initializer": "initializers", "Node": "nodes"}
# a node of the printed model: `Node 0    | node_linear [Op: Gemm]`
_MODEL_NODE = re.compile(r"^Node (?P<i>\d+)\s*\|\s*(?P<name>.*?)\s*\[Op: (?P<op>[\w.]+)\]")
_Event = tuple[int, str, Any, str]  # (line, what, value, text)


def _summary_numbers(text: str, finished: re.Match[str] | None) -> dict[str, Any]:
    """iterations, passed, total and pass_rate (percent) of a `Finished N iteration(s)` or `Debug Summary` line."""
    d: dict[str, Any] = {"iterations": int(finished.group("n"))} if finished else {}
    if m := _PASSED.search(text):
        d.update(passed=int(m.group("p")), total=int(m.group("t")))
    if (m := _PASS_RATE.search(text)) and m.group("r"):
        d["pass_rate"] = _num(m.group("r"))
    elif m and int(m.group("rt")):
        d.update(
            passed=int(m.group("rp")), total=int(m.group("rt")), pass_rate=100 * int(m.group("rp")) / int(m.group("rt"))
        )
    if "total" in d:
        d.setdefault("iterations", d["total"])
    return d


def _model(items: list[tuple[int, str]], k: int) -> dict[str, Any]:
    """The model description on the lines after `Minimum Bad Model:`."""
    d: dict[str, Any] = {}
    for _, t in items[k + 1 : k + 40]:
        if (m := _MODEL_NAME.match(t)) and "name" not in d:
            d.update(name=m.group("name"), opset=int(m.group("opset")))
        elif m := _MODEL_COUNT.match(t):
            d.setdefault(_COUNT_KEYS[m.group("what")], int(m.group("n")))
        elif m := _MODEL_NODE.match(t):  # what the user ran reduce to learn: the nodes of the minimal model
            d.setdefault("node_list", []).append([m.group("name") or f"node {m.group('i')}", m.group("op")])
        elif t.startswith(("Minimum ", "Finished ", "RUNNING ")) or _CMD.search(t):
            break
    return d


def _debug_events(items: list[tuple[int, str]]) -> list[_Event]:
    events: list[_Event] = []
    for k, (line, t) in enumerate(items):
        if m := _CMD.search(t):
            events.append((line, "cmd", m.group("sub"), t))
        elif (m := _FINISHED.search(t)) or _DEBUG_SUMMARY.match(t):
            events.append((line, "summary", _summary_numbers(t, m), t))
        elif m := _ITER_VERDICT.match(t):
            it = {"iteration": int(m.group("i")), "status": "PASS" if m.group("v") == "PASSED" else "FAIL"}
            events.append((line, "iter", dict(it, duration_s=_num(m.group("d"))) if m.group("d") else it, t))
        elif _RUNNING.match(t):
            events.append((line, "running", None, t))
        else:
            for what, rx in _EVENTS:
                if m := rx.search(t):
                    value: Any = m.group("v")
                    if what == "achieve":
                        value = {"direction": m.group("dir"), "layers": int(value)}
                    elif what == "marking":
                        value = [int(x) for x in re.findall(r"\d+", value)]
                    elif what == "model":
                        value = (f"minimum_{value.lower()}_model", _model(items, k))
                    events.append((line, what, value, t))
                    break
    return events


_RESULTS = ("achieve", "no_config", "model", "no_good")


def _sessions(events: list[_Event]) -> list[tuple[str | None, list[_Event]]]:
    """Split at each summary (and command line): iterations and precision results belong to the summary after
    them, reduce's models to the one before; what follows the last summary with iterations or results in it is a
    session of its own (a cut log). Reduce's two loops (outputs, then inputs) make one session."""
    out: list[tuple[str | None, list[_Event]]] = []
    cur: list[_Event] = []
    subtool: str | None = None
    for ev in events:
        if ev[1] == "cmd" and any(e[1] != "cmd" for e in cur):
            out.append((subtool, cur))
            cur = []
        subtool = ev[2] if ev[1] == "cmd" else subtool
        if ev[1] in ("model", "no_good") and out and not any(e[1] in ("iter", "running", "summary") for e in cur):
            out[-1][1].append(ev)
            continue
        cur.append(ev)
        if ev[1] == "summary":
            out.append((subtool, cur))
            cur = []
    if any(e[1] in ("iter", "running", *_RESULTS) for e in cur):
        out.append((subtool, cur))
    merged: list[tuple[str | None, list[_Event]]] = []
    for sub, evs in out:
        reduce = sub == "reduce" or (sub is None and any(e[1] in ("reducing", "model") for e in evs))
        if merged and reduce and merged[-1][0] == "reduce" and not any(e[1] == "cmd" for e in evs):
            merged[-1][1].extend(evs)
        else:
            merged.append(("reduce" if reduce else sub, evs))
    return [(sub, evs) for sub, evs in merged if any(e[1] != "cmd" for e in evs)]


def _debug_hit(subtool: str | None, evs: list[_Event]) -> Hit:
    kinds = {e[1] for e in evs}
    subtool = subtool or ("precision" if kinds & {"precision", "select", "marking", "achieve", "no_config"} else None)
    d: dict[str, Any] = {"subtool": subtool} if subtool else {}
    summaries = [e[2] for e in evs if e[1] == "summary"]
    iters: list[dict[str, Any]] = []
    result: dict[str, Any] = {}
    select, marking = None, None
    for _, what, value, _ in evs:
        if what == "running":
            select, marking = None, None
        elif what == "iter":
            iters.append(dict(value, select=select, marking=marking))
        elif what == "select":
            select = int(value)
        elif what == "marking":
            marking = value
        elif what == "precision":
            result["higher_precision"] = value
        elif what == "achieve":
            result.update(value)
        elif what == "no_config":
            result["configuration_found"] = False
        elif what == "model":
            result[value[0]] = value[1]
        elif what == "no_good":
            result["minimum_good_model"] = None
        elif what in ("bad_artifact", "reducing"):
            key = "bad_artifacts" if what == "bad_artifact" else "reduced"
            result.setdefault(key, []).extend([] if value in result.get(key, []) else [value])
    if len(summaries) == 1:
        d.update(summaries[0])
    elif summaries:
        d.update({k: sum(s.get(k, 0) for s in summaries) for k in ("iterations", "passed", "total")}, loops=summaries)
    elif iters:
        d.update(iterations=len(iters), passed=sum(it["status"] == "PASS" for it in iters), total=len(iters))
    if "pass_rate" not in d and d.get("total"):
        d["pass_rate"] = 100 * d["passed"] / d["total"]
    chosen = [it["marking"] for it in iters if it["status"] == "PASS" and it["select"] == result.get("layers")]
    if "layers" in result and chosen and chosen[-1] is not None:
        result["marked_layers"] = chosen[-1]
    if result:
        d["result"] = result
    failed = [it["iteration"] for it in iters if it["status"] == "FAIL"]
    if failed:
        d["failed_iterations"] = failed
    found_failure = bool(
        failed
        or result.get("configuration_found") is False
        or "minimum_bad_model" in result
        or d.get("passed", 0) < d.get("total", 0)
        or (isinstance(d.get("pass_rate"), float) and d["pass_rate"] < 100.0)
    )
    anchor = next((e for e in evs if e[1] == "summary"), None) or next(e for e in evs if e[1] != "cmd")
    severity = "medium" if found_failure else "info"
    bad = result.get("minimum_bad_model") if isinstance(result.get("minimum_bad_model"), dict) else {}
    nodes = tuple(name for name, _ in bad.get("node_list", []))
    message = anchor[3]
    if nodes:
        shown = ", ".join(f"{name} ({op})" for name, op in bad["node_list"][:8])
        message += f"; minimum bad model: {len(nodes)} node(s): {shown}" + (" ..." if len(nodes) > 8 else "")
    return Hit("polygraphy_debug_summary", "comparison", severity, message, anchor[0], nodes, d)


def rule_polygraphy_debug(records: list[LogRecord]) -> Iterator[Hit]:
    """One hit per `polygraphy debug` run: its `Finished N iteration(s) | Passed: p/t | Pass Rate: r%` summary
    (reduce: both loops), the iterations' verdicts and the result; a cut log without a summary still counts."""
    for subtool, evs in _sessions(_debug_events(_items(records))):
        yield _debug_hit(subtool, evs)


RULES: tuple[Rule, ...] = (rule_polygraphy_debug,)
