"""The index of a run of several suites: one self-contained HTML page (autoescaped, no network) with a row per
suite and stage (verdict, worst check) linking each suite's own report by a relative path, and one JUnit file with
each suite's test suites."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from trtverify.report.format import fmt, margin
from trtverify.report.junit import junit_xml
from trtverify.results.index import Index
from trtverify.results.models import Results
from trtverify.util.fsutil import atomic_write, atomic_write_text

_TEMPLATES = Path(__file__).parent / "templates"


def render_index(index: Index) -> str:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(_TEMPLATES)),
        autoescape=True,  # suite, stage and check names are user data
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = fmt
    env.filters["margin"] = margin
    return env.get_template("index.html.j2").render(ix=index)


def write_index_html(index: Index, path: Path) -> Path:
    atomic_write_text(Path(path), render_index(index))
    return Path(path)


def junit_many(runs: Sequence[tuple[str, Results | None, str | None]]) -> bytes:
    """One JUnit document for several suites: each suite's test suites as `junit_xml` makes them (one per stage,
    named `<suite>.<stage>`), and for a suite without results (a crash, a refusal) one test suite with an error."""
    root = ET.Element("testsuites", name=f"trtverify {len(runs)} suites")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for name, results, error in runs:
        if results is not None:
            suites = list(ET.fromstring(junit_xml(results)))
        else:
            ts = ET.Element("testsuite", name=name, time="0", tests="1", failures="0", errors="1", skipped="0")
            tc = ET.SubElement(ts, "testcase", classname=name, name="suite runs", time="0")
            err = ET.SubElement(tc, "error", message=(error or "no results")[:500], type="suite")
            err.text = error or "no results"
            suites = [ts]
        for ts in suites:
            if results is not None and error:  # results kept, but the suite's process died or was stopped
                tc = ET.SubElement(ts, "testcase", classname=ts.get("name", name), name="suite runs", time="0")
                ET.SubElement(tc, "error", message=error[:500], type="suite").text = error
                ts.set("tests", str(int(ts.get("tests", "0")) + 1))
                ts.set("errors", str(int(ts.get("errors", "0")) + 1))
                error = None  # once per suite
            root.append(ts)
            for k in totals:
                totals[k] += int(ts.get(k, "0"))
    for k, v in totals.items():
        root.set(k, str(v))
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8")


def write_junit_many(runs: Sequence[tuple[str, Results | None, str | None]], path: Path) -> Path:
    data = junit_many(runs)
    atomic_write(Path(path), lambda fh: fh.write(data))
    return Path(path)
