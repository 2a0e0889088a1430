"""JUnit XML from the typed results: one test case per check, so CI systems list what failed and by how much."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from trtverify.report.format import fmt
from trtverify.results.models import Results
from trtverify.util.fsutil import atomic_write


def junit_xml(results: Results) -> bytes:
    suite_name = results.suite.name
    root = ET.Element("testsuites", name=f"trtverify {suite_name}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for stage in results.stages:
        # in a sweep a stage runs per shape set or batch size: each run is a suite of its own, named by its shape
        classname = f"{suite_name}.{stage.name}" + (f"[{stage.shape}]" if stage.shape else "")
        ts = ET.SubElement(root, "testsuite", name=classname, time=f"{stage.duration_s:.3f}")
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for c in stage.checks:
            tc = ET.SubElement(ts, "testcase", classname=classname, name=c.name, time="0")
            counts["tests"] += 1
            if not c.passed:
                counts["failures"] += 1
                msg = f"{c.metric} = {fmt(c.value)}, limit {c.op} {fmt(c.threshold)}"
                fail = ET.SubElement(tc, "failure", message=msg, type="check")
                fail.text = (
                    msg + (f"\ndetail: {c.detail}" if c.detail else "") + (f"\ntensor: {c.tensor}" if c.tensor else "")
                )
        if stage.error is not None:
            tc = ET.SubElement(ts, "testcase", classname=classname, name="stage runs", time="0")
            err = ET.SubElement(tc, "error", message=stage.error.message[:500], type=stage.error.kind)
            err.text = stage.error.traceback or stage.error.message
            counts["tests"] += 1
            counts["errors"] += 1
        elif stage.status == "skipped":
            tc = ET.SubElement(ts, "testcase", classname=classname, name="stage runs", time="0")
            ET.SubElement(tc, "skipped", message="; ".join(stage.notes) or "skipped")
            counts["tests"] += 1
            counts["skipped"] += 1
        for k, v in counts.items():
            ts.set(k, str(v))
            totals[k] += v
    for k, v in totals.items():
        root.set(k, str(v))
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8")


def write_junit(results: Results, path: Path) -> Path:
    data = junit_xml(results)
    atomic_write(Path(path), lambda fh: fh.write(data))
    return Path(path)
