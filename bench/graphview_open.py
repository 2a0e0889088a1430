"""How long report.html takes from opening to the graph view drawn (issue 49 item 2's "within 3 s"), in headless
Chromium (Debian's chromium + chromedriver, selenium): the demo detector's layerwise report and the 5,018-node model's
(tests/report/bigmodel.py, one MatMul planted x1.5, FP16), each opened --repeat times in a fresh page load.

Per report: the page's own load events (domContentLoaded, load) and the graph box's `drawnAt` (ms from navigation
start to the default view drawn) and `initMs` (reading the data, laying out and drawing). No peer draws this graph
offline, so there is no ratio here: this is a measurement of trtverify alone.

    python bench/graphview_open.py [--repeat 5] [--out bench/results/graphview_open.md]
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.conftest import write_suite  # noqa: E402
from tests.report import bigmodel  # noqa: E402
from tests.stages.layerwise.test_layerwise import plant, suite_text, to_fp16  # noqa: E402
from trtverify.cli.run import run_and_record  # noqa: E402
from trtverify.config.loader import load_suite  # noqa: E402
from trtverify.runner import RunOptions  # noqa: E402

FAULT = bigmodel.block_node(3, 41, "fc2/MatMul")
TIMES = """const t = performance.getEntriesByType('navigation')[0], b = document.getElementById('lw-graph-0-0');
return {dcl: t.domContentLoadedEventEnd, load: t.loadEventEnd, drawn: +b.dataset.drawnAt, init: +b.dataset.initMs,
        size: document.documentElement.outerHTML.length};"""


def runs(tmp: Path) -> dict[str, Path]:
    det = tmp / "detector"
    run_and_record(load_suite(ROOT / "suites" / "shapes_detection.yaml"), det, RunOptions(stages=("layerwise",)))
    big = tmp / "big"
    big.mkdir()
    assert bigmodel.write(big / "ref.onnx") == 5018
    plant(big / "ref.onnx", big / "cand.onnx", FAULT, 1.5)
    to_fp16(big / "cand.onnx", big / "cand.onnx")
    inputs = "  samples: 1\n  generate:\n    input: {shape: [2, 8], range: [-1, 1]}\n"
    text = suite_text("ref.onnx", {"fp16": "cand.onnx"}, inputs).replace("samples: 2", "samples: 1")
    run_and_record(load_suite(write_suite(big, text)), big / "out")
    return {"demo detector (37 nodes)": det / "report.html", "5,018-node model": big / "out" / "report.html"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1366,900"):
        opts.add_argument(a)
    lines = [
        f"# Report open to graph drawn, headless Chromium ({platform.processor() or platform.machine()}, "
        f"{args.repeat} fresh loads each)",
        "",
        "| report | size | DOMContentLoaded ms | load ms | graph drawn ms (median, max) | graph init ms (median) |",
        "|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        reports = runs(Path(tmp))
        driver = webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=opts)
        try:
            for name, report in reports.items():
                got = []
                for _ in range(args.repeat):
                    driver.get("about:blank")
                    driver.get(report.as_uri())
                    got.append(driver.execute_script(TIMES))
                med = {k: statistics.median(g[k] for g in got) for k in ("dcl", "load", "drawn", "init")}
                lines.append(
                    f"| {name} | {report.stat().st_size / 1e6:.2f} MB | {med['dcl']:.0f} | {med['load']:.0f} | "
                    f"{med['drawn']:.0f}, {max(g['drawn'] for g in got):.0f} | {med['init']:.0f} |"
                )
        finally:
            driver.quit()
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
