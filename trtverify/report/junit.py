"""JUnit XML from results.json: one test case per check, so CI systems list what failed and by how much."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from trtverify.fsutil import atomic_write


def _fmt(v: Any) -> str:
    from trtverify.report import _fmt as f

    return f(v)


def junit_xml(results: dict[str, Any]) -> bytes:
    suite_name = results["suite"]["name"]
    root = ET.Element("testsuites", name=f"trtverify {suite_name}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for stage in results["stages"]:
        checks = stage.get("checks", [])
        ts = ET.SubElement(
            root, "testsuite", name=f"{suite_name}.{stage['name']}", time=f"{float(stage.get('duration_s') or 0):.3f}"
        )
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for c in checks:
            tc = ET.SubElement(ts, "testcase", classname=f"{suite_name}.{stage['name']}", name=c["name"], time="0")
            counts["tests"] += 1
            if not c["passed"]:
                counts["failures"] += 1
                msg = f"{c.get('metric')} = {_fmt(c.get('value'))}, limit {c.get('op')} {_fmt(c.get('threshold'))}"
                fail = ET.SubElement(tc, "failure", message=msg, type="check")
                detail = c.get("detail")
                fail.text = (
                    msg
                    + (f"\ndetail: {detail}" if detail else "")
                    + (f"\ntensor: {c['tensor']}" if c.get("tensor") else "")
                )
        if stage.get("error"):
            tc = ET.SubElement(ts, "testcase", classname=f"{suite_name}.{stage['name']}", name="stage runs", time="0")
            err = ET.SubElement(
                tc,
                "error",
                message=str(stage["error"].get("message", ""))[:500],
                type=str(stage["error"].get("kind", "error")),
            )
            err.text = stage["error"].get("traceback") or stage["error"].get("message", "")
            counts["tests"] += 1
            counts["errors"] += 1
        elif stage.get("status") == "skipped":
            tc = ET.SubElement(ts, "testcase", classname=f"{suite_name}.{stage['name']}", name="stage runs", time="0")
            ET.SubElement(tc, "skipped", message="; ".join(stage.get("notes", [])) or "skipped")
            counts["tests"] += 1
            counts["skipped"] += 1
        for k, v in counts.items():
            ts.set(k, str(v))
            totals[k] += v
    for k, v in totals.items():
        root.set(k, str(v))
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="utf-8")


def write_junit(results: dict[str, Any], path: Path) -> Path:
    data = junit_xml(results)
    atomic_write(Path(path), lambda fh: fh.write(data))
    return Path(path)
