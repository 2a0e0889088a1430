"""The index of a run of several suites: one self-contained HTML page (autoescaped, no network) with a row per
suite and stage (verdict, worst check) linking each suite's own report by a relative path, and one JUnit file with
each suite's test suites."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from trtverify.report.html import environment
from trtverify.report.junit import junit_xml
from trtverify.results.index import Index
from trtverify.results.models import Results
from trtverify.util.fsutil import atomic_write, atomic_write_text


def render_index(index: Index) -> str:
    folders = {s.name: s.folder for s in index.suites}  # a candidate's row links its suite's report
    return environment().get_template("index.html.j2").render(ix=index, folders=folders)  # names: escaped


def write_index_html(index: Index, path: Path) -> Path:
    atomic_write_text(Path(path), render_index(index))
    return Path(path)


def junit_many(runs: Sequence[tuple[str, Results | None, str | None]]) -> bytes:
    """One JUnit document for several suites: a test suite per suite, named by it, holding the test cases
    `junit_xml` makes of it (one per check, class name `<suite>.<stage>`); a suite whose process died or was
    stopped gets an `<error>` test case `suite runs` (a suite without results: that one alone)."""
    root = ET.Element("testsuites", name=f"trtverify {len(runs)} suites")
    keys = ("tests", "failures", "errors", "skipped")
    totals = dict.fromkeys(keys, 0)
    for name, results, error in runs:
        suite = ET.SubElement(root, "testsuite", name=name)
        counts = dict.fromkeys(keys, 0)
        seconds = 0.0
        for part in ET.fromstring(junit_xml(results)) if results is not None else []:
            seconds += float(part.get("time", "0"))
            for k in keys:
                counts[k] += int(part.get(k, "0"))
            suite.extend(part.findall("testcase"))
        if error:
            tc = ET.SubElement(suite, "testcase", classname=name, name="suite runs", time="0")
            ET.SubElement(tc, "error", message=error[:500], type="suite").text = error
            counts["tests"] += 1
            counts["errors"] += 1
        suite.set("time", f"{seconds:.3f}")
        for k in keys:
            suite.set(k, str(counts[k]))
            totals[k] += counts[k]
    for k, v in totals.items():
        root.set(k, str(v))
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8")


def write_junit_many(runs: Sequence[tuple[str, Results | None, str | None]], path: Path) -> Path:
    data = junit_many(runs)
    atomic_write(Path(path), lambda fh: fh.write(data))
    return Path(path)
