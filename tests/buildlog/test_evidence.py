"""Evidence and entities in every finding (buildlog/evidence.py, entities.py), over the whole corpus, and the
entity extractor on lines as the tools write them."""

from __future__ import annotations

from pathlib import Path

from trtverify.buildlog.entities import extract
from trtverify.buildlog.evidence import HEAD, LINE, TAIL, cut
from trtverify.buildlog.lines import clean_line
from trtverify.buildlog.parser import parse

DATA = Path(__file__).resolve().parents[1] / "data"
LOGS = sorted(DATA.glob("logcorpus/*/*.log")) + sorted(DATA.glob("buildlogs/**/*.log"))


def test_every_finding_of_the_corpus_has_its_lines_and_entities() -> None:
    findings = more = with_entities = 0
    for path in LOGS:
        text = path.read_text(encoding="utf-8", errors="replace")
        raw = text.split("\n")
        data = parse(text).dump()  # what --json and results.json carry
        for f in data["findings"]:
            findings += 1
            assert "entities" in f and f["evidence"], (path.name, f["kind"])
            shown = [e for e in f["evidence"] if e["line"] is not None]
            for e in shown:  # the line as written, cut only in the middle
                want = clean_line(raw[e["line"] - 1])
                assert e["text"] == want or (len(want) > LINE and e["text"] == cut(want)), (path.name, e)
            distinct = list(dict.fromkeys(f["lines"]))
            assert [e["line"] for e in shown] == (distinct if len(distinct) <= HEAD + TAIL + 1 else
                                                 distinct[:HEAD] + distinct[-TAIL:])  # fmt: skip
            if len(shown) < len(distinct):  # never silently dropped: the rest counted
                more += 1
                assert f["evidence"][HEAD]["text"].startswith(f"... {len(distinct) - HEAD - TAIL} more lines")
            with_entities += bool(f["entities"])
    assert (findings, more > 10, with_entities > findings // 2) == (findings, True, True) and findings > 300, (
        findings,
        more,
        with_entities,
    )


def test_entities_as_the_tools_write_them() -> None:
    got = extract(
        "Requested amount of GPU memory (33555480576 bytes) could not be allocated; workspace 512 MiB, 1.5 GB\n"
        "Engine generation completed in 15.4544 seconds. Total time: 00:00:47; Latency: mean = 2.47 ms\n"
        "[virtualMemoryBuffer.cpp::resizePhysical::140] Error Code 2: OutOfMemory; loading /models/resnet50.engine\n"
        "No importer registered for op: DCN; Layer '/model.22/Concat' (CONCATENATION); input shape [1,3,640,640]\n"
        "TensorRT version: 10.4.0, CUDA 12.2, libnvinfer.so.8.6.1, [TensorRT v8502]"
    )
    assert {"text": "33555480576 bytes", "bytes": 33555480576} in got["sizes"]
    assert {"text": "512 MiB", "bytes": 512 << 20} in got["sizes"]
    assert {"text": "1.5 GB", "bytes": 1_500_000_000} in got["sizes"]
    assert {"text": "15.4544 seconds", "seconds": 15.4544} in got["durations"]
    assert {"text": "00:00:47", "seconds": 47.0} in got["durations"]
    assert {"text": "2.47 ms", "seconds": 0.00247} in got["durations"]
    assert "Error Code 2" in got["error_codes"]
    assert "/models/resnet50.engine" in got["files"] and "virtualMemoryBuffer.cpp" in got["files"]
    assert "DCN" in got["ops"] and "/model.22/Concat" in got["names"] and "[1,3,640,640]" in got["shapes"]
    versions = {(v["tool"], v["version"]) for v in got["versions"]}
    assert {("TensorRT", "10.4.0"), ("CUDA", "12.2"), ("TensorRT", "8.6.1"), ("TensorRT", "8.5.2")} <= versions
    # a timestamp is not a duration, a date is not a path
    assert extract("[10/12/2024-15:46:16] [TRT] [I] done") == {}
